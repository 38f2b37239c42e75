"""Fault catalogue: ``intelrt.pipeline("text-generation", …)`` called as a careless caller would —
lengths past the model's positions (``max_new_tokens=10**12`` ran for ever), token ids outside the
vocabulary (``pad_token_id=10**9`` in a padded batch ended in an IndexError), an empty prompt (a
``ValueError`` asking for ``input_ids``), an empty batch, ``None``, a lone surrogate and chat
messages without a role or content (an IndexError and TypeErrors from the pipeline's
preprocessing, or an empty turn rendered without a word) — and the calls that must still work.

The pipeline is transformers' own ``TextGenerationPipeline`` with intelrt's checks mixed in
(``intelrt.runtime.checked_pipeline``); it is built once for the module from the tiny model (512
positions, 384 token ids, no ``bos_token_id``). Every refusal comes before any decoding.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from faults import Catalogue, Fault, call, check, error, works

import intelrt

catalogue = Catalogue(__file__)
BATCH = ["Intel GPUs", "Gaudi accelerators run PyTorch"]  # of two lengths: padded


@pytest.fixture(scope="module")
def generator(tiny_model: Path, one_torch_thread: None) -> Any:
    return intelrt.pipeline("text-generation", tiny_model)


def _p(id: str, fault: str, prompt: Any, kwargs: dict[str, Any], *says: str, risk: str = "traceback") -> Fault:
    shown = ", ".join(f"{k}={v!r}" for k, v in kwargs.items())
    return error(f"pipeline-{id}", "pipeline", fault, *says, risk=risk, error="ConfigurationError",
                 trigger=f"pipe({prompt!r}{', ' if shown else ''}{shown})", data=(prompt, kwargs))


REFUSED = [
    _p("max-new-tokens-1e12", "max_new_tokens=10**12 (it generated for ever)", "Intel GPUs",
       {"max_new_tokens": 10**12}, "max_new_tokens=1000000000000", "512", "or less", risk="hang"),
    _p("max-new-tokens-1e12-batch", "max_new_tokens=10**12 for a batch", BATCH, {"max_new_tokens": 10**12},
       "max_new_tokens=1000000000000", "positions", risk="hang"),
    _p("max-length-1e12", "max_length=10**12", "Intel GPUs", {"max_length": 10**12}, "max_length=1000000000000",
       "512 or less", risk="hang"),
    _p("max-new-tokens-past-positions", "max_new_tokens=512: one past what the model reads with the prompt", "x",
       {"max_new_tokens": 512}, "needs 513 positions", "max_new_tokens=511 or less"),
    _p("max-new-tokens-zero", "max_new_tokens=0", "x", {"max_new_tokens": 0}, "max_new_tokens must be an int >= 1",
       risk="silent wrong"),
    _p("max-new-tokens-string", "max_new_tokens='5', a string", "x", {"max_new_tokens": "5"},
       "max_new_tokens must be an int"),
    _p("empty-prompt", "an empty prompt, for a model with no bos_token_id", "", {"max_new_tokens": 2},
       "the prompt is empty", "pass some text"),
    _p("empty-batch", "an empty list of prompts (an IndexError inside the pipeline)", [], {"max_new_tokens": 2},
       "empty list of prompts"),
    _p("none-prompt", "None as the prompt (a TypeError inside the pipeline)", None, {"max_new_tokens": 2},
       "None as its prompt"),
    _p("lone-surrogate", "a lone surrogate in the prompt (a TypeError from the tokenizer)", "Intel \ud800 GPUs",
       {"max_new_tokens": 2}, "lone surrogate", "at character 6"),
    _p("chat-without-role", "a chat message without a role (a TypeError inside the pipeline)",
       [{"content": "hi"}], {"max_new_tokens": 2}, "chat message 0 has role None"),
    _p("chat-without-content", "a chat message without content", [{"role": "user"}], {"max_new_tokens": 2},
       "chat message 0 (user) has no content", risk="silent wrong"),
    _p("chat-role-number", "a chat message whose role is a number", [{"role": "user", "content": "hi"},
                                                                      {"role": 5, "content": "x"}],
       {"max_new_tokens": 2}, "chat message 1 has role 5", risk="silent wrong"),
    _p("pad-1e9-batch", "pad_token_id=10**9 in a padded batch (an IndexError)", BATCH,
       {"max_new_tokens": 2, "pad_token_id": 10**9}, "pad_token_id=1000000000", "vocabulary (0..383)"),
    _p("pad-negative", "pad_token_id=-3", "x", {"max_new_tokens": 2, "pad_token_id": -3}, "pad_token_id=-3",
       "vocabulary"),
    _p("eos-1e9", "eos_token_id=10**9: an end that can never come", "x", {"max_new_tokens": 2, "eos_token_id": 10**9},
       "eos_token_id=1000000000", risk="silent wrong"),
    _p("num-return-sequences-zero", "num_return_sequences=0", "x",
       {"max_new_tokens": 2, "num_return_sequences": 0}, "num_return_sequences must be an int >= 1",
       risk="silent wrong"),
]


@catalogue.cases(REFUSED)
def test_a_pipeline_call_past_the_models_bounds_is_refused_before_decoding(case: Fault, generator: Any) -> None:
    prompt, kwargs = case.data
    check(case, call(lambda: generator(prompt, **kwargs)))


WORKS = [
    works("pipeline-last-position", "pipeline", "max_new_tokens=511 after a one-token prompt: every position used",
          trigger="pipe('x', max_new_tokens=511, min_new_tokens=511)", data=("x", 511)),
    works("pipeline-padded-batch", "pipeline", "a batch of prompts of different lengths",
          trigger=f"pipe({BATCH!r}, max_new_tokens=3, min_new_tokens=3)", data=(BATCH, 3)),
    works("pipeline-chat", "pipeline", "chat messages as the prompt",
          trigger="pipe([{'role': 'user', 'content': 'hi'}], max_new_tokens=2, min_new_tokens=2)",
          data=([{"role": "user", "content": "hi"}], 2)),
]


@catalogue.cases(WORKS)
def test_a_pipeline_call_at_the_bounds_generates(case: Fault, generator: Any) -> None:
    prompt, new = case.data
    seen = check(case, call(lambda: generator(prompt, max_new_tokens=new, min_new_tokens=new, return_tensors=True)))
    batch = isinstance(prompt, list) and isinstance(prompt[0], str)
    rows = [r[0] for r in seen.value] if batch else seen.value
    texts = prompt if batch else [prompt]
    assert len(rows) == len(texts)
    for text, row in zip(texts, rows, strict=True):
        if isinstance(text, str):
            prompt_ids = generator.tokenizer(text)["input_ids"]
        else:  # the chat template's rendering
            rendered = generator.tokenizer.apply_chat_template(text, add_generation_prompt=True, tokenize=False)
            prompt_ids = generator.tokenizer(rendered, add_special_tokens=False)["input_ids"]
        ids = [int(i) for i in row["generated_token_ids"]]
        # min_new_tokens = max_new_tokens: exactly that many new tokens after the prompt's own (no padding kept)
        assert ids[:len(prompt_ids)] == list(prompt_ids) and len(ids) == len(prompt_ids) + new, (len(ids), new)
