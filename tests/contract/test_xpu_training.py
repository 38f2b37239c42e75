"""X10 TrainingArguments on Intel GPUs and X11 the collective backend — the hook's settings build a
real transformers TrainingArguments under the simulated XPU runtime."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import pytest
import torch
from transformers import TrainingArguments  # imported before any simulation (module-level probes)

import intelrt
from intelrt.errors import PlanError
from intelrt.host.manager import get_host

DEVICE = "Intel(R) Data Center GPU Max 1550"


def xpu_settings(plan: Any, **overrides: Any) -> dict[str, Any]:
    """What the xpu plugin's intelrt_training_arguments hook contributes, as keywords."""
    results = get_host().training_arguments(backend=plan.backend, plan=plan, overrides=overrides)
    settings = [s for plugin, s in results if plugin == "xpu"]
    assert all(s.reason for s in settings)
    return {s.name: s for s in settings}


@pytest.mark.claim("X10")
def test_X10_bf16_is_asked_of_the_device_and_trainingarguments_trains_on_xpu0(  # type: ignore[no-untyped-def]
        simulate, tiny_model: Path, tmp_path: Path) -> None:
    sim = simulate("xpu", count=2)
    plan = intelrt.plan(tiny_model)
    sim.calls.clear()
    settings = xpu_settings(plan)
    assert settings["bf16"].value is True and settings["bf16"].claim == "X10"
    assert "has native bfloat16 (has_bfloat16_conversions)" in settings["bf16"].reason
    assert DEVICE in settings["bf16"].reason
    assert sim.calls == ["xpu.get_device_properties"]  # asked before TrainingArguments exists
    assert "ddp_backend" not in settings  # a single process: accelerate must not look for a process group
    args = TrainingArguments(output_dir=str(tmp_path), report_to="none",
                             **{name: s.value for name, s in settings.items()})
    assert args.bf16 is True and args.device == torch.device("xpu", 0)  # no device setting needed
    assert "xpu.set_device" in sim.calls


@pytest.mark.claim("X10")
def test_X10_explicit_bf16_on_a_device_without_it_is_refused_naming_the_device(  # type: ignore[no-untyped-def]
        simulate, tiny_model: Path, tmp_path: Path) -> None:
    simulate("xpu", count=1, bf16=False, name="Intel(R) Arc(TM) A380 Graphics")
    plan = intelrt.plan(tiny_model)
    with pytest.raises(PlanError, match=r"bf16=True, but Intel\(R\) Arc\(TM\) A380 Graphics \(xpu:0\) has no "
                                        r"native bfloat16 \(has_bfloat16_conversions is False\): torch would emulate"):
        xpu_settings(plan, bf16=True)
    # what intelrt prevents: torch >= 2.8 counts emulation, so transformers accepts bf16=True silently
    assert torch.xpu.is_bf16_supported() is True and torch.xpu.is_bf16_supported(including_emulation=False) is False
    assert TrainingArguments(output_dir=str(tmp_path), report_to="none", bf16=True).bf16 is True


@pytest.mark.claim("X10")
def test_X10_auto_precision_without_bf16_is_fp16_with_the_reason(simulate, tiny_model: Path, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    simulate("xpu", count=1, bf16=False)
    plan = intelrt.plan(tiny_model)
    settings = xpu_settings(plan)
    assert settings["fp16"].value is True and "bf16" not in settings
    assert "has no native bfloat16 (has_bfloat16_conversions is False" in settings["fp16"].reason
    args = TrainingArguments(output_dir=str(tmp_path), report_to="none", use_cpu=True,
                             **{name: s.value for name, s in settings.items()})
    assert args.fp16 is True and args.bf16 is False


@pytest.mark.claim("X10")
def test_X10_requested_float32_trains_in_float32(simulate, tiny_model: Path) -> None:  # type: ignore[no-untyped-def]
    simulate("xpu", count=1)
    settings = xpu_settings(intelrt.plan(tiny_model, dtype="float32"))
    assert settings["bf16"].value is False and settings["fp16"].value is False
    assert "dtype='float32' was requested" in settings["bf16"].reason
    assert xpu_settings(intelrt.plan(tiny_model), fp16=True) == {}  # your precision keyword wins


@pytest.mark.claim("X11")
def test_X11_xccl_is_the_collective_and_legacy_ccl_is_refused(simulate, tiny_model: Path) -> None:  # type: ignore[no-untyped-def]
    simulate("xpu", count=2)
    plan = intelrt.plan(tiny_model)
    decision = plan.decisions["collective"]
    assert (decision.value, decision.plugin, decision.claim) == ("xccl", "xpu", "X11")
    choices = TrainingArguments.__dataclass_fields__["ddp_backend"].metadata["choices"]
    assert "xccl" in choices and "ccl" not in choices  # what the refusal below relies on
    with pytest.raises(PlanError, match=r"ddp_backend='ccl': the legacy 'ccl' backend .* is not among transformers 5"):
        xpu_settings(plan, ddp_backend="ccl")
    with pytest.raises(PlanError, match="ddp_backend='nccl' does not reduce XPU tensors"):
        xpu_settings(plan, ddp_backend="nccl")


@pytest.mark.claim("X11")
def test_X11_a_launched_rank_gets_ddp_backend_xccl(simulate, tiny_model: Path) -> None:  # type: ignore[no-untyped-def]
    simulate("xpu", count=2, env={"LOCAL_RANK": "1", "WORLD_SIZE": "2"})
    settings = xpu_settings(intelrt.plan(tiny_model))
    assert settings["ddp_backend"].value == "xccl" and settings["ddp_backend"].claim == "X11"
    assert os.environ["LOCAL_RANK"] == "1"


@pytest.mark.claim("X11")
def test_X11_torch_below_2_7_has_no_xccl(simulate, tiny_model: Path) -> None:  # type: ignore[no-untyped-def]
    simulate("xpu", count=2, torch_version="2.6.0")
    plan = intelrt.plan(tiny_model)  # one process still plans fine
    decision = plan.decisions["collective"]
    assert decision.value is None and "asks for xccl from torch 2.7" in decision.reason
    assert "legacy 'ccl'" in decision.reason
    with pytest.raises(PlanError, match=r"nproc=2 needs the xccl collective backend: torch 2\.6\.0 has no xccl"):
        get_host().launch_env(backend=plan.backend, plan=plan, nproc=2, env={})
    with pytest.raises(PlanError, match=r"ddp_backend='xccl': torch 2\.6\.0 has no xccl"):
        xpu_settings(plan, ddp_backend="xccl")
