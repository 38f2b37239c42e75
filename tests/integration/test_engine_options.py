"""The decode engine's options as ``intelrt.load`` / ``intelrt.serve`` keywords (issue 27's report):
``gpu_memory_utilization``, ``max_batch_tokens``, ``prefix_caching`` reach the engine a server runs,
bad values are refused naming the keyword before anything loads, the plan does not record them, and
a replaced ``decode_tuning`` is never silently ignored."""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any

import pytest
from test_serve import NAME, Server, metric
from varied_weights import varied_copy

import intelrt
from intelrt.serving import create_app


@pytest.fixture(scope="module")
def model_dir(tiny_model: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    return varied_copy(tiny_model, tmp_path_factory.mktemp("varied-options"), seed=5)


@pytest.mark.parametrize("options, says", [
    ({"gpu_memory_utilization": 1.5}, "gpu_memory_utilization=1.5 must be a number in (0, 1]"),
    ({"gpu_memory_utilization": 0}, "gpu_memory_utilization=0 must be a number in (0, 1]"),
    ({"gpu_memory_utilization": True}, "gpu_memory_utilization=True must be a number"),
    ({"max_batch_tokens": 8}, "max_batch_tokens=8 must be a whole number of tokens >= 16"),
    ({"max_batch_tokens": 64.0}, "max_batch_tokens=64.0 must be a whole number"),
    ({"prefix_caching": "no"}, "prefix_caching='no' must be True or False"),
])
def test_bad_engine_options_are_refused_naming_the_keyword_before_loading(options: dict[str, Any],
                                                                           says: str) -> None:
    with pytest.raises(intelrt.ConfigurationError) as refused:
        intelrt.load("/nonexistent-model", **options)  # refused before the model is even looked for
    assert says in str(refused.value)


@pytest.mark.parametrize("option, value", [("gpu_memory_utilization", 0.5), ("max_batch_tokens", 256),
                                           ("prefix_caching", False)])
def test_an_engine_option_given_to_plan_is_refused_not_passed_to_from_pretrained(model_dir: Path, option: str,
                                                                                 value: Any) -> None:
    with pytest.raises(intelrt.ConfigurationError, match=rf"{option}= is a load option of the decode engine"):
        intelrt.plan(model_dir, **{option: value})


def test_the_engine_options_size_the_served_engine_and_a_long_prompt_still_matches(model_dir: Path) -> None:
    loaded = intelrt.load(model_dir, max_batch_tokens=32, prefix_caching=False, gpu_memory_utilization=0.5)
    plain = intelrt.load(model_dir)
    assert loaded.plan.request.to_dict() == plain.plan.request.to_dict()  # load options: not in the plan
    lines: list[str] = []
    prompt = list(range(3, 90))  # 87 tokens: three prefill chunks of at most 32 tokens
    with Server(create_app(loaded, model_name=NAME, max_batch=4, announce=lines.append)) as server:
        said = "\n".join(lines)
        assert "tokens per step: 32" in said and "prefix caching: off" in said, said
        client = server.client()
        for _ in range(2):  # the same prompt twice: with prefix caching off, nothing is found
            answer = client.completions.create(model=NAME, prompt=prompt, max_tokens=6, temperature=0)
            expected = plain.generate_ids(prompt, max_new_tokens=6)
            assert answer.choices[0].text == plain.tokenizer.decode(expected, skip_special_tokens=True)
        assert metric(server.url, "intelrt_prefix_cache_hit_tokens_total") == 0
        assert metric(server.url, "intelrt_prefix_cache_queried_tokens_total") == 2 * len(prompt)


def test_serve_refuses_a_bad_engine_option_before_it_starts(model_dir: Path) -> None:
    loaded = intelrt.load(model_dir)
    with pytest.raises(intelrt.ConfigurationError, match=r"max_batch_tokens=4 must be a whole number"):
        intelrt.serve(loaded, port=0, max_batch_tokens=4)
    assert loaded.decode_tuning.max_batch_tokens is None  # left as it was (the plan's step size)


def test_a_replaced_decode_tuning_rebuilds_the_engine(model_dir: Path) -> None:
    loaded = intelrt.load(model_dir)
    first = loaded.generate_ids([5, 6, 7], max_new_tokens=4)
    decoder = loaded.fast_decoder()
    assert decoder is not None and decoder.tuning.prefix_caching
    loaded.decode_tuning = dataclasses.replace(loaded.decode_tuning, prefix_caching=False)
    rebuilt = loaded.fast_decoder()
    assert rebuilt is not None and rebuilt is not decoder and not rebuilt.tuning.prefix_caching
    assert loaded.generate_ids([5, 6, 7], max_new_tokens=4) == first
