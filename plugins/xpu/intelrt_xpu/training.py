"""X10, X11: ``TrainingArguments`` keywords for Intel GPUs, and the collective backend ``xccl``.

transformers' ``TrainingArguments`` picks ``xpu:0`` by itself and raises ``ValueError`` for
``bf16=True`` when ``torch.xpu.is_bf16_supported()`` is False; intelrt asks the device first, so
the error (or the fallback to fp16) comes before ``TrainingArguments`` exists.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from intelrt.plugin import (
    BackendStatus,
    Decision,
    PlanError,
    Request,
    Setting,
    hookimpl,
    is_distributed_launch,
    world_size,
)

from .facts import XCCL_TORCH_FLOOR, device_label, mine, torch_at_least, torch_version

#: ``TrainingArguments.ddp_backend`` choices in transformers 5 (``ccl`` is gone).
DDP_CHOICES = ("nccl", "gloo", "mpi", "xccl", "hccl", "cncl", "mccl")
_LEGACY_CCL = ("the legacy 'ccl' backend (oneCCL bindings for PyTorch) is not among transformers 5 ddp_backend "
               f"choices ({' '.join(DDP_CHOICES)})")


def _xccl_missing(backend: BackendStatus) -> str:
    return (f"torch {torch_version(backend)} has no xccl collective backend (it needs torch >= {XCCL_TORCH_FLOOR}); "
            f"{_LEGACY_CCL}. Install torch >= {XCCL_TORCH_FLOOR} from the XPU index")


@hookimpl
def intelrt_select_collective(backend: BackendStatus, request: Request, env: Mapping[str, str]) -> Decision | None:
    """X11: ``xccl`` (torch >= 2.7, as accelerate picks it). Below 2.7 there is none: a
    distributed run (``WORLD_SIZE`` > 1) is refused, a single process is unaffected."""
    if not mine(backend):
        return None
    if torch_at_least(backend, XCCL_TORCH_FLOOR):
        return Decision("xccl", f"XCCL is torch.distributed's backend for Intel GPUs (torch >= {XCCL_TORCH_FLOOR}); "
                                "accelerate picks it too", claim="X11",
                        notes=(f"{_LEGACY_CCL}",
                               "one process per Intel GPU (torchrun / accelerate launch); DDP, FSDP2, DeepSpeed ZeRO "
                               "and tensor parallel run on top; every rank shares one ZE_AFFINITY_MASK and picks "
                               "xpu:LOCAL_RANK"))
    if world_size(env) > 1:
        raise PlanError(f"WORLD_SIZE={env['WORLD_SIZE']}: {_xccl_missing(backend)}")
    return Decision(None, f"no collective backend: {_xccl_missing(backend)}", claim="X11",
                    notes=("single-process runs are unaffected",))


def _check_overrides(backend: BackendStatus, overrides: Mapping[str, Any], bf16_ok: bool) -> None:
    device = device_label(backend)
    for key in ("bf16", "bf16_full_eval"):
        if overrides.get(key) is True and not bf16_ok:
            raise PlanError(f"{key}=True, but {device} has no bfloat16 support (torch.xpu.is_bf16_supported() is "
                            "False), so TrainingArguments would raise ValueError; pass fp16=True, or leave precision "
                            "to intelrt")
    wanted = overrides.get("ddp_backend")
    if wanted is None or wanted == "xccl":
        if wanted == "xccl" and not torch_at_least(backend, XCCL_TORCH_FLOOR):
            raise PlanError(f"ddp_backend='xccl': {_xccl_missing(backend)}")
        return
    if wanted == "ccl":
        raise PlanError(f"ddp_backend='ccl': {_LEGACY_CCL}; use ddp_backend='xccl' (torch >= {XCCL_TORCH_FLOOR}) or "
                        "leave it to intelrt")
    raise PlanError(f"ddp_backend={wanted!r} does not reduce XPU tensors; Intel GPUs use ddp_backend='xccl' "
                    "(or leave it to intelrt)")


def _precision(backend: BackendStatus, plan: Any, bf16_ok: bool) -> list[Setting]:
    device = device_label(backend)
    dtype = plan.value("dtype")
    dtype_decision = plan.decisions.get("dtype")
    if dtype == "bfloat16" and not bf16_ok:
        raise PlanError(f"the plan's dtype is bfloat16, but {device} has no bfloat16 support "
                        "(torch.xpu.is_bf16_supported() is False); plan with dtype='float16' or 'float32'")
    if dtype == "float32" and dtype_decision is not None and dtype_decision.forced:
        why = "dtype='float32' was requested: training stays in float32 (pass bf16=True or fp16=True for mixed precision)"
        return [Setting("bf16", False, why, claim="X10"), Setting("fp16", False, why, claim="X10")]
    if not bf16_ok:
        return [Setting("fp16", True, f"{device} has no bfloat16 (torch.xpu.is_bf16_supported() is False, asked "
                                      "before TrainingArguments exists): fp16 mixed precision with a gradient scaler",
                        claim="X10")]
    if dtype == "float16":
        return [Setting("fp16", True, "the plan's weights are float16: fp16 mixed precision", claim="X10")]
    return [Setting("bf16", True, f"torch.xpu.is_bf16_supported() is True for {device}, asked before "
                                  "TrainingArguments exists", claim="X10")]


@hookimpl
def intelrt_training_arguments(backend: BackendStatus, plan: Any, overrides: Mapping[str, Any]
                               ) -> list[Setting] | None:
    """X10/X11: precision from ``torch.xpu.is_bf16_supported()`` (asked before TrainingArguments
    exists), ``ddp_backend="xccl"`` in a launched rank; impossible overrides → ``PlanError``
    naming the device. The device itself needs no keyword: TrainingArguments picks ``xpu:0``."""
    if not mine(backend):
        return None
    import torch

    bf16_ok = bool(torch.xpu.is_bf16_supported())
    _check_overrides(backend, overrides, bf16_ok)
    settings: list[Setting] = []
    if "bf16" not in overrides and "fp16" not in overrides:
        settings += _precision(backend, plan, bf16_ok)
    launched = is_distributed_launch()
    if "ddp_backend" not in overrides and launched and plan.value("collective") == "xccl":
        # Only in a launched rank: in a single process an explicit ddp_backend makes accelerate
        # look for a process group that does not exist.
        settings.append(Setting("ddp_backend", "xccl", "this process is a rank of a distributed run on Intel GPUs",
                                claim="X11"))
    return settings
