"""bitsandbytes 4-bit models on the fast decode loop (issue 18): the model's own forward — its
``Linear4bit`` projections dequantize their weights — over the loop's static KV cache, greedy
tokens identical to plain ``generate`` on the same quantized model (bitsandbytes runs 4-bit on
the CPU); 8-bit models stay on ``generate``, with the reason."""

from __future__ import annotations

from pathlib import Path

import pytest
from varied_weights import varied_copy

import intelrt

pytest.importorskip("bitsandbytes")

PROMPTS = ["Intel GPUs are", "the cat sat on the mat and then", "hello"]


@pytest.fixture(scope="module")
def quantized(tiny_model: Path, tmp_path_factory: pytest.TempPathFactory) -> intelrt.Loaded:
    return intelrt.load(varied_copy(tiny_model, tmp_path_factory.mktemp("varied"), seed=4), quantization="4bit")


def test_the_plan_runs_4bit_models_on_the_fast_loop_with_their_own_forward(quantized: intelrt.Loaded) -> None:
    decode = quantized.plan.decisions["decode"]
    assert (decode.value.method, decode.value.step, decode.value.compile) == ("fast", "model", None)
    assert "Linear4bit" in decode.reason


@pytest.mark.parametrize("prompts", [PROMPTS[:1], PROMPTS], ids=["batch1", "padded3"])
def test_4bit_fast_loop_equals_generate(quantized: intelrt.Loaded, prompts: list[str]) -> None:
    import torch

    tokenizer = quantized.tokenizer
    tokenizer.padding_side = "left"
    inputs = tokenizer(prompts, return_tensors="pt", padding=True)
    with torch.inference_mode():
        out = quantized.model.generate(**inputs, max_new_tokens=12, do_sample=False, eos_token_id=None,
                                       pad_token_id=tokenizer.pad_token_id)
    expected = out[:, inputs["input_ids"].shape[1]:].tolist()
    got = quantized.generate_ids([tokenizer(p)["input_ids"] for p in prompts], max_new_tokens=12, eos_token_id=None)
    report = quantized.last_generation
    assert report is not None and (report.path, report.step, report.notes) == ("fast", "model", [])
    assert type(quantized.model.model.layers[0].self_attn.q_proj).__name__ == "Linear4bit"
    assert got == expected
    assert any(len(set(row)) > 2 for row in expected)  # the output changes token to token


def test_8bit_models_stay_on_generate_and_say_why(tiny_model: Path) -> None:
    decode = intelrt.plan(tiny_model, quantization="8bit").decisions["decode"]
    assert decode.value.method == "generate" and "LLM.int8" in decode.reason
