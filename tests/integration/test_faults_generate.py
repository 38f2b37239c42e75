"""Fault catalogue: ``Loaded.generate``, ``generate_ids`` and ``stream`` given what a caller gets
wrong — lengths past the model's positions (``max_new_tokens=10**12`` ran for ever), token ids
outside its vocabulary (``pad_token_id=10**9`` ended in an IndexError), prompts that are not text
(a lone surrogate ended in a TypeError), chat messages without a role or content, and settings
transformers' ``generate`` refuses.

The tiny model loads once for the module; every refusal comes before any decoding.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from faults import Catalogue, Fault, call, check, error, works

import intelrt

catalogue = Catalogue(__file__)
LIST = ["Intel GPUs", "Gaudi accelerators run PyTorch"]  # of two lengths: padded


@pytest.fixture(scope="module")
def loaded(tiny_model: Path, one_torch_thread: None) -> Any:
    return intelrt.load(tiny_model)


def _run(loaded: Any, how: str, prompt: Any, kwargs: dict[str, Any]) -> Any:
    if how == "stream":
        return "".join(loaded.stream(prompt, **kwargs))
    if how == "ids":
        return loaded.generate_ids(prompt, **kwargs)
    return loaded.generate(prompt, **kwargs)


LENGTHS = [
    ("max-new-tokens-1e12", {"max_new_tokens": 10**12}, ("max_new_tokens=1000000000000", "512", "or less"), "hang"),
    ("max-length-1e12", {"max_length": 10**12}, ("max_length=1000000000000", "512"), "hang"),
    ("max-new-tokens-past-positions", {"max_new_tokens": 512}, ("needs", "positions", "512"), "traceback"),
    ("max-new-tokens-zero", {"max_new_tokens": 0}, ("max_new_tokens must be an int >= 1",), "traceback"),
    ("max-new-tokens-negative", {"max_new_tokens": -3}, ("max_new_tokens must be an int >= 1",), "traceback"),
    ("max-new-tokens-string", {"max_new_tokens": "5"}, ("max_new_tokens must be an int",), "traceback"),
    ("max-new-tokens-float", {"max_new_tokens": 2.5}, ("max_new_tokens must be an int",), "traceback"),
    ("max-new-tokens-bool", {"max_new_tokens": True}, ("max_new_tokens must be an int",), "silent wrong"),
]
IDS = [
    ("pad-1e9", {"pad_token_id": 10**9}, ("pad_token_id=1000000000", "vocabulary"), "traceback"),
    ("pad-negative", {"pad_token_id": -5}, ("pad_token_id=-5",), "traceback"),
    ("pad-string", {"pad_token_id": "x"}, ("pad_token_id='x'",), "traceback"),
    ("eos-1e9", {"eos_token_id": 10**9}, ("eos_token_id=1000000000",), "hang"),
    ("eos-list-with-1e9", {"eos_token_id": [1, 10**9]}, ("eos_token_id=[1, 1000000000]",), "hang"),
    ("eos-empty-list", {"eos_token_id": []}, ("eos_token_id=[]",), "silent wrong"),
]
SETTINGS = [
    ("num-return-sequences-zero", {"num_return_sequences": 0}, ("num_return_sequences must be an int >= 1",),
     "silent wrong"),
    ("num-return-sequences-string", {"num_return_sequences": "2"}, ("num_return_sequences must be an int",),
     "traceback"),
    ("num-beams-zero", {"num_beams": 0}, ("num_beams must be an int >= 1",), "traceback"),
    ("min-above-max", {"min_new_tokens": 10, "max_new_tokens": 2}, ("min_new_tokens=10 is more than",),
     "silent wrong"),
    ("stop-strings-int", {"stop_strings": 5}, ("stop_strings= takes a string",), "traceback"),
    ("temperature-negative", {"do_sample": True, "temperature": -1.0}, ("temperature",), "traceback"),
    ("top-p-two", {"do_sample": True, "top_p": 2.0}, ("top_p",), "traceback"),
    ("top-k-negative", {"do_sample": True, "top_k": -1}, ("top_k",), "traceback"),
    ("repetition-penalty-negative", {"repetition_penalty": -1.0}, ("generate() refused", "penalty"), "traceback"),
    ("misspelt-keyword", {"temprature": 0.5}, ("generate() refused", "temprature"), "traceback"),
    ("generation-config-string", {"generation_config": "greedy"}, ("generation_config= takes",), "traceback"),
]
METHOD = {"generate": "generate(prompt", "list": "generate(prompts", "stream": "stream(prompt", "ids": "generate_ids(ids"}


def _shown(kwargs: dict[str, Any]) -> str:
    return ", ".join(f"{k}={v!r}" for k, v in kwargs.items())


CASES = [error(f"generate-{how}-{name}", "generate", f"{METHOD[how].split('(')[0]}() with {_shown(kw)}"
               + (" on prompts of two lengths" if how == "list" else ""), *says, risk=risk,
               trigger=f"loaded.{METHOD[how]}, {_shown(kw)})", error="ConfigurationError", data=(how, kw))
         for table, hows in ((LENGTHS, ("generate", "list", "stream", "ids")), (IDS, ("list", "ids")),
                             (SETTINGS, ("generate",)))
         for name, kw, says, risk in table for how in hows]


@catalogue.cases(CASES)
def test_settings_a_call_gets_wrong_are_refused_before_decoding(case: Fault, loaded: Any) -> None:
    how, kwargs = case.data
    prompt: Any = {"generate": "Intel GPUs", "stream": "Intel GPUs", "list": LIST, "ids": [[5, 6, 7], [8, 9]]}[how]
    length = {} if "max_length" in kwargs else {"max_new_tokens": 4}  # max_new_tokens would win over max_length
    check(case, call(lambda: _run(loaded, how, prompt, {**length, **kwargs})))


PROMPTS = [
    ("lone-surrogate", "\ud800", ("lone surrogate",), "traceback"),
    ("lone-surrogate-in-a-list", ["fine", "bad \udfff here"], ("lone surrogate",), "traceback"),
    ("lone-surrogate-in-a-chat", [{"role": "user", "content": "x\ud83d"}], ("lone surrogate",), "traceback"),
    ("empty", "", ("the prompt is empty",), "traceback"),
    ("empty-list", [], ("empty list of prompts",), "traceback"),
    ("list-with-a-number", ["a", 5], ("every prompt must be a str",), "traceback"),
    ("number", 5, ("prompt must be a str",), "traceback"),
    ("bytes", b"Intel", ("prompt must be a str",), "traceback"),
    ("one-message-not-in-a-list", {"role": "user", "content": "hi"}, ("prompt must be a str",), "traceback"),
    ("chat-role-number", [{"role": 5, "content": "hi"}], ("has role 5",), "silent wrong"),
    ("chat-without-content", [{"role": "user"}], ("has no content",), "silent wrong"),
    ("chat-content-number", [{"role": "user", "content": 7}], ("content of type int",), "silent wrong"),
    ("longer-than-the-model", "a b " * 600, ("the prompt has", "512 positions"), "traceback"),
]
PROMPT_CASES = [error(f"generate-prompt-{name}", "generate", f"generate() on a prompt: {name.replace('-', ' ')}",
                      *says, risk=risk, trigger=f"loaded.generate({prompt!r:.40})", error="ConfigurationError",
                      data=prompt) for name, prompt, says, risk in PROMPTS]


@catalogue.cases(PROMPT_CASES)
def test_prompts_that_are_not_text_are_refused(case: Fault, loaded: Any) -> None:
    check(case, call(lambda: loaded.generate(case.data, max_new_tokens=2)))


IDS_PROMPTS = [
    ("empty", [], ("non-empty list",)), ("empty-row", [[]], ("non-empty list",)), ("floats", [1.5, 2.0], ("token ids",)),
    ("outside-the-vocabulary", [10**9], ("outside the model's vocabulary",)),
    ("negative", [-1], ("outside the model's vocabulary",)), ("text", "hello", ("token ids",)),
    ("mixed-rows", [[1, 2], "3"], ("token ids",)),
]
IDS_CASES = [error(f"generate-ids-{name}", "generate", f"generate_ids() on {name.replace('-', ' ')}", *says,
                   trigger=f"loaded.generate_ids({ids!r:.40})", error="ConfigurationError", data=ids)
             for name, ids, says in IDS_PROMPTS]


@catalogue.cases(IDS_CASES)
def test_token_ids_that_are_not_ids_of_the_model_are_refused(case: Fault, loaded: Any) -> None:
    check(case, call(lambda: loaded.generate_ids(case.data, max_new_tokens=2)))


STREAM = [
    error("generate-stream-a-list", "generate", "stream() given a list of prompts", "stream() takes one prompt",
          trigger="loaded.stream(['a', 'b'])", data=(["a", "b"], {})),
    error("generate-stream-several-sequences", "generate", "stream() asked for 2 sequences", "yields one continuation",
          trigger="loaded.stream('a', num_return_sequences=2)", data=("a", {"num_return_sequences": 2})),
]


@catalogue.cases(STREAM)
def test_stream_refuses_what_it_cannot_stream(case: Fault, loaded: Any) -> None:
    prompt, kwargs = case.data
    check(case, call(lambda: list(loaded.stream(prompt, **kwargs))))


@catalogue.cases(error("generate-stream-1e12-ends", "generate", "stream(max_new_tokens=10**12): its worker thread "
                       "decoded for ever", "max_new_tokens", risk="hang",
                       trigger="loaded.stream('a', max_new_tokens=10**12)"))
def test_a_refused_stream_leaves_no_thread_decoding(case: Fault, loaded: Any) -> None:
    before = {t.ident for t in threading.enumerate()}
    check(case, call(lambda: list(loaded.stream("a", max_new_tokens=10**12))))
    left = [t for t in threading.enumerate() if t.ident not in before and t.name == "intelrt-stream" and t.is_alive()]
    assert not left, left


OK: list[tuple[str, Callable[[Any], Any], Callable[[Any], bool]]] = [
    ("fits-the-positions", lambda m: m.generate("Intel", max_new_tokens=500), lambda out: isinstance(out, str)),
    ("pad-of-the-vocabulary", lambda m: m.generate(LIST, pad_token_id=0, max_new_tokens=3),
     lambda out: isinstance(out, list) and len(out) == 2),
    ("max-length-within", lambda m: m.generate("Intel", max_length=20), lambda out: isinstance(out, str)),
]


@catalogue.cases([works(f"generate-{name}", "generate", f"a call at the edge: {name.replace('-', ' ')}",
                        risk="silent wrong", trigger=name, data=(fn, ok)) for name, fn, ok in OK])
def test_calls_at_the_edge_of_the_limits_work(case: Fault, loaded: Any) -> None:
    fn, ok = case.data
    seen = check(case, call(lambda: fn(loaded)))
    assert ok(seen.value), seen.value
