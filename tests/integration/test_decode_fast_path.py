"""intelrt's fast decode loop on the CPU: same tokens as ``model.generate``, the path named, fallbacks
explained (issue 6). The tiny model gets large random weights so greedy output varies token to
token — a loop that fed back the wrong token or position would not match."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from varied_weights import varied_copy

import intelrt
from intelrt.errors import ConfigurationError, PlanError
from intelrt.plugin import DecodeChoice

PROMPTS = ["Intel GPUs are", "hello", "the cat sat on the mat and then", "x"]


@pytest.fixture(scope="module")
def varied_model(tiny_model: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    return varied_copy(tiny_model, tmp_path_factory.mktemp("varied"), seed=1)


@pytest.fixture(scope="module")
def loaded(varied_model: Path) -> intelrt.Loaded:
    return intelrt.load(varied_model)


def plain_generate(loaded: intelrt.Loaded, prompts: list[str], **kwargs: Any) -> list[list[int]]:
    """transformers alone: left-padded batch, greedy, new tokens cut after the first EOS."""
    import torch

    tokenizer = loaded.tokenizer
    tokenizer.padding_side = "left"
    inputs = tokenizer(prompts, return_tensors="pt", padding=True)
    settings = {"max_new_tokens": 24, "do_sample": False, "pad_token_id": tokenizer.pad_token_id, **kwargs}
    with torch.inference_mode():
        out = loaded.model.generate(**inputs, **settings)
    eos = settings.get("eos_token_id", loaded.model.generation_config.eos_token_id)
    rows = []
    for row in out[:, inputs["input_ids"].shape[1]:].tolist():
        end = next((i + 1 for i, t in enumerate(row) if t == eos), len(row))
        rows.append(row[:end])
    return rows


def ids_of(loaded: intelrt.Loaded, prompts: list[str]) -> list[list[int]]:
    return [loaded.tokenizer(p)["input_ids"] for p in prompts]


def test_decode_plan_names_the_fast_path_on_cpu(loaded: intelrt.Loaded) -> None:
    decision = loaded.plan.decisions["decode"]
    assert decision.value == DecodeChoice("fast", cache="static", step="compact", warmup="eager", step_tokens=2048,
                                          step_attention="torch")
    assert decision.plugin == "cpu" and "static KV cache" in decision.reason
    assert "qwen3 layers run as intelrt's compact step" in decision.reason
    assert "decode" in str(loaded.plan) and "method=fast" in str(loaded.plan)


def test_decode_greedy_batch_1_equals_generate_token_for_token(loaded: intelrt.Loaded) -> None:
    ours = loaded.generate_ids(ids_of(loaded, PROMPTS[:1])[0], max_new_tokens=24)
    assert loaded.last_generation is not None and loaded.last_generation.path == "fast"
    assert loaded.last_generation.step == "compact" and not loaded.last_generation.notes
    assert loaded.last_generation.reason == loaded.plan.decisions["decode"].reason
    theirs = plain_generate(loaded, PROMPTS[:1])[0]
    assert len(set(theirs)) > 4, "the model must vary its tokens for this test to mean anything"
    assert ours == theirs
    text = loaded.generate(PROMPTS[0], max_new_tokens=24)
    assert text == loaded.tokenizer.decode(theirs, skip_special_tokens=True)


def test_decode_greedy_batch_4_with_padding_equals_generate(loaded: intelrt.Loaded) -> None:
    ours = loaded.generate_ids(ids_of(loaded, PROMPTS), max_new_tokens=24)
    report = loaded.last_generation
    assert report is not None
    assert (report.path, report.step, report.batches, report.prompts) == ("fast", "compact", 1, 4)
    assert ours == plain_generate(loaded, PROMPTS)
    texts = loaded.generate(PROMPTS, max_new_tokens=24)
    assert texts == [loaded.tokenizer.decode(row, skip_special_tokens=True) for row in ours]


def test_decode_stops_each_row_at_eos_like_generate(loaded: intelrt.Loaded) -> None:
    free = plain_generate(loaded, PROMPTS)
    eos = free[2][5]  # a token row 2 produces mid-way: it must stop there, other rows wherever it appears
    ours = loaded.generate_ids(ids_of(loaded, PROMPTS), max_new_tokens=24, eos_token_id=eos)
    theirs = plain_generate(loaded, PROMPTS, eos_token_id=eos)
    assert ours == theirs
    assert ours[2][-1] == eos and len(ours[2]) <= 6


def test_decode_sampling_runs_on_the_fast_path(loaded: intelrt.Loaded) -> None:
    import torch

    greedy = loaded.generate_ids(ids_of(loaded, PROMPTS), max_new_tokens=12)
    # top_k=1 sampling can only pick the argmax: the sampling step must agree with greedy search.
    torch.manual_seed(0)
    assert loaded.generate_ids(ids_of(loaded, PROMPTS), max_new_tokens=12, do_sample=True, top_k=1,
                               temperature=0.7) == greedy
    assert loaded.last_generation.path == "fast"
    torch.manual_seed(0)
    sampled = loaded.generate_ids(ids_of(loaded, PROMPTS), max_new_tokens=12, do_sample=True, temperature=1.5,
                                  top_p=0.9)
    assert loaded.last_generation.path == "fast" and sampled != greedy


@pytest.mark.parametrize("kwargs, named", [
    ({"repetition_penalty": 1.3}, "repetition_penalty=1.3"),
    ({"num_beams": 2}, "num_beams=2"),
    ({"no_repeat_ngram_size": 2}, "no_repeat_ngram_size=2"),
])
def test_decode_falls_back_to_generate_naming_the_setting(loaded: intelrt.Loaded, kwargs: dict[str, Any],
                                                          named: str) -> None:
    ours = loaded.generate_ids(ids_of(loaded, PROMPTS[:2]), max_new_tokens=10, **kwargs)
    report = loaded.last_generation
    assert report is not None
    assert report.path == "generate" and named in report.reason
    assert ours == plain_generate(loaded, PROMPTS[:2], max_new_tokens=10, **kwargs)


def test_decode_hands_unknown_generate_keywords_to_transformers(loaded: intelrt.Loaded) -> None:
    from transformers import LogitsProcessorList

    loaded.generate(PROMPTS[0], max_new_tokens=4, logits_processor=LogitsProcessorList())
    report = loaded.last_generation
    assert report is not None
    assert report.path == "generate" and "logits_processor" in report.reason


@pytest.mark.parametrize("kwargs, message", [
    ({"top_k": 1.5}, "top_k must be an int >= 0"),
    ({"temperature": 0}, "temperature must be a number > 0"),
    ({"top_p": 1.5}, r"top_p must be a number in \(0, 1\]"),
    ({"do_sample": "yes"}, "do_sample must be True or False"),
])
def test_decode_refuses_wrong_types(loaded: intelrt.Loaded, kwargs: dict[str, Any], message: str) -> None:
    with pytest.raises(ConfigurationError, match=message):
        loaded.generate(PROMPTS[0], max_new_tokens=4, **kwargs)


def test_decode_generate_ids_refuses_bad_prompts(loaded: intelrt.Loaded) -> None:
    with pytest.raises(ConfigurationError, match="non-empty list of token ids"):
        loaded.generate_ids([])
    with pytest.raises(ConfigurationError, match="non-empty list of token ids"):
        loaded.generate_ids([[1, 2], []])


def test_decode_encoder_models_plan_generate_with_the_reason(tmp_path: Path) -> None:
    from intelrt.tiny import build_encoder

    build_encoder(tmp_path)
    decision = intelrt.plan(tmp_path).decisions["decode"]
    assert decision.value.method == "generate" and "only text generation decodes" in decision.reason
    with pytest.raises(PlanError, match="graphs='on' needs intelrt's fast decode loop"):
        intelrt.plan(tmp_path, graphs="on")


def test_decode_graphs_on_the_cpu_is_refused(varied_model: Path) -> None:
    with pytest.raises(PlanError, match="the CPU has no device graphs"):
        intelrt.plan(varied_model, graphs="on")


def test_decode_compile_on_is_honoured_by_the_decode_step(varied_model: Path) -> None:
    plan = intelrt.plan(varied_model, compile="on")
    assert plan.decided.decode.compile == "inductor"
    assert intelrt.plan(varied_model, compile="none").decided.decode.compile is None
