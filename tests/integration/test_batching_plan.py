"""Batch generation: the plan decides padded batches through the fast loop or continuous batching
(SPEC X7), explains why, and ``Loaded.generate(list)`` follows it (issue 6)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

import intelrt
from intelrt.backends.cuda import CudaBackend
from intelrt.backends.decode_rules import decide_batching
from intelrt.decoding.continuous import config_kwargs
from intelrt.hooks.request import Request
from intelrt.plugin import BackendStatus, BatchingChoice, Decided, DecodeChoice, Situation

PROMPTS = ["Intel GPUs are", "hello", "the cat sat on the mat and then", "x"]
CUDA = CudaBackend(BackendStatus("cuda", "cuda", True, "1 CUDA device(s) visible", 50))
FAST = Decided(task="text-generation", decode=DecodeChoice("fast", cache="static", graphs="cuda", compile="inductor"))


def test_batching_plan_on_cpu_pads_through_the_fast_loop(tiny_model: Path) -> None:
    batching = intelrt.plan(tiny_model).decisions["batching"]
    assert batching.value.method == "padded" and batching.value.engine == "fast"
    assert batching.value.max_batch == 64 and batching.plugin == "cpu"
    assert "up to 64 rows at once" in batching.reason
    assert any("batching='continuous'" in n for n in batching.notes)


@pytest.mark.claim("X7")
def test_batching_forced_continuous_on_cpu_sizes_the_cache_from_the_requests_X7(tiny_model: Path) -> None:
    batching = intelrt.plan(tiny_model, batching="continuous").decisions["batching"]
    assert batching.forced and batching.claim == "X7"
    assert batching.value.method == "continuous"
    assert (batching.value.use_graphs, batching.value.use_async_batching, batching.value.kv_sizing) == (
        False, False, "requests")


def test_batching_cuda_pads_through_the_graph_step_or_configures_continuous(tiny_model: Path) -> None:
    model = intelrt.plan(tiny_model).model  # with its transformers class resolved
    auto = decide_batching(CUDA, Situation(Request.build(model.source), model, {}, FAST))
    assert auto.value.method == "padded" and auto.value.max_batch == 256
    assert "one step decodes every row, reading the weights once" in auto.reason
    forced = decide_batching(CUDA, Situation(Request.build(model.source, batching="continuous"), model, {}, FAST))
    assert forced.claim == "X7"
    assert (forced.value.use_graphs, forced.value.use_async_batching) == (True, True)
    off = decide_batching(CUDA, Situation(Request.build(model.source, batching="continuous", graphs="off"), model,
                                          {}, FAST))
    assert off.value.use_graphs is False and any("CUDA graphs off (graphs=off)" in n for n in off.notes)
    # padded batches are as large as the backend declares (0.1's rule used the base class's 64 everywhere)
    padded = decide_batching(CUDA, Situation(Request.build(model.source, batching="padded"), model, {}, FAST))
    assert padded.value.max_batch == 256 and "up to 256 prompts" in padded.reason


@pytest.mark.claim("X7")
def test_batching_xpu_uses_continuous_batching_with_graphs_left_to_transformers_X7(tiny_model: Path) -> None:
    from intelrt.testing.simulation import simulate

    with simulate("xpu", 1):
        plan = intelrt.plan(tiny_model)
    batching = plan.decisions["batching"]
    assert batching.value.method == "continuous" and batching.value.use_graphs is None
    assert any("batching='padded'" in n for n in batching.notes)  # the fast loop stays one word away


@pytest.mark.parametrize("fields, page_field", [
    ({"block_size", "num_blocks", "max_batch_tokens", "use_cuda_graph", "use_async_batching"}, "block_size"),
    ({"page_size", "num_blocks", "max_batch_tokens", "use_cuda_graph", "use_async_batching"}, "page_size"),
])
def test_batching_continuous_config_fits_transformers_5_17_and_5_24(fields: set[str], page_field: str) -> None:
    value = BatchingChoice.continuous(use_graphs=False, use_async_batching=None, kv_sizing="requests")
    kwargs = config_kwargs(value, [[1, 2, 3], [4] * 40], 8, fields)
    assert kwargs[page_field] == 32 and set(kwargs) <= fields
    assert kwargs["use_cuda_graph"] is False and "use_async_batching" not in kwargs  # None: transformers' auto
    assert kwargs["num_blocks"] * 32 >= (3 + 8) + (40 + 8)
    assert config_kwargs(BatchingChoice.continuous(), [[1]], 4, fields) == {}


@pytest.fixture(scope="module")
def continuous(tiny_model: Path) -> intelrt.Loaded:
    return intelrt.load(tiny_model, batching="continuous")


@pytest.mark.claim("X7")
def test_batching_continuous_generate_matches_generate_X7(continuous: intelrt.Loaded) -> None:
    import torch

    texts = continuous.generate(PROMPTS, max_new_tokens=6)
    report = continuous.last_generation
    assert report is not None
    assert report.path == "continuous" and report.reason == continuous.plan.decisions["batching"].reason
    tokenizer = continuous.tokenizer
    for prompt, text in zip(PROMPTS, texts, strict=True):
        ids = tokenizer(prompt, return_tensors="pt")
        with torch.inference_mode():
            out = continuous.model.generate(**ids, max_new_tokens=6, do_sample=False,
                                            pad_token_id=tokenizer.pad_token_id)
        assert text == tokenizer.decode(out[0, ids["input_ids"].shape[1]:], skip_special_tokens=True)
    continuous.generate(PROMPTS[0], max_new_tokens=4)  # one prompt is not a batch: the fast loop
    assert continuous.last_generation.path == "fast"


def test_batching_continuous_never_drops_a_setting_it_cannot_apply(continuous: intelrt.Loaded) -> None:
    kwargs: dict[str, Any] = {"max_new_tokens": 4, "repetition_penalty": 1.2}
    continuous.generate(PROMPTS, **kwargs)
    report = continuous.last_generation
    assert report is not None
    assert report.path == "generate"
    assert "continuous batching would drop settings it cannot apply" in report.reason
    assert "repetition_penalty=1.2" in report.reason
