"""The decode engine's in-flight batch over the paged KV cache (issues 19 and 27): requests that
join a running batch between steps, are prefilled in chunks, share prompt prefixes, are preempted
when the cache runs out and recomputed, or meet an out-of-memory error inside a step, get exactly
what ``Loaded.generate`` gives them alone — every token once and in order — with the compact step
and with the model's own forward, and seeded sampling does not depend on the batch's other rows."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
from varied_weights import varied_copy

import intelrt
from intelrt.backends.cpu import CpuBackend
from intelrt.decoding.engine import FastDecoder
from intelrt.decoding.inflight import InflightBatch, InflightUnavailable, Progress
from intelrt.decoding.memory import MemoryBudget, size_engine
from intelrt.decoding.sampling import DecodeRequest, SamplingParams
from intelrt.decoding.tuning import DecodeTuning
from intelrt.plugin import DecodeChoice

PROMPTS = ["Intel GPUs are", "hello", "the cat sat on the mat and then", "x",
           "Gaudi runs PyTorch eagerly by default and", "a b c d e f g h i j k l m n o p q r s t u v w"]
MAX_NEW = [20, 7, 15, 25, 11, 9]
#: The engine with the model's own forward (a transformers Cache over the paged blocks), eager.
MODEL_STEP = DecodeChoice("fast", cache="static")
#: Small blocks, so that short prompts span several and share some.
TUNING = DecodeTuning(block_size=4, max_batch_tokens=64, inflight_steps=4)
CPU = CpuBackend(CpuBackend.detect({}))
"""The backend of the models built here without a plan."""


@pytest.fixture(scope="module")
def loaded(tiny_model: Path, tmp_path_factory: pytest.TempPathFactory) -> intelrt.Loaded:
    return intelrt.load(varied_copy(tiny_model, tmp_path_factory.mktemp("varied"), seed=1))


def _ids(loaded: intelrt.Loaded, prompt: str) -> tuple[int, ...]:
    return tuple(loaded.tokenizer(prompt)["input_ids"])


def _eos(loaded: intelrt.Loaded) -> tuple[int, ...]:
    return (loaded.model.generation_config.eos_token_id,)


def _request(loaded: intelrt.Loaded, prompt: str | tuple[int, ...], max_new: int, **params: Any) -> DecodeRequest:
    ids = prompt if isinstance(prompt, tuple) else _ids(loaded, prompt)
    params.setdefault("stop_token_ids", _eos(loaded))
    return DecodeRequest(ids, SamplingParams(max_new_tokens=max_new, **params))


@pytest.fixture(scope="module")
def expected(loaded: intelrt.Loaded) -> list[list[int]]:
    """What each prompt gets alone from plain ``model.generate`` (greedy, stopping at EOS)."""
    import torch

    rows = []
    eos = loaded.model.generation_config.eos_token_id
    for prompt, max_new in zip(PROMPTS, MAX_NEW, strict=True):
        ids = torch.tensor([_ids(loaded, prompt)])
        with torch.inference_mode():
            out = loaded.model.generate(ids, attention_mask=torch.ones_like(ids), max_new_tokens=max_new,
                                        do_sample=False, pad_token_id=eos)[0, ids.shape[1]:].tolist()
        rows.append(out[:out.index(eos) + 1] if eos in out else out)
    assert len({t for row in rows for t in row}) > 10, "the model must vary its tokens for this test to mean anything"
    return rows


def batch_of(loaded: intelrt.Loaded, *, rows: int, blocks: int, context: int = 96, tuning: DecodeTuning = TUNING,
             choice: DecodeChoice | None = None, capturer: Any = None) -> InflightBatch:
    """A batch of ``rows`` rows over ``blocks`` usable KV blocks, sized by the engine's one sizing function."""
    decoder = FastDecoder(loaded.model, choice or loaded.plan.decided.decode, capturer, tuning, backend=loaded.plan.backend)
    decoder.prepare()
    shape = decoder.kv_shape()
    budget = MemoryBudget(blocks * tuning.block_size * shape.bytes_per_token, "a test's budget")
    size = size_engine(shape, budget, tuning, rows=rows, context=context)
    assert size.blocks - 1 == min(blocks, rows * -(-context // tuning.block_size))  # never more than all rows use
    return InflightBatch(decoder, size, loaded.model.device)


def drive(batch: InflightBatch, requests: list[DecodeRequest], join_every: int = 2, steps: int | None = None,
          check: bool = True) -> tuple[dict[int, list[int]], list[Progress]]:
    """Every request through ``batch``, one more joining every ``join_every`` looks; the tokens each
    got (by its index) and every look's progress."""
    got: dict[int, list[int]] = {}
    owner: dict[int, int] = {}
    looks: list[Progress] = []
    waiting = list(range(len(requests)))
    turn = 0
    while waiting or batch.pending:
        if waiting and turn % join_every == 0:
            index = waiting.pop(0)
            owner[batch.add([requests[index]])[0]] = index
            got[index] = []
        progress = batch.step(steps)
        looks.append(progress)
        assert not progress.failed, progress.failed
        for handle, tokens in progress.tokens.items():
            got[owner[handle]] += tokens
        if check:
            batch.check()
        turn += 1
        assert turn < 2000, "the batch made no progress"
    assert batch.pool.used == 0 and batch.busy == 0, "a finished batch holds no blocks and no rows"
    return got, looks


@pytest.mark.parametrize("choice", [None, MODEL_STEP], ids=["compact-step", "model-forward"])
def test_greedy_equals_generate_for_requests_joining_mid_batch(loaded: intelrt.Loaded, expected: list[list[int]],
                                                               choice: DecodeChoice | None) -> None:
    batch = batch_of(loaded, rows=4, blocks=64, choice=choice)
    assert batch.decoder.step == ("compact" if choice is None else "model")
    requests = [_request(loaded, p, m) for p, m in zip(PROMPTS, MAX_NEW, strict=True)]
    got, looks = drive(batch, requests)
    assert [got[i] for i in range(len(PROMPTS))] == expected
    assert max(len(p.outputs) for p in looks) >= 3, "several requests decoded together"


def test_a_list_is_a_batch_whose_requests_all_join_at_once(loaded: intelrt.Loaded, expected: list[list[int]]) -> None:
    """``Loaded.generate`` of a list runs the same engine: more prompts than rows queue and join as
    rows free up, and each gets what it gets alone."""
    ids = [list(_ids(loaded, p)) for p in PROMPTS]
    decoder = FastDecoder(loaded.model, loaded.plan.decided.decode, None, DecodeTuning(block_size=4),
                          backend=loaded.plan.backend)
    params = [SamplingParams(max_new_tokens=m, stop_token_ids=_eos(loaded)) for m in MAX_NEW]
    outputs, report = decoder.generate(ids, params, rows=2)
    assert outputs == expected
    assert report.path == "fast" and report.steps > max(MAX_NEW) // 2


def test_rows_leave_and_the_last_row_takes_the_free_place(loaded: intelrt.Loaded, expected: list[list[int]]) -> None:
    batch = batch_of(loaded, rows=4, blocks=64)
    short, long = _request(loaded, PROMPTS[1], MAX_NEW[1]), _request(loaded, PROMPTS[3], MAX_NEW[3])
    handles = batch.add([short, long])
    tokens: dict[int, list[int]] = {h: [] for h in handles}
    while batch.busy != 1 or handles[0] in batch.handles():
        for handle, new in batch.step().tokens.items():
            tokens[handle] += new
    assert batch.decoding_handles() == [handles[1]], "the long request moved to the first row"
    while batch.pending:
        for handle, new in batch.step().tokens.items():
            tokens[handle] += new
    assert tokens == {handles[0]: expected[1], handles[1]: expected[3]}


def test_a_client_leaving_frees_its_row_and_blocks_at_once(loaded: intelrt.Loaded, expected: list[list[int]]) -> None:
    batch = batch_of(loaded, rows=2, blocks=32)
    handles = batch.add([_request(loaded, PROMPTS[0], 25), _request(loaded, PROMPTS[2], MAX_NEW[2])])
    batch.step()
    held = batch.pool.used
    batch.retire(handles[0])  # the first client left mid-way
    assert batch.busy == 1 and batch.pool.used < held
    batch.check()
    joined = batch.add([_request(loaded, PROMPTS[0], MAX_NEW[0])])[0]
    got: list[int] = []
    while batch.pending:
        got += batch.step().tokens.get(joined, [])
    assert got == expected[0] and batch.pool.used == 0


def test_what_can_never_fit_is_refused_and_what_cannot_fit_now_waits(loaded: intelrt.Loaded) -> None:
    batch = batch_of(loaded, rows=2, blocks=10, context=40)  # 40 token slots
    with pytest.raises(ValueError, match="more than the 40 tokens"):
        batch.add([_request(loaded, PROMPTS[0], 40)])
    first = batch.add([_request(loaded, (5,) * 20, 16, stop_token_ids=())])[0]
    batch.step()
    second = batch.add([_request(loaded, (6,) * 20, 16, stop_token_ids=())])[0]
    progress = batch.step()
    assert second not in progress.outputs and batch.waiting == 1, "no blocks free: the second request waits"
    finished: list[int] = []
    while batch.pending:
        finished += batch.step().finished
    assert finished == [first, second] and batch.stats.preemptions == 0


def test_preemption_under_a_tiny_budget_loses_no_request_and_no_token(loaded: intelrt.Loaded,
                                                                      expected: list[list[int]]) -> None:
    """Six requests through 14 blocks of 4 tokens (56 slots, fewer than they need together): the
    newest are preempted as the oldest grow, recomputed later from their prompt and the tokens
    they had (from the prefix cache where those blocks survived), and every request still gets
    ``generate``'s tokens, each once and in order."""
    batch = batch_of(loaded, rows=4, blocks=14, context=56)
    requests = [_request(loaded, p, m) for p, m in zip(PROMPTS, MAX_NEW, strict=True)]
    got, _ = drive(batch, requests, join_every=1, steps=8)
    assert [got[i] for i in range(len(PROMPTS))] == expected
    assert batch.stats.preemptions >= 2, batch.stats


@pytest.mark.parametrize("caching", [True, False], ids=["prefix-cache", "no-prefix-cache"])
def test_requests_sharing_a_prefix_reuse_its_blocks_and_get_the_same_tokens(loaded: intelrt.Loaded,
                                                                            caching: bool) -> None:
    import torch

    tuning = replace(TUNING, prefix_caching=caching)
    batch = batch_of(loaded, rows=2, blocks=64, context=128, tuning=tuning)
    header = _ids(loaded, "You are a helpful assistant who answers in one short sentence. Question:")
    questions = [header + _ids(loaded, q) for q in (" what is a GPU?", " who made Gaudi?", " what is a GPU?")]
    alone = []
    for ids in questions:
        row = torch.tensor([ids])
        with torch.inference_mode():
            alone.append(loaded.model.generate(row, attention_mask=torch.ones_like(row), max_new_tokens=10,
                                               do_sample=False, eos_token_id=None,
                                               pad_token_id=0)[0, len(ids):].tolist())
    got = []
    for ids in questions:  # one after the other: the first one's blocks are cached, then free
        handle = batch.add([_request(loaded, ids, 10, stop_token_ids=())])[0]
        tokens: list[int] = []
        while batch.pending:
            tokens += batch.step().tokens.get(handle, [])
        got.append(tokens)
    assert got == alone
    hits = batch.pool.stats.hit_tokens
    if caching:
        full = len(header) // 4 * 4
        assert hits >= 2 * full and batch.report.prefix_hit_tokens == hits
        assert hits >= full + (len(questions[2]) - 1) // 4 * 4, "the repeated question reuses its whole prompt"
    else:
        assert hits == 0


def test_chunked_prefill_equals_whole_prefill_and_lets_others_decode_meanwhile(loaded: intelrt.Loaded) -> None:
    """A 90-token prompt through a budget of 16 tokens a look is prefilled in 6 chunks; a request
    already decoding gets tokens in every one of those looks; both get ``generate``'s tokens."""
    import torch

    tuning = replace(TUNING, max_batch_tokens=16)
    batch = batch_of(loaded, rows=2, blocks=64, context=128, tuning=tuning)
    long_prompt = tuple((i * 7) % 300 + 3 for i in range(90))
    short = _request(loaded, PROMPTS[0], 24, stop_token_ids=())
    long = _request(loaded, long_prompt, 8, stop_token_ids=())

    def alone(request: DecodeRequest) -> list[int]:
        row = torch.tensor([request.prompt])
        with torch.inference_mode():
            return loaded.model.generate(row, attention_mask=torch.ones_like(row), do_sample=False, eos_token_id=None,
                                         max_new_tokens=request.max_new_tokens, pad_token_id=0)[0, row.shape[1]:].tolist()

    first = batch.add([short])[0]
    tokens: dict[int, list[int]] = {first: batch.step(1).tokens[first]}
    second = batch.add([long])[0]
    tokens[second] = []
    prefill_looks = 0
    while batch.pending:
        prefilling = batch.prefilling or batch.waiting
        progress = batch.step(1)
        for handle, new in progress.tokens.items():
            tokens[handle] += new
        if prefilling and second not in progress.outputs:
            prefill_looks += 1
            assert first in progress.outputs, "the decoding request got a token while the long prompt prefilled"
    assert prefill_looks >= 5
    assert tokens[first] == alone(short)
    assert tokens[second] == alone(long)


def _sample(batch: InflightBatch, request: DecodeRequest, neighbours: list[DecodeRequest]) -> list[int]:
    handles = batch.add([*neighbours, request])
    mine = handles[-1]
    tokens: list[int] = []
    while batch.pending:
        tokens += batch.step().tokens.get(mine, [])
    return tokens


def test_seeded_sampling_is_the_same_whatever_else_is_in_the_batch(loaded: intelrt.Loaded,
                                                                   expected: list[list[int]]) -> None:
    batch = batch_of(loaded, rows=4, blocks=96)
    prompt = _ids(loaded, PROMPTS[0])
    seeded = _request(loaded, prompt, 20, stop_token_ids=(), temperature=1.0, top_p=0.9, seed=1234)
    greedy_neighbour = _request(loaded, PROMPTS[2], 20, stop_token_ids=())
    sampled_neighbour = _request(loaded, PROMPTS[4], 20, stop_token_ids=(), temperature=0.7, seed=5)
    alone = _sample(batch, seeded, [])
    assert _sample(batch, seeded, [greedy_neighbour, sampled_neighbour]) == alone
    assert _sample(batch, replace(seeded, params=replace(seeded.params, seed=4321)), []) != alone
    greedy = _request(loaded, prompt, 20, stop_token_ids=())
    assert alone != _sample(batch, greedy, [])
    # A sampling neighbour does not change a greedy row: it still gets generate's tokens.
    assert _sample(batch, _request(loaded, PROMPTS[0], MAX_NEW[0]), [sampled_neighbour]) == expected[0]


def test_sampling_follows_temperature_top_p_top_k_and_min_p(loaded: intelrt.Loaded) -> None:
    """Near-zero temperature, a tiny top_p, top_k=1 or min_p=1 leave only the likeliest token:
    greedy's answer; otherwise seeded sampling differs."""
    batch = batch_of(loaded, rows=2, blocks=96)
    prompt = _ids(loaded, PROMPTS[2])
    greedy = _sample(batch, _request(loaded, prompt, 16, stop_token_ids=()), [])
    for narrow in ({"temperature": 1e-4}, {"temperature": 1.5, "top_p": 1e-6}, {"temperature": 1.5, "top_k": 1},
                   {"temperature": 1.5, "min_p": 1.0}, {"temperature": 1.5, "top_k": 200, "top_p": 1e-6}):
        assert _sample(batch, _request(loaded, prompt, 16, stop_token_ids=(), seed=3, **narrow), []) == greedy, narrow
    assert _sample(batch, _request(loaded, prompt, 16, stop_token_ids=(), temperature=1.5, seed=3), []) != greedy


def test_penalties_bias_and_logprobs_follow_transformers_and_openai(loaded: intelrt.Loaded) -> None:
    """Greedy with ``repetition_penalty`` equals transformers' generate with it; a logit bias of
    +100 forces its token; log-probabilities are the model's own (log_softmax of generate's raw
    logits), the top ones likeliest first."""
    import torch

    batch = batch_of(loaded, rows=2, blocks=96)
    prompt = _ids(loaded, PROMPTS[0])
    row = torch.tensor([prompt])
    with torch.inference_mode():
        plain = loaded.model.generate(row, attention_mask=torch.ones_like(row), max_new_tokens=16, do_sample=False,
                                      repetition_penalty=1.8, eos_token_id=None, pad_token_id=0)
        free = loaded.model.generate(row, attention_mask=torch.ones_like(row), max_new_tokens=6, do_sample=False,
                                     eos_token_id=None, pad_token_id=0, output_logits=True,
                                     return_dict_in_generate=True)
    penalized = _sample(batch, _request(loaded, prompt, 16, stop_token_ids=(), repetition_penalty=1.8), [])
    assert penalized == plain[0, len(prompt):].tolist()
    assert penalized != _sample(batch, _request(loaded, prompt, 16, stop_token_ids=()), [])
    assert set(_sample(batch, _request(loaded, prompt, 5, stop_token_ids=(), logit_bias={42: 100.0}), [])) == {42}
    handle = batch.add([_request(loaded, prompt, 6, stop_token_ids=(), logprobs=3)])[0]
    sampled = []
    while batch.pending:
        sampled += batch.step().outputs.get(handle, [])
    expected = [step[0].float().log_softmax(-1) for step in free.logits]
    assert [t.token_id for t in sampled] == free.sequences[0, len(prompt):].tolist()
    for token, logprobs in zip(sampled, expected, strict=True):
        assert token.logprob == pytest.approx(float(logprobs[token.token_id]), abs=1e-4)
        assert [t.token_id for t in token.top_logprobs] == logprobs.topk(3).indices.tolist()
        assert [t.logprob for t in token.top_logprobs] == pytest.approx(logprobs.topk(3).values.tolist(), abs=1e-4)


def test_a_constraint_limits_each_token_and_ends_the_completion(loaded: intelrt.Loaded) -> None:
    import torch

    class Digits:
        """Allows only tokens 10..19; ends after three of them."""

        def __init__(self) -> None:
            self.seen: list[int] = []

        def allowed_tokens_mask(self, vocab_size: int) -> Any:
            mask = torch.zeros(vocab_size, dtype=torch.bool)
            mask[10:20] = True
            return mask

        def advance(self, token_id: int) -> None:
            self.seen.append(token_id)

        def is_terminated(self) -> bool:
            return len(self.seen) == 3

    batch = batch_of(loaded, rows=2, blocks=96)
    constraint = Digits()
    handle = batch.add([_request(loaded, PROMPTS[0], 12, stop_token_ids=(), constraint=constraint)])[0]
    free = batch.add([_request(loaded, PROMPTS[1], 12, stop_token_ids=())])[0]
    tokens: dict[int, list[int]] = {handle: [], free: []}
    finished: dict[int, str] = {}
    while batch.pending:
        progress = batch.step()
        for h, new in progress.tokens.items():
            tokens[h] += new
        finished |= progress.finished
    assert len(tokens[handle]) == 3 and all(10 <= t < 20 for t in tokens[handle]) and constraint.seen == tokens[handle]
    assert finished == {handle: "stop", free: "length"} and len(tokens[free]) == 12


def test_an_out_of_memory_error_inside_a_step_fails_no_request(loaded: intelrt.Loaded,
                                                                expected: list[list[int]]) -> None:
    """The device refuses the large allocations of the first prefills and decode steps (a
    simulated out-of-memory at the allocator): the engine halves its token budget, preempts rows
    and retries; every request still gets generate's tokens, and the retries are counted."""
    from intelrt.testing.allocation import allocation_limit

    batch = batch_of(loaded, rows=4, blocks=96)
    requests = [_request(loaded, p, m) for p, m in zip(PROMPTS, MAX_NEW, strict=True)]
    vocab_row = batch.vocab * 4  # one row of float32 logits
    with allocation_limit(3 * vocab_row, times=3) as limit:
        got, _ = drive(batch, requests, join_every=1)
    assert limit.failures == 3
    assert [got[i] for i in range(len(PROMPTS))] == expected
    assert batch.stats.oom_retries == 3 and batch.stats.preemptions >= 1


def _rerun_capturer(log: list[str]) -> Callable[..., Callable[[], object]]:
    """A 'graph' that re-runs the step: what a capturer must do, minus the device."""

    def capture(step: Callable[[], object], warmup: int = 2) -> Callable[[], object]:
        log.append("capture")
        for _ in range(warmup):
            step()
        return step

    return capture


def test_warm_up_captures_each_row_bucket_greedy_and_sampling_once(loaded: intelrt.Loaded,
                                                                   expected: list[list[int]]) -> None:
    """Warm-up captures every row bucket's step, greedy and sampling. The torch attention reads a
    power of two of blocks per row: a captured step is captured again only when the rows'
    contexts outgrow it (its narrower graph dropped), never twice for one width."""
    captured: list[str] = []
    choice = replace(loaded.plan.decided.decode, graphs="test", warmup="static")  # type: ignore[type-var]
    batch = batch_of(loaded, rows=4, blocks=64, choice=choice, capturer=_rerun_capturer(captured))
    assert batch.buckets == [1, 2, 4]
    batch.warm_up()
    assert len(captured) == 2 * len(batch.buckets)  # every bucket, greedy and sampling
    requests = [_request(loaded, p, m) for p, m in zip(PROMPTS, MAX_NEW, strict=True)]
    got, _ = drive(batch, requests)
    assert [got[i] for i in range(len(PROMPTS))] == expected
    keys = batch.runner.captured()
    assert len({k[:2] for k in keys}) == len(keys), "one graph per bucket and sampler kind is kept"
    widths = {k[2] for k in keys}
    assert max(widths) > 1 and len(captured) <= 2 * len(batch.buckets) + len(batch.buckets) * 4, captured


def test_a_sliding_window_model_runs_in_flight_on_its_own_forward(tmp_path: Path) -> None:
    """Sliding-window layers of a class outside the compact step (Ministral): the model's own
    forward over the paged cache, its sliding layers masked to their window."""
    import torch
    from transformers import AutoTokenizer, MinistralConfig, MinistralForCausalLM

    from intelrt.tiny import build_tokenizer

    build_tokenizer(tmp_path)
    tokenizer = AutoTokenizer.from_pretrained(tmp_path)
    config = MinistralConfig(vocab_size=len(tokenizer), hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                             num_attention_heads=2, num_key_value_heads=1, head_dim=16, max_position_embeddings=256,
                             sliding_window=8, layer_types=["full_attention", "sliding_attention"], eos_token_id=None,
                             bos_token_id=None)
    torch.manual_seed(0)
    from varied_weights import vary

    model = MinistralForCausalLM(config).eval()
    vary(model, seed=2)
    decoder = FastDecoder(model, MODEL_STEP, None, TUNING, backend=CPU)
    prompts = [(5, 9, 13, 17, 21, 25, 29, 33, 37, 41, 45, 49), (7, 8)]
    outputs, report = decoder.generate(prompts, SamplingParams(max_new_tokens=20), rows=2)
    for prompt, got in zip(prompts, outputs, strict=True):
        row = torch.tensor([prompt])
        with torch.inference_mode():
            want = model.generate(row, attention_mask=torch.ones_like(row), max_new_tokens=20, do_sample=False,
                                  pad_token_id=0)[0, len(prompt):].tolist()
        assert got == want
    assert report.step == "model"


def test_a_model_whose_attention_takes_no_4d_mask_is_refused_with_the_reason(loaded: intelrt.Loaded) -> None:
    decoder = FastDecoder(loaded.model, MODEL_STEP, None, TUNING, backend=loaded.plan.backend)
    before = loaded.model.config._attn_implementation
    loaded.model.config._attn_implementation = "flash_attention_2"
    try:
        with pytest.raises(InflightUnavailable, match="flash_attention_2 attention"):
            batch_of(loaded, rows=2, blocks=16, context=64, choice=MODEL_STEP)
    finally:
        loaded.model.config._attn_implementation = before
    assert decoder.step == "model"


def test_decode_reraises_a_streamer_error_without_turning_compiling_off(loaded: intelrt.Loaded) -> None:
    """A streamer that raises (a server's client left) ends the call with its own error; it is not
    taken for a failed compilation (which would turn compiling off and run the call again)."""
    import torch

    from intelrt.decoding.keywords import DecodeOptions

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

    decoder = FastDecoder(loaded.model, replace(MODEL_STEP, compile="eager"), None, backend=loaded.plan.backend)
    ids = torch.tensor([_ids(loaded, PROMPTS[0])])
    with pytest.raises(Gone):
        decoder.decode(ids, torch.ones_like(ids), DecodeOptions(30, False, 1.0, 0, 1.0, (), 1, Streamer()))
    assert decoder.compile_backend == "eager" and not decoder.notes


def test_rows_that_end_never_step_past_a_learned_position_table() -> None:
    """GPT-2 looks positions up in a table of ``n_positions``: rows that reached their last token,
    and idle rows, stop advancing on the device (three requests of 61 tokens through a table of 64,
    four steps per look), and each request still gets ``generate``'s tokens."""
    import torch
    from transformers import GPT2Config, GPT2LMHeadModel

    torch.manual_seed(0)
    model = GPT2LMHeadModel(GPT2Config(vocab_size=128, n_positions=64, n_embd=32, n_layer=2, n_head=2,
                                       eos_token_id=None, bos_token_id=None)).eval()
    from varied_weights import vary

    vary(model, seed=3)
    decoder = FastDecoder(model, MODEL_STEP, None, DecodeTuning(block_size=8, eos_check_every=4), backend=CPU)
    prompt = (5, 9, 13)
    with torch.inference_mode():
        want = model.generate(torch.tensor([prompt]), attention_mask=torch.ones(1, 3, dtype=torch.long),
                              max_new_tokens=61, do_sample=False, pad_token_id=0)[0, 3:].tolist()
    outputs, _ = decoder.generate([prompt, prompt[:2], prompt], [SamplingParams(max_new_tokens=61),
                                                                SamplingParams(max_new_tokens=30),
                                                                SamplingParams(max_new_tokens=61)], rows=3)
    assert outputs[0] == outputs[2] == want and len(outputs[1]) == 30


@pytest.mark.parametrize("seed", [11, 12, 13])
def test_random_traffic_with_shared_prefixes_through_a_tiny_cache(loaded: intelrt.Loaded, seed: int) -> None:
    """Requests built from three shared headers join at random looks, some clients leave mid-way,
    through 14 blocks of 4 tokens (prefix hits, evictions of free cached blocks, preemptions, waits
    for blocks, all at once): every request that ran to its end got exactly what generate gives its
    prompt alone, and the pool's books balance after every look."""
    import random

    import torch

    rng = random.Random(seed)
    headers = [tuple(rng.randrange(3, 300) for _ in range(n)) for n in (12, 17, 9)]
    prompts = [headers[i % 3] + tuple(rng.randrange(3, 300) for _ in range(rng.randrange(1, 8))) for i in range(14)]
    max_new = [rng.randrange(3, 14) for _ in prompts]
    reference: dict[tuple[int, ...], list[int]] = {}
    for prompt, count in zip(prompts, max_new, strict=True):
        row = torch.tensor([prompt])
        with torch.inference_mode():
            reference[prompt] = loaded.model.generate(row, attention_mask=torch.ones_like(row), max_new_tokens=count,
                                                      do_sample=False, eos_token_id=None,
                                                      pad_token_id=0)[0, len(prompt):].tolist()
    batch = batch_of(loaded, rows=4, blocks=14, context=40, tuning=replace(TUNING, max_batch_tokens=12))
    owner: dict[int, int] = {}
    got: dict[int, list[int]] = {}
    ended: set[int] = set()
    left: set[int] = set()
    order = list(range(len(prompts)))
    while order or batch.pending:
        if order and rng.random() < 0.6:
            index = order.pop(0)
            owner[batch.add([_request(loaded, prompts[index], max_new[index], stop_token_ids=())])[0]] = index
            got[index] = []
        running = [h for h in owner if h in batch.handles()]
        if running and rng.random() < 0.05:
            leaving = rng.choice(running)
            batch.retire(leaving)
            left.add(owner[leaving])
        progress = batch.step(rng.choice([1, 2, 4]))
        assert not progress.failed
        for handle, tokens in progress.tokens.items():
            got[owner[handle]] += tokens
        ended |= {owner[h] for h in progress.finished}
        batch.check()
    assert batch.pool.used == 0
    assert ended | left == set(range(len(prompts))) and len(ended) >= 10
    for index in ended:
        assert got[index] == reference[prompts[index]][:max_new[index]], index
    assert batch.pool.stats.hit_tokens > 0 and batch.stats.preemptions + batch.pool.stats.evicted_blocks > 0


def test_layers_the_engine_cannot_mask_are_refused_not_attended_wrongly(loaded: intelrt.Loaded) -> None:
    """A layer kind the model's own forward over the paged cache has no mask for (Llama-4's
    ``chunked_attention``) is refused with the reason, never attended as full attention."""
    config = loaded.model.config
    before = config.layer_types
    config.layer_types = ["full_attention", "chunked_attention"]
    try:
        with pytest.raises(InflightUnavailable, match="chunked_attention layers"):
            batch_of(loaded, rows=2, blocks=16, context=64, choice=MODEL_STEP)
    finally:
        config.layer_types = before


@pytest.mark.slow
@pytest.mark.timeout(900)  # inductor on a busy 2-core CPU
def test_after_warm_up_no_batch_size_compiles_the_step_again(loaded: intelrt.Loaded, expected: list[list[int]],
                                                            one_torch_thread: None) -> None:
    """The compact step compiled with inductor (dynamic shapes) at warm-up, once for every row bucket:
    requests then join one per look, so decode steps of 1, 2, 3 … rows and prompt passes of every
    length run, and torch compiles nothing more (``EngineStats.compiles_after_warmup`` counts what it
    would); every request gets generate's tokens."""
    choice = DecodeChoice("fast", cache="static", step="compact", compile="inductor", warmup="compiled")
    batch = batch_of(loaded, rows=4, blocks=96, choice=choice)
    batch.warm_up()
    assert batch.runner.warm_frames is not None
    requests = [_request(loaded, p, m) for p, m in zip(PROMPTS, MAX_NEW, strict=True)]
    got, looks = drive(batch, requests, join_every=1)
    assert [got[i] for i in range(len(PROMPTS))] == expected
    assert max(len(p.outputs) for p in looks) >= 3, "several row counts ran"
    assert batch.stats.compiles_after_warmup == 0
