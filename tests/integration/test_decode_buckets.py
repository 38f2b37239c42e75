"""The decode engine on a backend that compiles a graph per input shape (Gaudi, issue 38): every
step is padded to the plan's shape buckets — the decode steps' rows and blocks, each prompt chunk's
tokens and blocks — every bucket runs once at warm-up, and a run of requests of mixed lengths
afterwards meets no shape the warm-up did not run, with the tokens plain ``generate`` gives.

The plan and its buckets are a simulated Gaudi 2's (vLLM-Gaudi's exponential bucketing, 128-token
KV blocks); the model runs on the CPU, its device graphs stood in for by a capturer that re-runs
its step (a graph's contract, minus the device)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from varied_weights import varied_copy

import intelrt
from intelrt.decoding.engine import FastDecoder
from intelrt.decoding.inflight import InflightBatch
from intelrt.decoding.memory import MemoryBudget, size_engine
from intelrt.decoding.sampling import DecodeRequest, SamplingParams
from intelrt.decoding.tuning import DecodeTuning

PROMPTS = ["Intel GPUs are", "the cat sat on the mat and then the dog", "x", "a b c d e f g h i j k l m n o p"]


def _rerun(step: Any, warmup: int = 2) -> Any:
    for _ in range(warmup):
        step()
    return step


@pytest.fixture(scope="module")
def model_dir(tiny_model: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    return varied_copy(tiny_model, tmp_path_factory.mktemp("buckets"), seed=4)


def test_a_gaudi_engine_runs_only_the_shapes_its_warm_up_ran(simulate: Any, model_dir: Path) -> None:
    loaded = intelrt.load(model_dir)  # the weights on the CPU; a Gaudi plan's decisions drive the engine
    simulate("hpu", 1, generation="gaudi2", mode="lazy", torch_fork=True, env={"PT_ENABLE_INT64_SUPPORT": "1"})
    plan = intelrt.plan(model_dir, workload="server")
    buckets, decode = plan.decided.buckets, plan.decided.decode
    assert buckets is not None and buckets.warmup and decode is not None and decode.graphs == "hpu"
    assert decode.step == "model", "Gaudi steps the model's own forward"
    tokenizer = loaded.tokenizer
    expected = []
    for prompt in PROMPTS:
        ids = tokenizer(prompt, return_tensors="pt")["input_ids"]
        out = loaded.model.generate(ids, max_new_tokens=8, do_sample=False, eos_token_id=None, pad_token_id=0)
        expected.append(out[0, ids.shape[1]:].tolist())
    decoder = FastDecoder(loaded.model, decode, _rerun, DecodeTuning(max_batch_tokens=256, inflight_steps=2),
                          backend=loaded.plan.backend)
    decoder.pad_to(buckets)
    assert decoder.tuning.block_size == buckets.block_size == 128, "the cache counts blocks as the buckets do"
    decoder.prepare()
    shape = decoder.kv_shape()
    size = size_engine(shape, MemoryBudget(40 * 128 * shape.bytes_per_token, "a test's budget"), decoder.tuning,
                       rows=3, context=512, step_tokens=256)
    batch = InflightBatch(decoder, size, loaded.model.device)
    batch.warm_up()
    runner = batch.runner
    assert runner.buckets == [*[b for b in buckets.decode_batch_sizes if b < 3], 3]
    warmed = set(runner.shapes_warmed)
    assert {kind for kind, _, _ in warmed} == {"decode", "prefill"}
    assert all(tokens in buckets.prompt_lengths for kind, tokens, _ in warmed if kind == "prefill")
    got: dict[int, list[int]] = {}
    handles: dict[int, int] = {}
    waiting = list(range(len(PROMPTS)))
    while waiting or batch.pending:
        if waiting:  # one joins every look: prefills and decode steps of every row count meet
            index = waiting.pop(0)
            request = DecodeRequest(tuple(tokenizer(PROMPTS[index])["input_ids"]), SamplingParams(max_new_tokens=8))
            handles[batch.add([request])[0]] = index
            got[index] = []
        for handle, tokens in batch.step().tokens.items():
            got[handles[handle]] += tokens
    assert [got[i] for i in range(len(PROMPTS))] == expected
    assert runner.shapes_run, "the run recorded its shapes"
    assert runner.shapes_run <= warmed, f"shapes the warm-up never ran: {sorted(runner.shapes_run - warmed)}"
    assert batch.stats.mixed_steps == 0, "on Gaudi the chunks run apart, each padded, not with the decoding rows"
