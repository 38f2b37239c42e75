"""The ``cpu`` backend: always available, the reference every other backend is compared to."""

from __future__ import annotations

import os
import platform
from collections.abc import Mapping
from typing import TYPE_CHECKING

from ..errors import PlanError
from ..hooks.markers import hookimpl
from ..hooks.payloads import DecisionValue
from ..hooks.types import BackendStatus, Decision, DeviceInfo, EnvVar, Finding
from .parallelism import ShardingSupport, decide_parallelism

if TYPE_CHECKING:
    from ..planning.model_source import ModelInfo
    from ..planning.request import Request

#: The CPU's ranks over gloo: real multi-process runs for tests. accelerate enables FSDP only for
#: accelerator ranks (``AcceleratorState``: ``MULTI_GPU``, ``MULTI_XPU``, ``MULTI_HPU`` …, never
#: ``MULTI_CPU``), where ``TrainingArguments(fsdp=True)`` would train plain DDP without a word; so
#: the CPU's FSDP2 is transformers' own, sharding the weights as they load.
CPU_SHARDING = ShardingSupport(
    "gloo", fsdp="transformers",
    fsdp_source="on the CPU accelerate never builds FSDP (AcceleratorState enables it for accelerator ranks only, "
                "not MULTI_CPU), so transformers shards the weights as they load: "
                "from_pretrained(distributed_config=DistributedConfig(fsdp_size=N)), the same torch fully_shard over gloo",
    deepspeed_missing="accelerate runs DeepSpeed only on accelerators (AcceleratorState: ACCELERATE_USE_DEEPSPEED and "
                      "not cpu); use sharding='fsdp' or 'ddp' on the CPU",
    notes=("CPU ranks are for tests: gloo runs every collective FSDP2 and tensor parallel need",))


@hookimpl
def intelrt_detect(env: Mapping[str, str]) -> list[BackendStatus]:
    name = platform.processor() or platform.machine() or "cpu"
    return [BackendStatus(
        name="cpu", device_type="cpu", available=True, priority=0,
        reason=f"the CPU is always available ({os.cpu_count()} cores)",
        devices=(DeviceInfo(0, name),))]


@hookimpl
def intelrt_setup_env(backend: BackendStatus, request: Request) -> list[EnvVar | Finding] | None:
    if backend.name != "cpu":
        return None
    if request.devices is not None:
        raise PlanError(f"devices={list(request.devices)} selects accelerator devices; the cpu backend "
                        "has none to select. Leave devices unset, or choose an accelerator backend.")
    return None


@hookimpl
def intelrt_select_compile(backend: BackendStatus, request: Request) -> Decision | None:
    """Refuses what cannot run on the CPU; otherwise the generic decision applies."""
    if backend.name != "cpu" or request.quantization != "4bit" or request.compile in ("auto", "none"):
        return None
    raise PlanError(f"quantization='4bit' with compile={request.compile!r} cannot run on the CPU: bitsandbytes "
                    "repacks 4-bit weights into its CPU layout during the first forward call "
                    "(bitsandbytes.nn.Linear4bit.forward), so the compiled graph no longer matches its weights and "
                    "fails. Pass compile='none' with 4-bit on the CPU (or quantization='8bit' to compile)")


@hookimpl
def intelrt_select_parallelism(backend: BackendStatus, request: Request, model: ModelInfo, env: Mapping[str, str],
                               decisions: Mapping[str, DecisionValue]) -> Decision | None:
    if backend.name != "cpu":
        return None
    return decide_parallelism(backend, request, model, env, decisions, CPU_SHARDING)
