"""The ``cuda`` backend (NVIDIA, and ROCm builds of torch that report as cuda).

CUDA decodes with intelrt's fast loop: the step compiled by inductor and captured in a CUDA
graph, so a token costs one graph launch and no host synchronisation; a list of prompts goes
through that loop's engine, its rows decoding together (measured against transformers in
docs/performance.md).
How much warm-up a step gets follows the work (``decode_rules.decode_warmup``).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

from ..errors import PlanError
from ..hooks.backend import Backend, Endorsement, ShardingSupport, Situation
from ..hooks.markers import hookimpl
from ..hooks.payloads import BatchingChoice
from ..hooks.types import BackendStatus, Decision, DeviceInfo, EnvVar, Finding
from .capture import stream_capturer
from .decode_rules import (
    compact_step,
    decode_attention_kernel,
    decode_blockers,
    decode_compile,
    decode_graphs,
    decode_warmup,
    fast_decode,
    fast_decode_planned,
    kernel_blocker,
    padded_generate_instead,
    quantized,
    quantized_step,
    triton_installed,
)
from .generic import NVIDIA_ONLY_ATTENTION, attention_fallback

#: NCCL runs DDP, FSDP2 (accelerate enables FSDP for MULTI_GPU ranks), DeepSpeed and tensor parallel.
CUDA_SHARDING = ShardingSupport("nccl")
CUDA_INDUCTOR_OPTIONS = {"coordinate_descent_tuning": True}
"""For the compiled step, compact or the model's own forward. inductor's ``freezing`` made the model's
own forward faster (Qwen3-0.6B shape on an H200: 1.81 against 2.33 ms/token) but bakes a second copy of
the weights into the step, which training would leave stale; the compact step fuses its projections
itself (docs/performance.md)."""
QUANTIZED_COMPILE = ("{method} weights: torch.compile over their kernels is not measured here (compile='on' asks for "
                     "it); a failing graph capture falls back to an uncaptured step, with a note")


class CudaBackend(Backend):
    """NVIDIA GPUs through torch's CUDA build."""

    name = "cuda"
    device_type = "cuda"
    priority = 50
    fast_decode_4bit = True
    max_padded_batch = 256
    """Prompts per padded batch on CUDA (fewer when the KV cache would not fit free memory)."""

    @classmethod
    def detect(cls, env: Mapping[str, str]) -> BackendStatus:
        try:
            import torch
        except ImportError:
            return BackendStatus("cuda", "cuda", False, "torch is not installed", cls.priority)
        versions = {"torch": str(torch.__version__), "cuda": str(torch.version.cuda)}
        if torch.version.cuda is None and getattr(torch.version, "hip", None) is None:
            return BackendStatus("cuda", "cuda", False, f"torch {torch.__version__} is not a CUDA build",
                                 cls.priority, versions=versions)
        if not torch.cuda.is_available():
            return BackendStatus("cuda", "cuda", False, "torch.cuda.is_available() is False (no GPU or driver)",
                                 cls.priority, versions=versions)
        bf16 = bool(torch.cuda.is_bf16_supported())
        devices = tuple(DeviceInfo(i, torch.cuda.get_device_properties(i).name,
                                   int(torch.cuda.get_device_properties(i).total_memory), bf16)
                        for i in range(torch.cuda.device_count()))
        if devices:  # what quantized kernels need (docs/quantization.md: sm >= 8.0 for int4, 8.9 for FP8)
            major, minor = torch.cuda.get_device_capability(0)
            versions["compute_capability"] = f"{major}.{minor}"
        return BackendStatus("cuda", "cuda", bool(devices), f"{len(devices)} CUDA device(s) visible",
                             cls.priority, devices=devices, versions=versions)

    @property
    def sharding_support(self) -> ShardingSupport:
        return CUDA_SHARDING

    def run_environment(self, s: Situation) -> Sequence[EnvVar | Finding] | None:
        if s.request.devices is None:
            return None
        devices = [int(d) for d in s.request.devices]  # whole ids: the planner refused card.tile ones (tile_ids)
        if self.devices and max(devices) >= self.device_count:
            raise PlanError(f"devices={list(devices)}: only {self.device_count} CUDA device(s) "
                            f"are visible (ids 0..{self.device_count - 1})")
        ids = ",".join(str(d) for d in devices)
        return [EnvVar("CUDA_VISIBLE_DEVICES", ids, "devices= selects these GPUs", overwrite_user=True),
                EnvVar("CUDA_DEVICE_ORDER", "PCI_BUS_ID", "ids follow PCI bus order, as nvidia-smi shows them")]

    def graph_capturer(self, kind: str) -> Callable[..., Any] | None:
        if kind != "cuda":
            return None
        import torch

        def record(graph: Any, stream: Any) -> Any:
            return torch.cuda.graph(graph, stream=stream, capture_error_mode="thread_local")

        return stream_capturer(torch.cuda, torch.cuda.CUDAGraph, record)

    def select_attention(self, s: Situation) -> Decision:
        return attention_fallback(s.model) or Decision(
            "sdpa", "torch SDPA picks flash / memory-efficient kernels on CUDA by itself")

    def check_attention(self, value: str, s: Situation) -> Endorsement | None:
        if value.removeprefix("paged|") in NVIDIA_ONLY_ATTENTION:
            return Endorsement("FlashAttention-3 and -4 ship builds for NVIDIA GPUs")
        return None

    def select_collective(self, s: Situation) -> Decision:
        return Decision("nccl", "NCCL is the collective library for NVIDIA GPUs")

    def select_decode(self, s: Situation) -> Decision | None:
        request, model, decided = s.request, s.model, s.decided
        if decode_blockers(model, decided, four_bit=True) is not None:
            return None  # the generic rule explains the fallback
        choice = decided.quantization if quantized(decided) else None
        step, step_reason = ("model", quantized_step(choice)) if choice is not None else compact_step(model, decided.task)
        misfit = kernel_blocker(model, decided.task) if step == "compact" else None
        graphs = decode_graphs(request, "cuda", "")
        compiler = None if choice is not None else decode_compile(request, "inductor")
        warm = decode_warmup(request, graphs, compiler, "graphs='off'",
                             QUANTIZED_COMPILE.format(method=choice.method if choice else ""))
        parts = ["static KV cache", step_reason, warm.reason]
        if warm.compile == "inductor":
            parts.append("compiled kernels coordinate-descent-tuned")
        if warm.kind == "static" and request.attention_kernel == "auto":
            kernel = False  # its first use compiles and tunes a Triton kernel: seconds a short call would not win back
            parts.append("decode attention in torch operations (the Triton kernel's first-use compile and tuning "
                         "would not pay for one short call)")
        else:
            kernel = decode_attention_kernel(request, triton_installed(), "Triton is not installed", step, misfit)
            if misfit and step == "compact":
                parts.append(f"decode attention in torch operations (the one-kernel attention does not serve it: "
                             f"{misfit})")
        if warm.graphs is None and graphs is None:
            parts.append("no CUDA graph (graphs='off'): one kernel launch per op")
        return fast_decode(warm.graphs, warm.compile, "; ".join(parts), compile_options=CUDA_INDUCTOR_OPTIONS,
                           step=step, attention_kernel=kernel, warmup=warm.kind)

    def select_batching(self, s: Situation) -> Decision | None:
        request, decided = s.request, s.decided
        if request.batching == "padded":
            return None
        fast = fast_decode_planned(decided)
        fallback = padded_generate_instead(request, s.model, decided, self.max_padded_batch)
        if fallback is not None:
            return fallback
        if request.batching == "auto" and fast:
            return Decision(BatchingChoice.padded("fast", self.max_padded_batch),
                            f"lists through the fast decode loop's engine, up to {self.max_padded_batch} rows at once "
                            "(more prompts join as rows free up): the CUDA-graph decode step costs about the same for "
                            "1 or 64 rows (weights are read once per step) and beats transformers' continuous "
                            "batching's per-step scheduling "
                            "(docs/performance.md)",
                            notes=("batching='continuous' uses transformers' generate_batch instead",))
        why = "" if request.batching == "continuous" else "the fast decode loop is off; "
        graphs = request.graphs != "off"
        return Decision(BatchingChoice.continuous(use_graphs=graphs, use_async_batching=True),
                        f"{why}continuous batching with CUDA graphs "
                        f"{'on' if graphs else 'off (graphs=off)'} and async double-buffering (H200-class memory "
                        "affords the doubled buffers)", claim="X7")


@hookimpl
def intelrt_backends() -> list[type[Backend]]:
    return [CudaBackend]
