"""``TrainingArguments`` keywords for Gaudi (SPEC H8, H9, H10)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from intelrt.plugin import Backend, Plan, PlanError, Setting

from .compiler import lazy_refusal
from .facts import COMPILE_BACKENDS, FIRST_GENERATION, execution_mode, generation


def training_arguments(backend: Backend, plan: Plan, overrides: Mapping[str, Any]) -> list[Setting]:
    """H8 bf16 on every generation; H9 ``torch_compile_backend="hpu_backend"``; H10 ``hccl``.

    The user's keywords win, except ones that cannot run on Gaudi (``PlanError``).
    """
    settings: list[Setting] = []
    if overrides.get("fp16") and generation(backend) == FIRST_GENERATION:
        raise PlanError("fp16=True: first-generation Gaudi has no float16; use bf16=True (every Gaudi generation "
                        "supports bfloat16)")
    dtype = plan.decided.dtype
    if "bf16" not in overrides and "fp16" not in overrides and dtype != "float16":
        settings.append(Setting("bf16", True, "every Gaudi generation supports bfloat16", claim="H8"))
    backend_choice = overrides.get("torch_compile_backend")
    if backend_choice is not None and backend_choice not in COMPILE_BACKENDS:
        raise PlanError(f"torch_compile_backend={backend_choice!r} does not run on Gaudi; use 'hpu_backend' (set for "
                        "you when torch_compile=True) or 'eager'")
    lazy, mode = execution_mode(backend, {})
    if overrides.get("torch_compile") and lazy:
        raise lazy_refusal("torch_compile=True", mode)
    if overrides.get("torch_compile") and backend_choice is None:
        settings.append(Setting("torch_compile_backend", "hpu_backend",
                                "torch.compile on Gaudi uses hpu_backend", claim="H9"))
    settings += static_shapes(lazy, mode, overrides)
    ddp = overrides.get("ddp_backend")
    if ddp is not None and ddp != "hccl":
        raise PlanError(f"ddp_backend={ddp!r} does not run on Gaudi: its collective library is HCCL; use "
                        "ddp_backend='hccl' or leave it unset (intelrt sets it)")
    return settings


def static_shapes(lazy: bool, mode: str, overrides: Mapping[str, Any]) -> list[Setting]:
    """Static shapes in training: Gaudi compiles a graph per input shape (lazy mode; torch.compile with
    ``dynamic=False``), so the last, smaller batch of an epoch would compile again. Optimum Habana fills or
    drops it ("In lazy mode, the last batch is filled with extra samples by default", Optimum Habana's
    *Accelerating Training*; ``dataloader_drop_last`` turns accelerate's ``even_batches`` off,
    ``optimum/habana/transformers/training_args.py``). intelrt's causal-LM data is cut into equal blocks
    already (``training/data.py``), so the batches are otherwise static."""
    if "dataloader_drop_last" in overrides or not (lazy or overrides.get("torch_compile")):
        return []
    why = f"lazy mode ({mode})" if lazy else "torch_compile=True (hpu_backend compiles per shape)"
    return [Setting("dataloader_drop_last", True, f"{why}: Gaudi compiles a graph per input shape, so the last, "
                    "smaller batch of each epoch would compile again; Optimum Habana drops or fills it (its "
                    "training_args.py); the causal-LM blocks are all one length already", claim="H8")]

