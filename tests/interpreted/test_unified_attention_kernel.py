"""The engine step's one-kernel attention (``intelrt::unified_attention``), run for real on the CPU
through Triton's interpreter, against attention written plainly in float64: decoding rows (one
token each) and prompt chunks (several tokens, continuing a cached context) in one call, grouped
query heads, a sliding window, soft-capped scores and attention sinks.

Collected only in a process started with ``TRITON_INTERPRET=1`` (``tests/integration/
test_decode_attention_kernel.py`` starts it). float32 only (the interpreter's bfloat16 dot is not
faithful)."""

from __future__ import annotations

import os
from typing import Any

import pytest
from varied_weights import vary

assert os.environ.get("TRITON_INTERPRET") == "1", "run through tests/integration/test_decode_attention_kernel.py"

BLOCK = 4
HEAD_DIM = 16


def reference(q: Any, k_pool: Any, v_pool: Any, requests: list[tuple[int, int, list[int]]], scaling: float,
              window: int, softcap: float, sinks: Any) -> Any:
    """Each query attended one at a time in float64: request ``(tokens, context, blocks)`` has its
    last ``tokens`` queries at positions ``context - tokens ..``, each seeing positions up to its own
    (the last ``window`` of them when ``window``), read from the blocks its table lists."""
    import torch

    q_heads, kv_heads = q.shape[1], k_pool.shape[2]
    group = q_heads // kv_heads
    out = torch.zeros(q.shape, dtype=torch.float64)
    first = 0
    for tokens, context, blocks in requests:
        slots = [blocks[p // BLOCK] * BLOCK + p % BLOCK for p in range(context)]
        keys = k_pool.reshape(-1, kv_heads, HEAD_DIM)[slots].double()
        values = v_pool.reshape(-1, kv_heads, HEAD_DIM)[slots].double()
        for i in range(tokens):
            position = context - tokens + i
            lo = max(0, position - window + 1) if window else 0
            for head in range(q_heads):
                scores = keys[lo:position + 1, head // group] @ q[first + i, head].double() * scaling
                if softcap:
                    scores = torch.tanh(scores / softcap) * softcap
                if sinks is not None:
                    scores = torch.cat([scores, sinks[head].double().reshape(1)])
                weights = torch.softmax(scores, 0)[:position + 1 - lo]
                out[first + i, head] = weights @ values[lo:position + 1, head // group]
        first += tokens
    return out


@pytest.mark.parametrize("tile", [8, 64], ids=["tiles-before-the-queries-unmasked", "every-tile-masked"])
@pytest.mark.parametrize(("q_heads", "kv_heads", "window", "softcap", "with_sinks"), [
    (4, 2, 0, 0.0, False),
    (8, 1, 0, 0.0, False),
    (4, 4, 6, 0.0, False),
    (4, 2, 0, 30.0, True),
], ids=["gqa", "one-kv-head", "sliding-window", "softcap-and-sinks"])
def test_decoding_rows_and_prompt_chunks_in_one_call(q_heads: int, kv_heads: int, window: int, softcap: float,
                                                     with_sinks: bool, tile: int, monkeypatch: Any) -> None:
    """``tile``: cache positions per iteration; 8 leaves the tiles every query of a block sees (before
    its first query) to the kernel's unmasked path, 64 (past every context here) masks them all."""
    import torch

    from intelrt.decoding import unified_attention as kernel
    from intelrt.decoding.unified_attention import (
        StepQueries,
        block_q,
        query_blocks,
        unified_attention,
    )

    monkeypatch.setattr(kernel, "TILE", tile)
    torch.manual_seed(0)
    blocks = 24
    k_pool = torch.randn(blocks, BLOCK, kv_heads, HEAD_DIM)
    v_pool = torch.randn(blocks, BLOCK, kv_heads, HEAD_DIM)
    # (tokens this step, context after it, the request's blocks): two decoding rows, a whole prompt,
    # the second chunk of a longer one, and a chunk shorter than a query block.
    requests = [(1, 9, [3, 7, 1]), (1, 2, [5]), (11, 11, [2, 9, 11]), (6, 14, [4, 8, 12, 13]), (2, 5, [20, 6])]
    width = max(len(b) for _, _, b in requests)
    tokens = sum(t for t, _, _ in requests)
    q = torch.randn(tokens, q_heads, HEAD_DIM)
    table = torch.zeros((len(requests), width), dtype=torch.long)
    for row, (_, _, ids) in enumerate(requests):
        table[row, :len(ids)] = torch.tensor(ids)
    cu_q = torch.tensor([0, *torch.tensor([t for t, _, _ in requests]).cumsum(0).tolist()], dtype=torch.int32)
    lengths = torch.tensor([c for _, c, _ in requests], dtype=torch.int32)
    sinks = torch.randn(q_heads) if with_sinks else None
    per_block = block_q(q_heads // kv_heads, max(t for t, _, _ in requests))
    owners = query_blocks(cu_q, tokens, per_block)
    got = unified_attention(q, k_pool, v_pool, cu_q, lengths, table, owners, per_block, 0.25, window, softcap, sinks)
    expected = reference(q, k_pool, v_pool, requests, 0.25, window, softcap, sinks)
    assert torch.allclose(got.double(), expected, atol=2e-5, rtol=1e-4), (got.double() - expected).abs().max()
    # As an engine step runs it: the decoding rows and the prompt chunks in two launches of their own shapes.
    split = StepQueries(cu_q, lengths, table, tokens).attend(q, k_pool, v_pool, 0.25, window, softcap, sinks)
    assert torch.allclose(split.double(), expected, atol=2e-5, rtol=1e-4), (split.double() - expected).abs().max()


def test_every_request_owns_enough_query_blocks() -> None:
    """The block → request map covers each request's tokens whatever their lengths (the grid is
    ``tokens // per_block + requests`` programs)."""
    import torch

    from intelrt.decoding.unified_attention import query_blocks

    for lengths in ([1] * 7, [5, 1, 16, 3], [17], [4, 4, 4], [1, 31, 1, 2]):
        for per_block in (1, 2, 4, 16):
            cu_q = torch.tensor([0, *torch.tensor(lengths).cumsum(0).tolist()], dtype=torch.int32)
            owners = query_blocks(cu_q, int(cu_q[-1]), per_block).tolist()
            for seq, length in enumerate(lengths):
                first = int(cu_q[seq]) // per_block + seq
                mine = [b for b, s in enumerate(owners) if s == seq]
                assert mine and mine[0] == first, (lengths, per_block, seq, owners)
                assert len(mine) * per_block >= length, (lengths, per_block, seq, owners)


def _rerun_capturer(captured: list[str]) -> Any:
    """A 'graph' that re-runs its step (what a capturer must do, minus the device): the engine's
    captured paths — fixed buffers, padded token counts — run for real on the CPU."""

    def capture(step: Any, warmup: int = 2) -> Any:
        captured.append("capture")
        for _ in range(warmup):
            step()
        return step

    return capture


@pytest.mark.parametrize(("captured", "compiled", "compile_fails"),
                         [(False, False, False), (True, False, False), (True, True, False), (True, True, True)],
                         ids=["eager", "captured-flat-steps", "compiled-captured-flat-steps",
                              "flat-step-compile-fails"])
def test_mixed_steps_through_the_kernel_equal_generate(tiny_model: Any, captured: bool, compiled: bool,
                                                       compile_fails: bool, monkeypatch: pytest.MonkeyPatch) -> None:
    """The engine with the plan's attention kernel (planned on the CPU under the interpreter):
    requests join a running batch one per look, so each look is one forward over the decoding rows'
    newest tokens and the newcomers' prompt chunks, attended by this kernel — eagerly, and as the
    steps a device graph records (tokens padded to the next captured size, requests to every row),
    and those steps compiled by inductor in the memory profile: one graph for every size and cache,
    none compiled after; where that compile fails, the steps are captured uncompiled with a note.
    Every request gets exactly what ``model.generate`` gives it alone."""
    import torch

    import intelrt
    from intelrt.decoding.engine import FastDecoder
    from intelrt.decoding.inflight import InflightBatch
    from intelrt.decoding.memory import MemoryBudget, size_engine
    from intelrt.decoding.sampling import DecodeRequest, SamplingParams
    from intelrt.decoding.tuning import DecodeTuning

    loaded = intelrt.load(tiny_model)
    vary(loaded.model, seed=5)
    tokenizer = loaded.tokenizer
    prompts = ["Intel GPUs are", "the cat sat on the mat and then the dog", "x", "a b c d e f g h"]
    expected = []
    for prompt in prompts:
        ids = torch.tensor([tokenizer(prompt)["input_ids"]])
        with torch.inference_mode():
            out = loaded.model.generate(ids, attention_mask=torch.ones_like(ids), max_new_tokens=10,
                                        do_sample=False, eos_token_id=None, pad_token_id=0)
        expected.append(out[0, ids.shape[1]:].tolist())
    # chunks of a few tokens (compiled: a budget of two captured step sizes, 16 and 20 tokens)
    tuning = DecodeTuning(block_size=4, max_batch_tokens=20 if compiled else 8, attention_splits=2,
                          compiled_flat=compiled)
    choice = loaded.plan.decided.decode
    assert choice.attention_kernel and choice.step_attention == "triton", "the CPU plans both under the interpreter"
    captures: list[str] = []
    if captured:
        from dataclasses import replace

        choice = replace(choice, graphs="cuda", warmup=None, compile="inductor" if compiled else None)
    decoder = FastDecoder(loaded.model, choice, _rerun_capturer(captures) if captured else None, tuning,
                          backend=loaded.plan.backend)
    decoder.prepare()
    if compiled:  # no graph of an earlier test's engine (dynamo keeps them per function, and they would serve)
        torch._dynamo.reset()
    if compile_fails:  # inductor fails to lower the graph holding the step attention op (the flat step's only)
        import torch._inductor.compile_fx as inductor

        lower = inductor.compile_fx

        def failing(graph: Any, inputs: Any, *args: Any, **kwargs: Any) -> Any:
            if any("unified_attention" in str(node.target) for node in graph.graph.nodes):
                raise RuntimeError("inductor: a simulated lowering failure")
            return lower(graph, inputs, *args, **kwargs)

        monkeypatch.setattr(inductor, "compile_fx", failing)
    shape = decoder.kv_shape()
    size = size_engine(shape, MemoryBudget(64 * 4 * shape.bytes_per_token, "a test's budget"), tuning, rows=4,
                       context=40)
    if compiled:  # as a server's memory profile does, on an engine of two blocks: the flat step compiles there
        from intelrt.decoding.memory import EngineSize

        probe = InflightBatch(decoder, EngineSize(size.rows, size.context, size.block_size, 2, size.max_batch_tokens,
                                                  size.bytes_per_token), loaded.model.device, preallocate=True)
        probe.profile()
        del probe
    batch = InflightBatch(decoder, size, loaded.model.device)
    if captured:
        batch.warm_up()  # as a server does: every step size captured before the first request
        assert batch.runner.flat_captured() == batch.runner.flat_buckets
        if compile_fails:
            assert len(decoder.notes) == 1 and "simulated lowering failure" in decoder.notes[0], decoder.notes
            assert "captured uncompiled" in decoder.notes[0]
        else:
            assert not decoder.notes, decoder.notes
        assert batch.describe()["flat_compiled"] is (compiled and not compile_fails)
        stats = batch.stats  # what the warm-up took, as a server's start reports it
        assert stats.warm_up_captures == len(batch.runner.captured()) + len(batch.runner.flat_buckets) == len(captures)
        assert (stats.warm_up_compiles > 0) is compiled and stats.warm_up_seconds > 0
    if compiled and not compile_fails:
        from torch._dynamo.eval_frame import _debug_get_cache_entry_list

        from intelrt.decoding.compact import CompactModel

        graphs = _debug_get_cache_entry_list(CompactModel.flat_step.__code__)
        assert len(batch.runner.flat_buckets) > 1 and len(graphs) == 1, "one compiled graph for every step size " \
            "and every cache size"
    got: dict[int, list[int]] = {}
    handles: dict[int, int] = {}
    waiting = list(range(len(prompts)))
    while waiting or batch.pending:
        if waiting:
            index = waiting.pop(0)
            request = DecodeRequest(tuple(tokenizer(prompts[index])["input_ids"]), SamplingParams(max_new_tokens=10))
            handles[batch.add([request])[0]] = index
            got[index] = []
        for handle, tokens in batch.step(2).tokens.items():
            got[handles[handle]] += tokens
    assert batch.stats.mixed_steps >= 3, batch.stats
    assert [got[i] for i in range(len(prompts))] == expected
    if captured:
        assert batch.runner.flat_captured() == batch.runner.flat_buckets, "no step captured after warm-up"
        assert batch.stats.compiles_after_warmup == 0


def test_the_tuning_step_is_a_busy_servers_step() -> None:
    """The step an engine tunes the kernel on (``tuning_step``): decoding rows at contexts spread up to
    the engine's, a new prompt and a chunk after the longest, over pools of its own with every
    request's blocks distinct and never the null block — and the kernel attends it as any step."""
    import torch

    from intelrt.decoding.unified_attention import tuning_step

    torch.manual_seed(0)
    q_heads, kv_heads = 4, 2
    q, k_pool, v_pool, queries = tuning_step(BLOCK, kv_heads, HEAD_DIM, q_heads, tokens=24, rows=6, context=30,
                                             dtype=torch.float32, device=torch.device("cpu"))
    counts = (queries.cu_q[1:] - queries.cu_q[:-1]).tolist()
    lengths = queries.lengths.tolist()
    assert counts == [1] * 6 + [9, 9] and q.shape == (24, q_heads, HEAD_DIM)
    assert lengths[:6] == sorted(lengths[:6]) and lengths[5] == 30 and lengths[6:] == [9, 30 + 9], lengths
    blocks = [queries.table[i, :-(-length // BLOCK)].tolist() for i, length in enumerate(lengths)]
    used = [b for each in blocks for b in each]
    assert len(set(used)) == len(used) and min(used) >= 1 and max(used) < k_pool.shape[0], blocks
    requests = [(count, length, ids) for count, length, ids in zip(counts, lengths, blocks, strict=True)]
    got = queries.attend(q, k_pool, v_pool, 0.25)
    expected = reference(q, k_pool, v_pool, requests, 0.25, 0, 0.0, None)
    assert torch.allclose(got.double(), expected, atol=2e-5, rtol=1e-4), (got.double() - expected).abs().max()
