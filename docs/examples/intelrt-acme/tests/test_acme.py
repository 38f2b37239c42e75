"""Tests of the example backend plugin on its simulated runtime. Run: ``pytest docs/examples/intelrt-acme``."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from intelrt_acme.testing import scenarios, simulate_acme

import intelrt


@pytest.fixture
def model(tmp_path: Path) -> str:
    (tmp_path / "config.json").write_text(json.dumps({
        "model_type": "qwen3", "architectures": ["Qwen3ForCausalLM"], "vocab_size": 256, "hidden_size": 64,
        "num_hidden_layers": 2, "num_attention_heads": 4}))
    return str(tmp_path)


def test_without_the_runtime_the_backend_is_unavailable_and_says_why(model: str) -> None:
    with pytest.raises(intelrt.BackendUnavailableError, match="Acme runtime .* is not installed"):
        intelrt.plan(model, backend="acme")


def test_on_two_simulated_cards_acme_plans_the_run(model: str) -> None:
    with simulate_acme(2):
        plan = intelrt.plan(model)
    assert plan.backend.name == "acme" and plan.backend.device_count == 2
    assert plan.decisions["dtype"].value == "bfloat16" and plan.decisions["dtype"].plugin == "acme"
    assert plan.decisions["collective"].value == "gloo"


def test_devices_select_cards_through_the_visibility_variable(model: str) -> None:
    with simulate_acme(2):
        plan = intelrt.plan(model, devices=[1])
    assert plan.env_to_set() == {"ACME_VISIBLE_DEVICES": "1"}


def test_the_plugin_conforms(check_conformance) -> None:  # type: ignore[no-untyped-def]
    report = check_conformance("acme", extra_scenarios=scenarios)
    report.raise_for_violations()
    assert "AcmeBackend.select_dtype" in report.answered
