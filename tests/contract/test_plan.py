"""The plan as data: decisions with reasons, forced flags, JSON, table; safety refusals (C5)."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

import intelrt
from intelrt.errors import ConfigurationError, ModelSourceError, PlanError, UnsafeModelError


def test_plan_holds_every_decision_with_reason_and_plugin(tiny_model: Path) -> None:
    plan = intelrt.plan(tiny_model)
    assert plan.backend.name == "cpu" and plan.device == "cpu"
    assert plan.task == "text-generation"
    for name in ("dtype", "quantization", "placement", "attention", "kernels", "compile", "batching", "collective"):
        decision = plan.decisions[name]
        assert decision.reason and decision.plugin and decision.forced is False, name
    assert plan.decided.attention == "sdpa" and plan.decided.dtype == "float32"


def test_plan_marks_forced_choices(tiny_model: Path) -> None:
    plan = intelrt.plan(tiny_model, dtype="bf16", attention="eager", compile="none")
    assert plan.decisions["dtype"].value == "bfloat16" and plan.decisions["dtype"].forced
    assert plan.decisions["attention"].value == "eager" and plan.decisions["attention"].forced
    assert plan.decisions["compile"].forced and plan.decided.compile.enabled is False
    assert not plan.decisions["placement"].forced


def test_plan_serialises_to_json_and_prints_as_a_table(tiny_model: Path) -> None:
    plan = intelrt.plan(tiny_model)
    data = json.loads(plan.to_json())
    assert data["backend"]["name"] == "cpu"
    assert data["decisions"]["attention"] == {"value": "sdpa", "reason": plan.decisions["attention"].reason,
                                              "plugin": "defaults", "forced": False, "claim": None, "notes": []}
    text = str(plan)
    assert "attention" in text and "sdpa" in text and "defaults" in text
    assert text.splitlines()[1].startswith("  backend: cpu (1 device)")


def test_plan_under_simulated_xpu_names_two_devices(simulate, tiny_model: Path) -> None:  # type: ignore[no-untyped-def]
    simulate("xpu", count=2, product="max1100")  # one tile per card (a Max 1550 card is two devices)
    plan = intelrt.plan(tiny_model)
    assert plan.backend.name == "xpu" and plan.backend.device_count == 2


def test_planning_touches_no_device_beyond_detection(simulate, tiny_model: Path) -> None:  # type: ignore[no-untyped-def]
    sim = simulate("xpu", count=2)
    intelrt.plan(tiny_model)
    # detection loads the driver and reads count, names, memory and bf16 — nothing allocates or runs on a device
    assert set(sim.calls) <= {"xpu.driver_init", "xpu.device_count", "xpu.init", "xpu.get_device_properties"}


def test_plan_of_a_missing_path_says_so(tmp_path: Path) -> None:
    with pytest.raises(ModelSourceError, match="no such directory"):
        intelrt.plan(str(tmp_path / "nope" / "model"))


def test_plan_of_a_directory_without_config(tmp_path: Path) -> None:
    with pytest.raises(ModelSourceError, match="no config.json"):
        intelrt.plan(tmp_path)


def test_plan_of_an_uncached_hub_id_downloads_nothing() -> None:
    with pytest.raises(ModelSourceError, match="not in the local hub cache, and planning downloads nothing"):
        intelrt.plan("intelrt-test/definitely-not-cached")


@pytest.mark.claim("C5")
def test_c5_pickle_only_checkpoint_is_refused_unless_opted_in(tiny_model: Path, tmp_path: Path) -> None:
    model_dir = tmp_path / "pickled"
    shutil.copytree(tiny_model, model_dir)
    (model_dir / "model.safetensors").unlink()
    (model_dir / "pytorch_model.bin").write_bytes(b"not really a pickle")
    with pytest.raises(UnsafeModelError, match=r"only pickle weights \(pytorch_model.bin\).*allow_pickle=True"):
        intelrt.plan(model_dir)
    plan = intelrt.plan(model_dir, allow_pickle=True)
    assert "pickle weights allowed by the caller" in " ".join(plan.notes)


@pytest.mark.claim("C5")
def test_c5_remote_code_is_refused_unless_trusted(tiny_model: Path, tmp_path: Path) -> None:
    model_dir = tmp_path / "remote"
    shutil.copytree(tiny_model, model_dir)
    config = json.loads((model_dir / "config.json").read_text())
    config["auto_map"] = {"AutoModelForCausalLM": "modeling_evil.EvilForCausalLM"}
    (model_dir / "config.json").write_text(json.dumps(config))
    with pytest.raises(UnsafeModelError, match="trust_remote_code=True"):
        intelrt.plan(model_dir)
    assert intelrt.plan(model_dir, trust_remote_code=True).request.trust_remote_code


def test_impossible_forced_attention_is_a_plan_error(tiny_model: Path) -> None:
    with pytest.raises(PlanError, match="flash_attention_2' needs a GPU"):
        intelrt.plan(tiny_model, attention="flash_attention_2")
    with pytest.raises(PlanError, match="not an attention implementation"):
        intelrt.plan(tiny_model, attention="fast_please")


@pytest.mark.parametrize("kwargs, message", [
    ({"dtype": "int3"}, "dtype='int3' is not one of"),
    ({"quantization": "2bit"}, "quantization='2bit' is not one of"),
    ({"devices": "a,b"}, "every id must be a whole number"),
    ({"devices": [0, 0]}, "a device id is repeated"),
    ({"devices": 2}, "pass a list of device ids"),
    ({"device_map": "cpu"}, "device_map= is decided by the plan; pass devices=/backend="),
    ({"trust_remote_code": "yes"}, "trust_remote_code must be True or False"),
])
def test_bad_request_arguments_are_clear_errors(tiny_model: Path, kwargs: dict, message: str) -> None:  # type: ignore[type-arg]
    with pytest.raises(ConfigurationError, match=message.replace("(", r"\(").replace(")", r"\)")):
        intelrt.plan(tiny_model, **kwargs)


def test_cpu_backend_refuses_device_ids(tiny_model: Path) -> None:
    with pytest.raises(PlanError, match="the cpu backend has none to select"):
        intelrt.plan(tiny_model, devices=[0])
