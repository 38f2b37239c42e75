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
from ..hooks.types import BackendStatus, Decision, DeviceInfo, EnvVar, Finding
from ..quantization.methods import CUDA_QUANTIZATION
from .capture import stream_capturer
from .generic import NVIDIA_ONLY_ATTENTION, attention_fallback

#: NCCL runs DDP, FSDP2 (accelerate enables FSDP for MULTI_GPU ranks), DeepSpeed and tensor parallel.
CUDA_SHARDING = ShardingSupport("nccl", collective_reason="NCCL is the collective library for NVIDIA GPUs")

class CudaBackend(Backend):
    """NVIDIA GPUs through torch's CUDA build."""

    name = "cuda"
    device_type = "cuda"
    ray_resource = "GPU"
    priority = 50
    step_attention = "triton"
    step_attention_reason = "CUDA GPUs run Triton kernels"
    graph_kind = "cuda"
    varlen_attention = True
    quantization_columns = CUDA_QUANTIZATION
    # The fast loop: the step compiled by inductor (coordinate-descent tuned) and captured in a CUDA graph; work
    # of unknown length compiles on a background thread (measured in docs/performance.md).
    fast_decode = True
    fast_decode_4bit = True
    compact_decode = True
    decode_compiler = "inductor"
    decode_compile_options = {"coordinate_descent_tuning": True}
    """inductor's ``freezing`` made the model's own forward faster (Qwen3-0.6B shape on an H200: 1.81 against
    2.33 ms/token) but bakes a second copy of the weights into the step, which training would leave stale; the
    compact step fuses its projections itself (docs/performance.md)."""
    # A list through the loop's engine: its CUDA-graph step costs about the same for 1 or 64 rows (the weights
    # are read once per step) and beats transformers' continuous batching's per-step scheduling; continuous
    # batching, when asked for, with CUDA graphs and async double-buffering (H200-class memory affords them).
    max_padded_batch = 256
    """Prompts per padded batch on CUDA (fewer when the KV cache would not fit free memory)."""
    engine_batching = True
    continuous_graphs = True
    async_batching = True
    matrix_tflops = {
        "H200": 790.0,  # measured here: an 8192^3 bf16 product on random data (the device README's KINDS.md)
        "H100": 989.0, "H800": 989.0,  # NVIDIA H100 datasheet, SXM, dense bf16
        "A100": 312.0, "A800": 312.0,  # NVIDIA A100 datasheet, dense bf16
        "L40S": 362.0,  # NVIDIA L40S datasheet, dense bf16
        "L4": 121.0,  # NVIDIA L4 datasheet, dense bf16
    }

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

    def graph_capturer(self) -> Callable[..., Any] | None:
        import torch

        # One memory pool for every graph this capturer records (vLLM shares one the same way): the
        # engine replays them one at a time on one stream and keeps nothing of a graph's own memory
        # past its replay, so the pool holds the largest graph's intermediates, not their sum.
        pools: list[Any] = []  # made at the first capture: the handle needs a CUDA runtime

        def record(graph: Any, stream: Any) -> Any:
            if not pools:
                pools.append(torch.cuda.graph_pool_handle())
            return torch.cuda.graph(graph, stream=stream, pool=pools[0], capture_error_mode="thread_local")

        return stream_capturer(torch.cuda, torch.cuda.CUDAGraph, record)

    def capability(self, device: Any) -> tuple[int, int] | None:
        import torch

        major, minor = torch.cuda.get_device_capability(device)
        return int(major), int(minor)

    def select_attention(self, s: Situation) -> Decision:
        return attention_fallback(s.model) or Decision(
            "sdpa", "torch SDPA picks flash / memory-efficient kernels on CUDA by itself")

    def check_attention(self, value: str, s: Situation) -> Endorsement | None:
        if value.removeprefix("paged|") in NVIDIA_ONLY_ATTENTION:
            return Endorsement("FlashAttention-3 and -4 ship builds for NVIDIA GPUs")
        return None


@hookimpl
def intelrt_backends() -> list[type[Backend]]:
    return [CudaBackend]
