"""The ``cuda`` backend (NVIDIA, and ROCm builds of torch that report as cuda)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING

from ..errors import PlanError
from ..hooks.markers import hookimpl
from ..hooks.payloads import DecisionValue
from ..hooks.types import BackendStatus, Decision, DeviceInfo, EnvVar, Finding
from .defaults import attention_fallback
from .parallelism import ShardingSupport, decide_parallelism

if TYPE_CHECKING:
    from ..planning.model_source import ModelInfo
    from ..planning.request import Request

PRIORITY = 50
#: NCCL runs DDP, FSDP2 (accelerate enables FSDP for MULTI_GPU ranks), DeepSpeed and tensor parallel.
CUDA_SHARDING = ShardingSupport("nccl")


@hookimpl
def intelrt_detect(env: Mapping[str, str]) -> list[BackendStatus]:
    try:
        import torch
    except ImportError:
        return [BackendStatus("cuda", "cuda", False, "torch is not installed", PRIORITY)]
    versions = {"torch": str(torch.__version__), "cuda": str(torch.version.cuda)}
    if torch.version.cuda is None and getattr(torch.version, "hip", None) is None:
        return [BackendStatus("cuda", "cuda", False, f"torch {torch.__version__} is not a CUDA build",
                              PRIORITY, versions=versions)]
    if not torch.cuda.is_available():
        return [BackendStatus("cuda", "cuda", False, "torch.cuda.is_available() is False (no GPU or driver)",
                              PRIORITY, versions=versions)]
    devices = []
    for i in range(torch.cuda.device_count()):
        props = torch.cuda.get_device_properties(i)
        devices.append(DeviceInfo(i, props.name, int(props.total_memory),
                                  bool(torch.cuda.is_bf16_supported()) if i == 0 else None))
    if devices:
        bf16 = devices[0].bf16
        devices = [DeviceInfo(d.index, d.name, d.total_memory, bf16) for d in devices]
    return [BackendStatus("cuda", "cuda", bool(devices), f"{len(devices)} CUDA device(s) visible",
                          PRIORITY, devices=tuple(devices), versions=versions)]


@hookimpl
def intelrt_setup_env(backend: BackendStatus, request: Request) -> list[EnvVar | Finding] | None:
    if backend.name != "cuda" or request.devices is None:
        return None
    if backend.devices and max(request.devices) >= backend.device_count:
        raise PlanError(f"devices={list(request.devices)}: only {backend.device_count} CUDA device(s) "
                        f"are visible (ids 0..{backend.device_count - 1})")
    ids = ",".join(str(d) for d in request.devices)
    return [EnvVar("CUDA_VISIBLE_DEVICES", ids, "devices= selects these GPUs", overwrite_user=True),
            EnvVar("CUDA_DEVICE_ORDER", "PCI_BUS_ID", "ids follow PCI bus order, as nvidia-smi shows them")]


@hookimpl
def intelrt_select_attention(backend: BackendStatus, request: Request, model: ModelInfo) -> Decision | None:
    if backend.name != "cuda" or request.is_forced("attention"):
        return None
    return attention_fallback(model) or Decision(
        "sdpa", "torch SDPA picks flash / memory-efficient kernels on CUDA by itself")


@hookimpl
def intelrt_select_collective(backend: BackendStatus) -> Decision | None:
    if backend.name != "cuda":
        return None
    return Decision("nccl", "NCCL is the collective library for NVIDIA GPUs")


@hookimpl
def intelrt_select_parallelism(backend: BackendStatus, request: Request, model: ModelInfo, env: Mapping[str, str],
                               decisions: Mapping[str, DecisionValue]) -> Decision | None:
    if backend.name != "cuda":
        return None
    return decide_parallelism(backend, request, model, env, decisions, CUDA_SHARDING)
