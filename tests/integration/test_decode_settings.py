"""Every generation setting is honoured by the fast path or sends the call to transformers'
``generate`` with the reason (issue 15) — compared with plain ``model.generate`` token for token;
bad token ids and over-long prompts are refused before any device work, and a refused call
changes nothing for the next one."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from varied_weights import varied_copy

import intelrt
from intelrt.errors import ConfigurationError

PROMPT = "Intel GPUs are"


@pytest.fixture(scope="module")
def loaded(tiny_model: Path, tmp_path_factory: pytest.TempPathFactory) -> intelrt.Loaded:
    return intelrt.load(varied_copy(tiny_model, tmp_path_factory.mktemp("settings"), seed=5))


def plain(loaded: intelrt.Loaded, prompt: str, **settings: Any) -> Any:
    import torch

    ids = loaded.tokenizer([prompt], return_tensors="pt")
    settings.setdefault("pad_token_id", loaded.tokenizer.pad_token_id)
    with torch.inference_mode():
        out = loaded.model.generate(**ids, **settings)
    return [row[ids["input_ids"].shape[1]:].tolist() for row in out]


def ours(loaded: intelrt.Loaded, prompt: str, **settings: Any) -> Any:
    return loaded.generate_ids(loaded.tokenizer(prompt)["input_ids"], **settings)


class Penalise:
    """A logits processor of the user's own (transformers' LogitsProcessor protocol)."""

    def __call__(self, input_ids: Any, scores: Any) -> Any:
        scores[:, 7] = float("-inf")
        return scores


ROUTED = [
    ({"num_beams": 3, "num_return_sequences": 3, "max_new_tokens": 6}, "num_beams=3"),
    ({"num_beams": 2, "max_new_tokens": 8}, "num_beams=2"),
    ({"max_length": 9}, "max_length"),
    ({"min_new_tokens": 10, "max_new_tokens": 12}, "min_new_tokens=10"),
    ({"repetition_penalty": 1.5, "max_new_tokens": 12}, "repetition_penalty=1.5"),
    ({"no_repeat_ngram_size": 2, "max_new_tokens": 12}, "no_repeat_ngram_size=2"),
]


@pytest.mark.parametrize("settings, named", ROUTED, ids=[n for _, n in ROUTED])
def test_settings_the_loop_does_not_do_go_to_generate_with_the_reason(loaded: intelrt.Loaded,
                                                                      settings: dict[str, Any], named: str) -> None:
    got = ours(loaded, PROMPT, **settings)
    expected = plain(loaded, PROMPT, do_sample=False, **settings)
    count = settings.get("num_return_sequences", 1)
    assert got == (expected if count > 1 else expected[0])
    report = loaded.last_generation
    assert report is not None and report.path == "generate" and named in report.reason


def test_num_return_sequences_gives_a_list_per_prompt(loaded: intelrt.Loaded) -> None:
    texts = loaded.generate(PROMPT, num_beams=2, num_return_sequences=2, max_new_tokens=4)
    assert isinstance(texts, list) and len(texts) == 2 and all(isinstance(t, str) for t in texts)
    many = loaded.generate([PROMPT, "hello"], num_beams=2, num_return_sequences=2, max_new_tokens=4)
    assert [len(group) for group in many] == [2, 2]


def test_max_length_counts_the_prompt_as_transformers_does(loaded: intelrt.Loaded) -> None:
    prompt_length = len(loaded.tokenizer(PROMPT)["input_ids"])
    got = ours(loaded, PROMPT, max_length=prompt_length + 3, eos_token_id=None)
    assert len(got) == 3


def test_a_logits_processor_goes_to_generate(loaded: intelrt.Loaded) -> None:
    from transformers import LogitsProcessorList

    processors = LogitsProcessorList([Penalise()])
    got = ours(loaded, PROMPT, logits_processor=processors, max_new_tokens=10)
    assert got == plain(loaded, PROMPT, logits_processor=processors, max_new_tokens=10, do_sample=False)[0]
    assert 7 not in got and loaded.last_generation is not None and "logits_processor" in loaded.last_generation.reason


def test_stop_strings_stop_where_generate_stops(loaded: intelrt.Loaded) -> None:
    free = loaded.generate(PROMPT, max_new_tokens=16, eos_token_id=None)
    stop = free.strip().split()[1] if len(free.split()) > 1 else free[:2]
    got = loaded.generate(PROMPT, max_new_tokens=16, stop_strings=[stop], eos_token_id=None)
    expected = plain(loaded, PROMPT, max_new_tokens=16, stop_strings=[stop], tokenizer=loaded.tokenizer,
                     do_sample=False, eos_token_id=None)[0]
    assert got == loaded.tokenizer.decode(expected, skip_special_tokens=True)
    assert stop in got and len(got) < len(free)


def test_streaming_runs_the_fast_path_and_yields_the_same_text(loaded: intelrt.Loaded) -> None:
    whole = loaded.generate(PROMPT, max_new_tokens=24, eos_token_id=None)
    pieces = list(loaded.stream(PROMPT, max_new_tokens=24, eos_token_id=None))
    assert "".join(pieces) == whole and len(pieces) > 2
    assert loaded.last_generation is not None and loaded.last_generation.path == "fast"


@pytest.mark.parametrize(("settings", "path"), [({}, "fast"), ({"repetition_penalty": 1.2}, "generate")],
                         ids=["fast-loop", "transformers-generate"])
def test_leaving_a_stream_early_ends_its_generation_and_the_next_call_is_generates(
        loaded: intelrt.Loaded, settings: dict[str, Any], path: str) -> None:
    import threading

    before = loaded.last_generation
    stream = loaded.stream(PROMPT, max_new_tokens=450, eos_token_id=None, **settings)
    first = [next(stream), next(stream)]
    stream.close()  # as a `for` loop that breaks does
    assert len(first) == 2 and not [t for t in threading.enumerate() if t.name == "intelrt-stream" and t.is_alive()]
    assert loaded.last_generation is before, "the left stream's generation ran to its end (a report was recorded)"
    expected = plain(loaded, PROMPT, max_new_tokens=16, eos_token_id=None, do_sample=False, **settings)[0]
    assert ours(loaded, PROMPT, max_new_tokens=16, eos_token_id=None, **settings) == expected
    assert loaded.last_generation is not None and loaded.last_generation.path == path


def test_a_transformers_streamer_gets_every_token_once(loaded: intelrt.Loaded) -> None:
    from transformers.generation.streamers import BaseStreamer

    class Collect(BaseStreamer):
        def __init__(self) -> None:
            self.puts: list[list[int]] = []
            self.ended = 0

        def put(self, value: Any) -> None:
            self.puts.append(value.reshape(-1).tolist())

        def end(self) -> None:
            self.ended += 1

    ours_streamer, plain_streamer = Collect(), Collect()
    got = ours(loaded, PROMPT, max_new_tokens=12, eos_token_id=None, streamer=ours_streamer)
    plain(loaded, PROMPT, max_new_tokens=12, eos_token_id=None, streamer=plain_streamer, do_sample=False)
    assert loaded.last_generation is not None and loaded.last_generation.path == "fast"
    assert ours_streamer.puts[0] == plain_streamer.puts[0]  # the prompt first, as generate does
    assert sum(ours_streamer.puts[1:], []) == sum(plain_streamer.puts[1:], []) == got
    assert ours_streamer.ended == plain_streamer.ended == 1


def test_token_ids_outside_the_vocabulary_are_refused_and_change_nothing(loaded: intelrt.Loaded) -> None:
    vocab = loaded.model.get_input_embeddings().num_embeddings
    before = ours(loaded, PROMPT, max_new_tokens=6)
    for bad in (vocab, -1):
        with pytest.raises(ConfigurationError, match=rf"token id {bad} .* vocabulary of {vocab}"):
            loaded.generate_ids([3, bad, 5], max_new_tokens=4)
    assert ours(loaded, PROMPT, max_new_tokens=6) == before
    assert loaded.last_generation is not None and loaded.last_generation.step == "compact"
    assert not loaded.last_generation.notes


def test_a_prompt_longer_than_the_positions_is_refused(loaded: intelrt.Loaded) -> None:
    limit = loaded.model.config.max_position_embeddings
    with pytest.raises(ConfigurationError, match=rf"{limit + 1} tokens .* at most {limit} positions"):
        loaded.generate_ids([5] * (limit + 1), max_new_tokens=2)


def test_running_past_the_positions_is_refused_with_the_length_that_fits(loaded: intelrt.Loaded) -> None:
    # as vLLM refuses prompt + max_tokens past max_model_len: past its positions a model reads
    # garbage, and max_new_tokens=10**12 would run for ever (issue 34)
    limit = loaded.model.config.max_position_embeddings
    with pytest.raises(ConfigurationError, match=rf"needs {limit + 2} positions.*pass max_new_tokens=2 or less"):
        loaded.generate_ids([5] * (limit - 2), max_new_tokens=4, eos_token_id=None)
    assert len(loaded.generate_ids([5] * (limit - 2), max_new_tokens=2, eos_token_id=None)) == 2
