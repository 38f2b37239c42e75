"""The ``cpu`` backend: always available, the reference every other backend is compared to.

Everything the CPU does differently from intelrt's generic rules is here: float32 by default,
no device selection, gloo ranks for tests, no fp16 training, FlashAttention refused, the decode
loop eager (no device graphs; compile warm-up outweighs its gain), lists through that loop's
engine, up to 64 rows at once.
"""

from __future__ import annotations

import os
import platform
from collections.abc import Mapping, Sequence
from typing import Any

from ..errors import PlanError
from ..hooks.backend import Backend, Endorsement, ShardingSupport, Situation
from ..hooks.markers import hookimpl
from ..hooks.payloads import CompileChoice, QuantizationChoice
from ..hooks.plan import Plan
from ..hooks.types import BackendStatus, Decision, DeviceInfo, EnvVar, Finding, Setting
from ..quantization.methods import CPU_QUANTIZATION
from .decode_rules import fast_decode_planned

#: The CPU's ranks over gloo: real multi-process runs for tests. accelerate enables FSDP only for
#: accelerator ranks (``AcceleratorState``: ``MULTI_GPU``, ``MULTI_XPU``, ``MULTI_HPU`` …, never
#: ``MULTI_CPU``), where ``TrainingArguments(fsdp=True)`` would train plain DDP without a word; so
#: the CPU's FSDP2 is transformers' own, sharding the weights as they load.
CPU_SHARDING = ShardingSupport(
    "gloo", collective_reason="gloo is torch.distributed's CPU backend", fsdp="transformers",
    fsdp_source="on the CPU accelerate never builds FSDP (AcceleratorState enables it for accelerator ranks only, "
                "not MULTI_CPU), so transformers shards the weights as they load: "
                "from_pretrained(distributed_config=DistributedConfig(fsdp_size=N)), the same torch fully_shard over gloo",
    deepspeed_missing="accelerate runs DeepSpeed only on accelerators (AcceleratorState: ACCELERATE_USE_DEEPSPEED and "
                      "not cpu); use sharding='fsdp' or 'ddp' on the CPU",
    notes=("CPU ranks are for tests: gloo runs every collective FSDP2 and tensor parallel need",))

CPU_FLEX_OVER_4BIT = ("bitsandbytes 4-bit weights with attention='flex_attention' on the CPU: flex attention compiles "
                      "its kernel with inductor's C++ backend, which fails to build over the 4-bit layers, so "
                      "transformers' generate runs them (or choose attention='sdpa' for the fast loop)")
TRITON_INTERPRET = "TRITON_INTERPRET"
"""``1``: Triton runs its kernels in its interpreter, on the CPU."""


def bitsandbytes_4bit(choice: QuantizationChoice | None) -> bool:
    """Weights in bitsandbytes' 4-bit layers (quantized while loading, or a 4-bit checkpoint)."""
    return choice is not None and choice.method == "bitsandbytes" and choice.bits == 4


class CpuBackend(Backend):
    """The CPU: torch's own device, on every machine."""

    name = "cpu"
    device_type = "cpu"
    priority = 0
    ranks_are_devices = False
    fp16_training = False
    computes_on_host = True
    quantization_columns = CPU_QUANTIZATION
    step_attention_reason = ("the CPU runs intelrt's Triton kernels only under Triton's interpreter "
                             f"({TRITON_INTERPRET}=1, with Triton installed)")
    # the fast loop eager (no device graphs; compile warm-up outweighs its gain), lists through its engine
    fast_decode = True
    fast_decode_4bit = True
    compact_decode = True
    max_padded_batch = 64
    engine_batching = True
    # continuous batching without graphs or double-buffering, its KV cache sized from the requests (sizing it
    # from free memory takes seconds)
    continuous_graphs = False
    async_batching = False
    kv_sizing = "requests"

    @classmethod
    def detect(cls, env: Mapping[str, str]) -> BackendStatus:
        name = platform.processor() or platform.machine() or "cpu"
        return BackendStatus(name="cpu", device_type="cpu", available=True, priority=cls.priority,
                             reason=f"the CPU is always available ({os.cpu_count()} cores)", devices=(DeviceInfo(0, name),))

    @property
    def sharding_support(self) -> ShardingSupport:
        return CPU_SHARDING

    def device_module(self) -> Any | None:
        return None  # the host's own memory and cores: no allocator, stream or event to ask

    def compiled_for(self, device: Any) -> str:
        return "cpu"

    def run_environment(self, s: Situation) -> Sequence[EnvVar | Finding] | None:
        if s.request.devices is not None:
            raise PlanError(f"devices={list(s.request.devices)} selects accelerator devices; the cpu backend "
                            "has none to select. Leave devices unset, or choose an accelerator backend.")
        return None

    def training_arguments(self, plan: Plan, overrides: Mapping[str, Any]) -> Sequence[Setting] | None:
        return None if "use_cpu" in overrides else [Setting("use_cpu", True, "the plan runs on the CPU")]

    def select_dtype(self, s: Situation) -> Decision:
        return Decision("float32", "CPU: float32 is exact and fast on every CPU; pass dtype='bfloat16' to halve memory")

    def check_attention(self, value: str, s: Situation) -> Endorsement | None:
        if value.removeprefix("paged|") == "flash_attention_2":
            raise PlanError(f"attention={value!r} needs a GPU; on the CPU use 'sdpa' (the default) or 'eager'")
        return None

    def check_compile(self, value: CompileChoice, s: Situation) -> Endorsement | None:
        if value.enabled and bitsandbytes_4bit(s.decided.quantization):
            raise PlanError(f"bitsandbytes 4-bit weights with compile={s.request.compile!r} cannot run on the CPU: bitsandbytes "
                            "repacks 4-bit weights into its CPU layout during the first forward call "
                            "(bitsandbytes.nn.Linear4bit.forward), so the compiled graph no longer matches its weights "
                            "and fails. Pass compile='none' with 4-bit on the CPU (or quantization='8bit' to compile)")
        return None

    def decode_problem(self, s: Situation) -> str | None:
        choice = s.decided.quantization
        if bitsandbytes_4bit(choice) and s.decided.attention == "flex_attention":
            return CPU_FLEX_OVER_4BIT
        return None

    def graphs_missing(self, s: Situation) -> str | None:
        return "the CPU has no device graphs"

    def runs_triton(self, s: Situation) -> bool:
        # On the CPU intelrt's Triton kernels run only under Triton's interpreter, as the test suite runs them.
        return s.env.get(TRITON_INTERPRET) == "1"

    def select_batching(self, s: Situation) -> Decision | None:
        """Only a refusal: every list of a plan decoding through transformers' generate with flex
        attention fails on the CPU; the batching rule decides the rest."""
        decided = s.decided
        if not fast_decode_planned(decided) and decided.attention == "flex_attention" \
                and decided.task == "text-generation":
            raise PlanError("attention='flex_attention' cannot generate from a list of prompts on the CPU when "
                            "transformers' generate decodes (the plan's decode decision says why the fast decode loop "
                            "is off): its continuous batching does not run flex attention, and a padded batch fails to "
                            "build flex attention's CPU kernel (inductor). Use attention='sdpa' (the default) or "
                            "'eager'")
        return None


@hookimpl
def intelrt_backends() -> list[type[Backend]]:
    return [CpuBackend]
