"""Tests of the example plugin, written as a plugin author would: simulated hardware from the
``intelrt`` pytest plugin, and the conformance suite. Run: ``pytest docs/examples/intelrt-gemma2-eager``."""

from __future__ import annotations

import json
from pathlib import Path

import intelrt


def _model(root: Path, model_type: str, architecture: str) -> str:
    root.mkdir()
    (root / "config.json").write_text(json.dumps({
        "model_type": model_type, "architectures": [architecture], "vocab_size": 256, "hidden_size": 64,
        "num_hidden_layers": 2, "num_attention_heads": 4, "attn_logit_softcapping": 50.0}))
    return str(root)


def test_gemma2_on_an_intel_gpu_gets_eager_attention(simulate, tmp_path):  # type: ignore[no-untyped-def]
    simulate("xpu", count=1)
    plan = intelrt.plan(_model(tmp_path / "gemma2", "gemma2", "Gemma2ForCausalLM"))
    attention = plan.decisions["attention"]
    assert (attention.value, attention.plugin, attention.forced) == ("eager", "gemma2_eager", False)


def test_the_users_choice_and_other_families_are_left_alone(simulate, tmp_path):  # type: ignore[no-untyped-def]
    simulate("xpu", count=1)
    forced = intelrt.plan(_model(tmp_path / "gemma2", "gemma2", "Gemma2ForCausalLM"), attention="flex_attention")
    assert forced.decisions["attention"].value == "flex_attention" and forced.decisions["attention"].forced
    other = intelrt.plan(_model(tmp_path / "llama", "llama", "LlamaForCausalLM"))
    assert other.decisions["attention"].plugin != "gemma2_eager"


def test_the_plugin_conforms(check_conformance):  # type: ignore[no-untyped-def]
    check_conformance("gemma2_eager").raise_for_violations()
