"""X10: ``TrainingArguments`` keywords for Intel GPUs.

transformers' ``TrainingArguments`` picks ``xpu:0`` by itself (``xpu:LOCAL_RANK`` in a launched
rank). Its bf16 check, ``torch.xpu.is_bf16_supported()``, is True on every XPU since torch 2.8
because it counts emulation; intelrt asks whether the device has *native* bfloat16
(``has_bfloat16_conversions``) before ``TrainingArguments`` exists, so a device that would emulate
it gets fp16 (auto) or a clear error (explicit ``bf16=True``).
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from typing import Any

from intelrt.plugin import (
    Backend,
    Plan,
    PlanError,
    Setting,
    is_distributed_launch,
)

from .collective import LEGACY_CCL, xccl_missing, xccl_usable
from .devices import in_process_index
from .facts import XCCL_TORCH_FLOOR, device_label


def _check_overrides(backend: Backend, overrides: Mapping[str, Any], bf16_ok: bool) -> None:
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
        raise PlanError(f"ddp_backend='ccl': {LEGACY_CCL}; use ddp_backend='xccl' (torch >= {XCCL_TORCH_FLOOR}) or "
                        "leave it to intelrt")
    raise PlanError(f"ddp_backend={wanted!r} does not reduce XPU tensors; Intel GPUs use ddp_backend='xccl' "
                    "(or leave it to intelrt)")


def native_bf16(index: int) -> bool:
    """Whether XPU ``index`` computes bfloat16 natively (``has_bfloat16_conversions``); torch
    >= 2.8's ``is_bf16_supported()`` also answers True where it only emulates it."""
    import torch

    properties = torch.xpu.get_device_properties(index)
    return bool(getattr(properties, "has_bfloat16_conversions", True))


def _check_device(backend: Backend, plan: Plan, launched: bool) -> None:
    devices = list(plan.request.devices or ())
    if launched or not devices:
        return
    index = in_process_index(backend, devices[0])
    if index != 0:
        raise PlanError(f"devices={devices}: transformers' TrainingArguments trains a single process on xpu:0, and "
                        f"device {devices[0]} is xpu:{index} in this process (its Level Zero driver enumerated every "
                        f"device before the mask could select one). Start the training with the plan's environment: "
                        f"intelrt launch --devices {','.join(map(str, devices))} train.py (or ZE_AFFINITY_MASK="
                        f"{devices[0]} python train.py)")


def _precision(backend: Backend, plan: Plan, bf16_ok: bool) -> list[Setting]:
    device = device_label(backend)
    dtype = plan.decided.dtype
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


def training_arguments(backend: Backend, plan: Plan, overrides: Mapping[str, Any]) -> list[Setting]:
    """X10/X11: precision from the device's native bfloat16 (asked before TrainingArguments
    exists), ``ddp_backend="xccl"`` in a launched rank; impossible overrides → ``PlanError``
    naming the device. The device itself needs no keyword: TrainingArguments picks ``xpu:0``
    (``xpu:LOCAL_RANK`` in a rank), so ``devices=`` naming another device in this process is refused."""
    launched = is_distributed_launch()
    _check_device(backend, plan, launched)
    rank = os.environ.get("LOCAL_RANK", "0")
    # the device TrainingArguments will train on (accelerate: xpu:LOCAL_RANK in a rank, else xpu:0)
    bf16_ok = native_bf16(int(rank) if launched and rank.isascii() and rank.isdigit() else 0)
    _check_overrides(backend, overrides, bf16_ok)
    settings: list[Setting] = []
    if "bf16" not in overrides and "fp16" not in overrides:
        settings += _precision(backend, plan, bf16_ok)
    if "ddp_backend" not in overrides and launched and plan.decided.collective == "xccl":
        # Only in a launched rank: in a single process an explicit ddp_backend makes accelerate
        # look for a process group that does not exist.
        settings.append(Setting("ddp_backend", "xccl", "this process is a rank of a distributed run on Intel GPUs",
                                claim="X11"))
    return settings
