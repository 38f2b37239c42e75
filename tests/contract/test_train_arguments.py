"""intelrt.training_arguments: TrainingArguments from a plan; user keywords win; impossible ones
are refused before transformers raises (issue 5; SPEC X10, X11, H8, H9, H10)."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

import intelrt
from intelrt.errors import ConfigurationError, PlanError
from intelrt.hooks.plan import Plan
from intelrt.planning.planner import plan_backend
from intelrt.training.arguments import training_settings


@pytest.fixture(autouse=True)
def transformers_imported_before_simulation() -> Iterator[None]:
    # Importing transformers' Trainer stack under a simulated XPU would make bitsandbytes put its
    # tables on the (fake) device: import it for real first.
    import transformers.training_args  # noqa: F401

    yield


def _settings(overrides: dict[str, Any] | None = None, plan: Plan | None = None) -> dict[str, Any]:
    return {s.name: s.value for s in training_settings(plan or plan_backend(), overrides or {})}


def _launched_rank(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("LOCAL_RANK", "0")
    monkeypatch.setenv("WORLD_SIZE", "2")


def test_cpu_backend_only_plan_gives_cpu_training_arguments(tmp_path: Path) -> None:
    args = intelrt.training_arguments(tmp_path, learning_rate=3e-4)
    assert args.use_cpu is True and args.device.type == "cpu"
    assert args.learning_rate == 3e-4 and args.output_dir == str(tmp_path)
    assert args.bf16 is False and args.fp16 is False and args.ddp_backend is None


def test_plan_from_a_loaded_model_and_user_keywords_win(tiny_model: Path, tmp_path: Path) -> None:
    plan = intelrt.plan(tiny_model, dtype="bfloat16")
    args = intelrt.training_arguments(tmp_path, plan=plan)
    assert args.bf16 is True  # the plan's bfloat16 becomes bf16 mixed precision
    assert intelrt.training_arguments(tmp_path, plan=plan, bf16=False).bf16 is False
    with pytest.raises(ConfigurationError, match=r"backend='xpu' contradicts plan=, which runs on 'cpu'"):
        intelrt.training_arguments(tmp_path, plan=plan, backend="xpu")
    with pytest.raises(ConfigurationError, match=r"plan= takes an intelrt Plan .* not str"):
        intelrt.training_arguments(tmp_path, plan="cpu")


def test_unknown_and_contradictory_keywords_are_intelrt_errors(tmp_path: Path) -> None:
    with pytest.raises(ConfigurationError, match=r"'per_device_batch_size' \(did you mean 'per_device_train_batch_size' or "):
        intelrt.training_arguments(tmp_path, per_device_batch_size=4)
    with pytest.raises(ConfigurationError, match="bf16=True and fp16=True"):
        intelrt.training_arguments(tmp_path, bf16=True, fp16=True)
    with pytest.raises(ConfigurationError, match=r"ddp_backend='gloo' applies to a distributed launch.*intelrt launch"):
        intelrt.training_arguments(tmp_path, ddp_backend="gloo")
    with pytest.raises(ConfigurationError, match=r"transformers refused these training arguments: .*save_steps"):
        intelrt.training_arguments(tmp_path, save_steps=1.5)


def test_ddp_backend_is_set_only_in_a_launched_rank(monkeypatch: pytest.MonkeyPatch) -> None:
    assert "ddp_backend" not in _settings()
    _launched_rank(monkeypatch)
    assert _settings()["ddp_backend"] == "gloo"


@pytest.mark.claim("X10")
def test_X10_xpu_precision_follows_bf16_support(simulate: Callable[..., Any], tmp_path: Path) -> None:
    simulate("xpu", count=2, bf16=False)
    settings = _settings()
    assert settings.get("fp16") is True and "bf16" not in settings
    with pytest.raises(PlanError, match=r"bf16=True.*Max 1550.*no native bfloat16"):
        intelrt.training_arguments(tmp_path, bf16=True)


@pytest.mark.claim("X10")
def test_X10_xpu_with_bf16_trains_in_bf16(simulate: Callable[..., Any]) -> None:
    simulate("xpu", count=1, bf16=True)
    assert _settings()["bf16"] is True


@pytest.mark.claim("X11")
def test_X11_xpu_rank_uses_xccl_and_refuses_nccl(simulate: Callable[..., Any], monkeypatch: pytest.MonkeyPatch,
                                                 tmp_path: Path) -> None:
    simulate("xpu", count=2)
    _launched_rank(monkeypatch)
    assert _settings()["ddp_backend"] == "xccl"
    with pytest.raises(PlanError, match="ddp_backend='nccl'"):
        intelrt.training_arguments(tmp_path, ddp_backend="nccl")


@pytest.mark.claim("H8")
@pytest.mark.claim("H9")
def test_H8_H9_gaudi_trains_in_bf16_and_compiles_with_hpu_backend(simulate: Callable[..., Any]) -> None:
    simulate("hpu", count=8, generation="gaudi1")
    settings = _settings({"torch_compile": True})
    assert settings["bf16"] is True and settings["torch_compile_backend"] == "hpu_backend"


@pytest.mark.claim("H10")
def test_H10_gaudi_rank_uses_hccl_and_nccl_is_refused_before_transformers(
        simulate: Callable[..., Any], monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    simulate("hpu", count=8)
    _launched_rank(monkeypatch)
    plan = plan_backend()  # one plan: Gaudi detection probes in a child process
    assert _settings(plan=plan)["ddp_backend"] == "hccl"
    assert _settings({"ddp_backend": "hccl"}, plan)["ddp_backend"] == "hccl"
    with pytest.raises(PlanError, match=r"ddp_backend='nccl'.*Gaudi.*hccl"):
        intelrt.training_arguments(tmp_path, plan=plan, ddp_backend="nccl")


def test_use_cpu_on_an_accelerator_plan_is_refused(simulate: Callable[..., Any], tmp_path: Path) -> None:
    simulate("xpu", count=1)
    with pytest.raises(PlanError, match=r"use_cpu=True contradicts the plan.*backend='cpu'"):
        intelrt.training_arguments(tmp_path, use_cpu=True)
