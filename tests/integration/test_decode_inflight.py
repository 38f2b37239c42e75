"""In-flight batching on the fast decode engine (issue 19): requests that join a running batch
between steps, and leave it when done, get exactly what ``Loaded.generate`` gives them alone —
with the compact step and with the model's own forward, through rebases of the shared cache, with
a graph capturer — and seeded sampling does not depend on the batch's other rows."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
from varied_weights import varied_copy

import intelrt
from intelrt.decoding.engine import FastDecoder
from intelrt.decoding.inflight import InflightBatch, InflightUnavailable, RowRequest
from intelrt.plugin import DecodeChoice

PROMPTS = ["Intel GPUs are", "hello", "the cat sat on the mat and then", "x",
           "Gaudi runs PyTorch eagerly by default and", "a b c d e f g h i j k l m n o p q r s t u v w"]
MAX_NEW = [20, 7, 15, 25, 11, 9]
#: The fast loop with the model's own forward over transformers' StaticCache, eager.
MODEL_STEP = DecodeChoice("fast", cache="static")


@pytest.fixture(scope="module")
def loaded(tiny_model: Path, tmp_path_factory: pytest.TempPathFactory) -> intelrt.Loaded:
    return intelrt.load(varied_copy(tiny_model, tmp_path_factory.mktemp("varied"), seed=1))


@pytest.fixture(scope="module")
def expected(loaded: intelrt.Loaded) -> list[list[int]]:
    """What each prompt gets alone from ``Loaded.generate`` (the fast loop, batch 1)."""
    rows = [loaded.generate_ids(_ids(loaded, p), max_new_tokens=m) for p, m in zip(PROMPTS, MAX_NEW, strict=True)]
    assert loaded.last_generation is not None and loaded.last_generation.path == "fast"
    assert len({t for row in rows for t in row}) > 10, "the model must vary its tokens for this test to mean anything"
    return rows  # type: ignore[return-value]


def _ids(loaded: intelrt.Loaded, prompt: str) -> list[int]:
    return list(loaded.tokenizer(prompt)["input_ids"])


def _eos(loaded: intelrt.Loaded) -> tuple[int, ...]:
    return (loaded.model.generation_config.eos_token_id,)


def _run(batch: InflightBatch, requests: list[RowRequest], join_every: int = 2) -> dict[int, list[int]]:
    """Every request through ``batch``, a new group joining every ``join_every`` steps (as many as
    fit); the tokens each got, by its index."""
    got: dict[int, list[int]] = {}
    owner: dict[int, int] = {}
    waiting = list(range(len(requests)))
    turn = 0
    while waiting or batch.busy:
        if waiting and turn % join_every == 0:
            count = batch.admissible([requests[i] for i in waiting])
            if count:
                handles, progress = batch.admit([requests[i] for i in waiting[:count]])
                owner.update(zip(handles, waiting[:count], strict=True))
                for i in waiting[:count]:
                    got[i] = []
                waiting = waiting[count:]
                for handle, tokens in progress.tokens.items():
                    got[owner[handle]] += tokens
        assert batch.busy or waiting, "a request was left waiting with the batch empty"
        progress = batch.step()
        for handle, tokens in progress.tokens.items():
            got[owner[handle]] += tokens
        turn += 1
    return got


@pytest.mark.parametrize("choice", [None, MODEL_STEP], ids=["compact-step", "model-forward"])
def test_inflight_greedy_equals_generate_for_requests_joining_mid_batch(loaded: intelrt.Loaded,
                                                                        expected: list[list[int]],
                                                                        choice: DecodeChoice | None) -> None:
    decoder = FastDecoder(loaded.model, choice or loaded.plan.decided.decode, None)
    assert decoder.step == ("compact" if choice is None else "model")
    batch = InflightBatch(decoder, 4, 64, loaded.model.device)
    requests = [RowRequest(tuple(_ids(loaded, p)), m, _eos(loaded)) for p, m in zip(PROMPTS, MAX_NEW, strict=True)]
    got = _run(batch, requests)
    assert [got[i] for i in range(len(PROMPTS))] == expected
    assert batch.busy == 0 and batch.rebases >= 1  # 6 requests through 4 rows of 64 slots: the cache moved


def test_inflight_rows_leave_and_the_last_row_takes_the_free_place(loaded: intelrt.Loaded,
                                                                   expected: list[list[int]]) -> None:
    batch = InflightBatch(loaded.fast_decoder(), 4, 96, loaded.model.device)  # type: ignore[arg-type]
    short, long = (RowRequest(tuple(_ids(loaded, PROMPTS[i])), MAX_NEW[i], _eos(loaded)) for i in (1, 3))
    handles, progress = batch.admit([short, long])
    tokens = {h: list(progress.tokens[h]) for h in handles}
    while handles[0] not in progress.finished:
        progress = batch.step()
        for handle, new in progress.tokens.items():
            tokens[handle] += new
    assert batch.busy == 1, "the short request's row was freed when it ended"
    assert [row.handle for row in batch._rows] == [handles[1]], "the long request moved to the first row"
    while batch.busy:
        for handle, new in batch.step().tokens.items():
            tokens[handle] += new
    assert tokens == {handles[0]: expected[1], handles[1]: expected[3]}


def test_inflight_client_leaving_frees_its_row_at_once(loaded: intelrt.Loaded, expected: list[list[int]]) -> None:
    batch = InflightBatch(loaded.fast_decoder(), 2, 96, loaded.model.device)  # type: ignore[arg-type]
    requests = [RowRequest(tuple(_ids(loaded, PROMPTS[i])), MAX_NEW[i], _eos(loaded)) for i in (0, 2)]
    handles, progress = batch.admit(requests)
    got = {h: list(progress.tokens[h]) for h in handles}
    batch.step()
    batch.retire(handles[0])  # the first client left mid-way: its row is free for a third request
    assert batch.busy == 1 and batch.can_admit([requests[0]])
    joined, progress = batch.admit([requests[0]])
    got[joined[0]] = list(progress.tokens[joined[0]])
    while batch.busy:
        for handle, new in batch.step().tokens.items():
            got.setdefault(handle, []).extend(new)
    assert got[joined[0]] == expected[0]


def test_inflight_prompt_longer_than_the_shared_slot_moves_the_cache_forward(loaded: intelrt.Loaded,
                                                                          expected: list[list[int]]) -> None:
    """A short request starts the batch at a low slot; a long prompt joining after it needs the busy
    row's cache moved forward to make room before the shared slot."""
    batch = InflightBatch(loaded.fast_decoder(), 2, 96, loaded.model.device)  # type: ignore[arg-type]
    short = RowRequest(tuple(_ids(loaded, PROMPTS[3])), MAX_NEW[3], _eos(loaded))
    long = RowRequest(tuple(_ids(loaded, PROMPTS[5])), MAX_NEW[5], _eos(loaded))
    assert len(long.prompt) > len(short.prompt) + 1
    got = _run(batch, [short, long], join_every=1)
    assert got == {0: expected[3], 1: expected[5]}


def test_inflight_refuses_what_can_never_fit_and_waits_for_room(loaded: intelrt.Loaded) -> None:
    batch = InflightBatch(loaded.fast_decoder(), 2, 32, loaded.model.device)  # type: ignore[arg-type]
    assert not batch.fits_alone(30, 4) and batch.fits_alone(20, 13)
    big = RowRequest(tuple(_ids(loaded, PROMPTS[0])), 28, ())
    other = RowRequest(tuple(_ids(loaded, PROMPTS[1])), 25, ())
    batch.admit([big])
    batch.step()
    batch.step()  # the first request is 8 tokens in: the second's span would end past the cache
    assert not batch.can_admit([other]), "both spans together exceed the cache: the second must wait"
    with pytest.raises(ValueError, match="do not fit the batch now"):
        batch.admit([other])
    while batch.busy:
        batch.step()
    assert batch.can_admit([other])


def _sample(batch: InflightBatch, request: RowRequest, neighbours: list[RowRequest]) -> list[int]:
    handles, progress = batch.admit([*neighbours, request])
    mine = handles[-1]
    tokens = list(progress.tokens[mine])
    while batch.busy:
        tokens += batch.step().tokens.get(mine, [])
    return tokens


def test_inflight_seeded_sampling_is_the_same_whatever_else_is_in_the_batch(loaded: intelrt.Loaded,
                                                                            expected: list[list[int]]) -> None:
    batch = InflightBatch(loaded.fast_decoder(), 4, 96, loaded.model.device)  # type: ignore[arg-type]
    prompt = tuple(_ids(loaded, PROMPTS[0]))
    seeded = RowRequest(prompt, 20, (), temperature=1.0, top_p=0.9, seed=1234)
    greedy_neighbour = RowRequest(tuple(_ids(loaded, PROMPTS[2])), 20, ())
    sampled_neighbour = RowRequest(tuple(_ids(loaded, PROMPTS[4])), 20, (), temperature=0.7, seed=5)
    alone = _sample(batch, seeded, [])
    assert _sample(batch, seeded, [greedy_neighbour, sampled_neighbour]) == alone
    assert _sample(batch, replace(seeded, seed=4321), []) != alone
    greedy = RowRequest(prompt, 20, ())
    assert alone != _sample(batch, greedy, [])
    # A sampling neighbour does not change a greedy row: it still gets generate's tokens.
    assert _sample(batch, replace(greedy, max_new_tokens=MAX_NEW[0], eos_token_ids=_eos(loaded)),
                   [sampled_neighbour]) == expected[0]


def test_inflight_sampling_follows_temperature_and_top_p(loaded: intelrt.Loaded) -> None:
    """Near-zero temperature or a tiny top_p leaves only the likeliest token: greedy's answer."""
    batch = InflightBatch(loaded.fast_decoder(), 2, 96, loaded.model.device)  # type: ignore[arg-type]
    prompt = tuple(_ids(loaded, PROMPTS[2]))
    greedy = _sample(batch, RowRequest(prompt, 16, ()), [])
    assert _sample(batch, RowRequest(prompt, 16, (), temperature=1e-4, seed=3), []) == greedy
    assert _sample(batch, RowRequest(prompt, 16, (), temperature=1.5, top_p=1e-6, seed=3), []) == greedy
    assert _sample(batch, RowRequest(prompt, 16, (), temperature=1.5, seed=3), []) != greedy


def _rerun_capturer(log: list[str]) -> Callable[..., Callable[[], object]]:
    """A 'graph' that re-runs the step: what a capturer must do, minus the device."""

    def capture(step: Callable[[], object], warmup: int = 2) -> Callable[[], object]:
        log.append(type(getattr(step, "__self__", step)).__name__)
        for _ in range(warmup):
            step()
        return step

    return capture


def test_inflight_captures_each_row_bucket_greedy_and_sampling_once_at_warm_up(loaded: intelrt.Loaded,
                                                                             expected: list[list[int]]) -> None:
    captured: list[str] = []
    choice = replace(loaded.plan.decided.decode, graphs="test", warmup="static")  # type: ignore[type-var]
    batch = InflightBatch(FastDecoder(loaded.model, choice, _rerun_capturer(captured)), 4, 64, loaded.model.device)
    assert batch.buckets == [1, 2, 4]
    batch.warm_up()
    steps = [c for c in captured if c == "function"]
    assert len(steps) == 2 * len(batch.buckets)  # every bucket, greedy and sampling
    assert "_PromptGraph" in captured  # the joining prompts' pass, captured like an offline call's
    requests = [RowRequest(tuple(_ids(loaded, p)), m, _eos(loaded)) for p, m in zip(PROMPTS, MAX_NEW, strict=True)]
    got = _run(batch, requests)
    assert [got[i] for i in range(len(PROMPTS))] == expected
    assert len([c for c in captured if c == "function"]) == len(steps), "no step was captured after warm-up"


def test_inflight_refuses_a_cache_whose_rows_cannot_move(tmp_path: Path) -> None:
    """transformers' sliding-window cache layers roll their slots: no rows joining between steps."""
    import torch
    from transformers import AutoTokenizer, Qwen3Config, Qwen3ForCausalLM

    from intelrt.tiny import build_tokenizer

    build_tokenizer(tmp_path)
    tokenizer = AutoTokenizer.from_pretrained(tmp_path)
    config = Qwen3Config(vocab_size=len(tokenizer), hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                         num_attention_heads=2, num_key_value_heads=1, head_dim=16, max_position_embeddings=256,
                         use_sliding_window=True, sliding_window=16, max_window_layers=1,
                         layer_types=["full_attention", "sliding_attention"])
    torch.manual_seed(0)
    model = Qwen3ForCausalLM(config).eval()
    decoder = FastDecoder(model, MODEL_STEP, None)
    with pytest.raises(InflightUnavailable, match="StaticSlidingWindowLayer"):
        InflightBatch(decoder, 2, 64, model.device)


def test_decode_reraises_a_streamer_error_without_turning_compiling_off(loaded: intelrt.Loaded) -> None:
    """A streamer that raises (a server's client left) ends the call with its own error; it is not
    taken for a failed compilation (which would turn compiling off and run the call again)."""

    class Gone(Exception):
        pass

    class Streamer:
        calls = 0

        def put(self, value: Any) -> None:
            Streamer.calls += 1
            if Streamer.calls > 2:
                raise Gone()

        def end(self) -> None:
            pass

    decoder = FastDecoder(loaded.model, replace(MODEL_STEP, compile="eager"), None)
    import torch

    from intelrt.decoding.keywords import DecodeOptions

    ids = torch.tensor([_ids(loaded, PROMPTS[0])])
    with pytest.raises(Gone):
        decoder.decode(ids, torch.ones_like(ids), DecodeOptions(30, False, 1.0, 0, 1.0, (), 1, Streamer()))
    assert decoder.compile_backend == "eager" and not decoder.notes


def test_inflight_free_rows_never_step_past_a_learned_position_table() -> None:
    """GPT-2 looks positions up in a table of ``n_positions``: rows left free while others decode
    must not run past it however long the server runs (three requests of 50 tokens through a
    table of 64), and each request still gets ``generate``'s tokens."""
    import torch
    from transformers import GPT2Config, GPT2LMHeadModel

    torch.manual_seed(0)
    model = GPT2LMHeadModel(GPT2Config(vocab_size=128, n_positions=64, n_embd=32, n_layer=2, n_head=2,
                                       eos_token_id=None, bos_token_id=None)).eval()
    from varied_weights import vary

    vary(model, seed=3)
    batch = InflightBatch(FastDecoder(model, MODEL_STEP, None), 4, 64, model.device)
    prompt = (5, 9, 13)
    with torch.inference_mode():
        expected = model.generate(torch.tensor([prompt]), attention_mask=torch.ones(1, 3, dtype=torch.long),
                                  max_new_tokens=50, do_sample=False, pad_token_id=0)[0, 3:].tolist()
    for _ in range(3):
        handles, progress = batch.admit([RowRequest(prompt, 50)])
        tokens = list(progress.tokens[handles[0]])
        while batch.busy:
            tokens += batch.step().tokens.get(handles[0], [])
        assert tokens == expected
