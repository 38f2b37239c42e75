"""X10, X11: ``TrainingArguments`` keywords for Intel GPUs, and the collective backend ``xccl``.

transformers' ``TrainingArguments`` picks ``xpu:0`` by itself (``xpu:LOCAL_RANK`` in a launched
rank). Its bf16 check, ``torch.xpu.is_bf16_supported()``, is True on every XPU since torch 2.8
because it counts emulation; intelrt asks whether the device has *native* bfloat16
(``has_bfloat16_conversions``) before ``TrainingArguments`` exists, so a device that would emulate
it gets fp16 (auto) or a clear error (explicit ``bf16=True``).

``xccl`` is chosen as accelerate chooses it: torch >= 2.7 *and* a build with XCCL
(``torch.distributed.is_xccl_available()``); without it accelerate picks no collective for the
ranks and torch.distributed fails to start their process group, deep inside TrainingArguments.
"""

from __future__ import annotations

import os
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

from .detection import XPU_INDEX
from .devices import in_process_index
from .facts import (
    XCCL_TORCH_FLOOR,
    XCCL_WHEELS_TORCH,
    device_label,
    mine,
    torch_at_least,
    torch_version,
    xccl_built,
)

#: ``TrainingArguments.ddp_backend`` choices in transformers 5 (``ccl`` is gone).
DDP_CHOICES = ("nccl", "gloo", "mpi", "xccl", "hccl", "cncl", "mccl")
_LEGACY_CCL = ("the legacy 'ccl' backend (oneCCL bindings for PyTorch) is not among transformers 5 ddp_backend "
               f"choices ({' '.join(DDP_CHOICES)})")


def xccl_usable(backend: BackendStatus) -> bool:
    """Whether accelerate would pick ``xccl``: torch >= 2.7 and a build with XCCL."""
    return torch_at_least(backend, XCCL_TORCH_FLOOR) and xccl_built(backend)


def xccl_missing(backend: BackendStatus) -> str:
    """Why this torch has no usable ``xccl``, naming the version or the build, and the fix."""
    install = f"install torch >= {XCCL_WHEELS_TORCH} from the XPU index (pip install torch --index-url {XPU_INDEX})"
    if not torch_at_least(backend, XCCL_TORCH_FLOOR):
        return (f"torch {torch_version(backend)} has no xccl collective backend for accelerate (it asks for xccl from "
                f"torch {XCCL_TORCH_FLOOR}); {_LEGACY_CCL}. {install[0].upper()}{install[1:]}")
    return (f"this torch build ({torch_version(backend)}) has no XCCL: torch.distributed.is_xccl_available() is False "
            "(built without USE_XCCL), so accelerate finds no collective for the Intel GPU (distributed_type NO) and "
            "torch.distributed stops every rank with \"Distributed package doesn't have XCCL built in\"; "
            f"{install} — Intel's XPU wheels include XCCL from {XCCL_WHEELS_TORCH}")


@hookimpl
def intelrt_select_collective(backend: BackendStatus, request: Request, env: Mapping[str, str]) -> Decision | None:
    """X11: ``xccl`` when accelerate would pick it (torch >= 2.7 and a build with XCCL). Without
    it there is none: a distributed run (``WORLD_SIZE`` > 1) is refused, a single process is unaffected."""
    if not mine(backend):
        return None
    if xccl_usable(backend):
        return Decision("xccl", f"XCCL is torch.distributed's backend for Intel GPUs: this torch "
                                f"({torch_version(backend)}) has it (torch.distributed.is_xccl_available()), and "
                                f"accelerate picks it from torch {XCCL_TORCH_FLOOR}", claim="X11",
                        notes=(f"{_LEGACY_CCL}",
                               "one process per Intel GPU (torchrun / accelerate launch); DDP, FSDP2, DeepSpeed ZeRO "
                               "and tensor parallel run on top; every rank shares one ZE_AFFINITY_MASK and picks "
                               "xpu:LOCAL_RANK"))
    if world_size(env) > 1:
        raise PlanError(f"WORLD_SIZE={env['WORLD_SIZE']}: {xccl_missing(backend)}")
    return Decision(None, f"no collective backend: {xccl_missing(backend)}", claim="X11",
                    notes=("single-process runs are unaffected",))


def _check_overrides(backend: BackendStatus, overrides: Mapping[str, Any], bf16_ok: bool) -> None:
    device = device_label(backend)
    for key in ("bf16", "bf16_full_eval"):
        if overrides.get(key) is True and not bf16_ok:
            raise PlanError(f"{key}=True, but {device} has no native bfloat16 (has_bfloat16_conversions is False): "
                            "torch would emulate every bfloat16 operation (torch.xpu.is_bf16_supported() counts "
                            "emulation, so TrainingArguments accepts it) at a fraction of the speed; pass fp16=True, "
                            "or leave precision to intelrt")
    wanted = overrides.get("ddp_backend")
    if wanted is None or wanted == "xccl":
        if wanted == "xccl" and not xccl_usable(backend):
            raise PlanError(f"ddp_backend='xccl': {xccl_missing(backend)}")
        return
    if wanted == "ccl":
        raise PlanError(f"ddp_backend='ccl': {_LEGACY_CCL}; use ddp_backend='xccl' (torch >= {XCCL_TORCH_FLOOR}) or "
                        "leave it to intelrt")
    raise PlanError(f"ddp_backend={wanted!r} does not reduce XPU tensors; Intel GPUs use ddp_backend='xccl' "
                    "(or leave it to intelrt)")


def native_bf16(index: int) -> bool:
    """Whether XPU ``index`` computes bfloat16 natively (``has_bfloat16_conversions``); torch
    >= 2.8's ``is_bf16_supported()`` also answers True where it only emulates it."""
    import torch

    properties = torch.xpu.get_device_properties(index)
    return bool(getattr(properties, "has_bfloat16_conversions", True))


def _check_device(backend: BackendStatus, plan: Any, launched: bool) -> None:
    devices = list(getattr(plan.request, "devices", None) or ())
    if launched or not devices:
        return
    env = dict(os.environ)
    index = in_process_index(backend, env, devices[0])
    if index != 0:
        raise PlanError(f"devices={devices}: transformers' TrainingArguments trains a single process on xpu:0, and "
                        f"device {devices[0]} is xpu:{index} in this process (its Level Zero driver enumerated every "
                        f"device before the mask could select one). Start the training with the plan's environment: "
                        f"intelrt launch --devices {','.join(map(str, devices))} train.py (or ZE_AFFINITY_MASK="
                        f"{devices[0]} python train.py)")


def _precision(backend: BackendStatus, plan: Any, bf16_ok: bool) -> list[Setting]:
    device = device_label(backend)
    dtype = plan.value("dtype")
    dtype_decision = plan.decisions.get("dtype")
    if dtype == "bfloat16" and not bf16_ok:
        raise PlanError(f"the plan's dtype is bfloat16, but {device} has no native bfloat16 "
                        "(has_bfloat16_conversions is False); plan with dtype='float16' or 'float32'")
    if dtype == "float32" and dtype_decision is not None and dtype_decision.forced:
        why = "dtype='float32' was requested: training stays in float32 (pass bf16=True or fp16=True for mixed precision)"
        return [Setting("bf16", False, why, claim="X10"), Setting("fp16", False, why, claim="X10")]
    if not bf16_ok:
        return [Setting("fp16", True, f"{device} has no native bfloat16 (has_bfloat16_conversions is False, asked "
                                      "before TrainingArguments exists; torch would emulate it): fp16 mixed "
                                      "precision with a gradient scaler", claim="X10")]
    if dtype == "float16":
        return [Setting("fp16", True, "the plan's weights are float16: fp16 mixed precision", claim="X10")]
    return [Setting("bf16", True, f"{device} has native bfloat16 (has_bfloat16_conversions), asked before "
                                  "TrainingArguments exists", claim="X10")]


@hookimpl
def intelrt_training_arguments(backend: BackendStatus, plan: Any, overrides: Mapping[str, Any]
                               ) -> list[Setting] | None:
    """X10/X11: precision from the device's native bfloat16 (asked before TrainingArguments
    exists), ``ddp_backend="xccl"`` in a launched rank; impossible overrides → ``PlanError``
    naming the device. The device itself needs no keyword: TrainingArguments picks ``xpu:0``
    (``xpu:LOCAL_RANK`` in a rank), so ``devices=`` naming another device in this process is refused."""
    if not mine(backend):
        return None
    launched = is_distributed_launch()
    _check_device(backend, plan, launched)
    rank = os.environ.get("LOCAL_RANK", "0")
    # the device TrainingArguments will train on (accelerate: xpu:LOCAL_RANK in a rank, else xpu:0)
    bf16_ok = native_bf16(int(rank) if launched and rank.isascii() and rank.isdigit() else 0)
    _check_overrides(backend, overrides, bf16_ok)
    settings: list[Setting] = []
    if "bf16" not in overrides and "fp16" not in overrides:
        settings += _precision(backend, plan, bf16_ok)
    if "ddp_backend" not in overrides and launched and plan.value("collective") == "xccl":
        # Only in a launched rank: in a single process an explicit ddp_backend makes accelerate
        # look for a process group that does not exist.
        settings.append(Setting("ddp_backend", "xccl", "this process is a rank of a distributed run on Intel GPUs",
                                claim="X11"))
    return settings
