"""The compiled step built where the decode loop does not wait for it (issues 31 and 39): an
``adaptive`` plan decodes from the first call with the uncompiled step while a compile worker — a
process of its own — compiles; a thread of the decoding process then loads what the worker built and
the compiled step takes over the engine's batch (its paged KV cache, tables and positions) at a look
boundary; the tokens equal plain ``model.generate``'s before and after the swap, nothing compiles on
the caller's thread, and a worker that fails or runs too long leaves the uncompiled step, said in
the report.

torch.compile's backend here is ``eager`` (dynamo's trace, no code generation: the worker's protocol
is what is tested); inductor's graphs found across processes are tested once, at the end."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import greedy
import pytest
from varied_weights import varied_copy

import intelrt
from intelrt.decoding.background import BackgroundCompilingDecoder
from intelrt.decoding.compile_worker import CompileJob, signature, skeleton
from intelrt.decoding.engine import FastDecoder
from intelrt.decoding.generation import GenerationPlan, Generator, decoder_class
from intelrt.decoding.keywords import DecodeOptions
from intelrt.decoding.tuning import DecodeTuning
from intelrt.plugin import BatchingChoice, DecodeChoice

PROMPTS = ["Intel GPUs are", "the cat sat on the mat and then"]
NEW_TOKENS = 60


def adaptive(backend: str) -> DecodeChoice:
    return DecodeChoice("fast", cache="static", compile=backend, step="compact", warmup="adaptive",
                        compile_worker=True)


@pytest.fixture(scope="module")
def varied(tiny_model: Path, tmp_path_factory: pytest.TempPathFactory) -> intelrt.Loaded:
    return intelrt.load(varied_copy(tiny_model, tmp_path_factory.mktemp("varied"), seed=6))


@pytest.fixture(autouse=True)
def own_compile_cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("INTELRT_COMPILE_CACHE", str(tmp_path / "compiled"))


@pytest.fixture
def compiled_on() -> Iterator[list[str]]:
    """The thread on which dynamo started each compile in this process while the test ran (dynamo's
    caches emptied first: an earlier test's step of the same shapes would otherwise be found)."""
    import torch._dynamo
    from torch._dynamo.callback import callback_handler

    torch._dynamo.reset()
    threads: list[str] = []

    def started(*_: Any) -> None:
        threads.append(threading.current_thread().name)

    callback_handler.register_start_callback(started)
    yield threads
    callback_handler.remove_start_callback(started)


def options(new_tokens: int = NEW_TOKENS, streamer: Any = None) -> DecodeOptions:
    return DecodeOptions(new_tokens, False, 1.0, 0, 1.0, (), 1, streamer=streamer)


class WaitsForTheCompile:
    """A streamer that, at its first token after the prompt, blocks until the background compile
    has ended: the swap then happens at the next step boundary, in the middle of the call."""

    def __init__(self, decoder: BackgroundCompilingDecoder) -> None:
        self.decoder, self.puts, self.tokens = decoder, 0, []
        self.worker_pid: int | None = None

    def put(self, value: Any) -> None:
        self.puts += 1
        if self.puts == 2:
            assert not self.decoder.swaps, "the first tokens come from the uncompiled step"
            running = self.decoder.compiling
            assert running is not None, "the compile runs while the first tokens are decoded"
            self.worker_pid = getattr(running, "pid", None)
            assert self.decoder.wait_for_compile(300)
        if self.puts > 1:
            self.tokens += value.tolist()

    def end(self) -> None:
        pass


def test_the_compiled_step_takes_over_in_the_middle_of_a_call(varied: intelrt.Loaded,
                                                              compiled_on: list[str]) -> None:
    """The worker is another process; this process only loads what it built, on a thread of its
    own; the swap comes at a look boundary inside the call, and a later call of the same shape runs
    compiled without compiling again."""
    decoder = BackgroundCompilingDecoder(varied.model, adaptive("eager"), None, backend=varied.plan.backend)
    ids = varied.tokenizer(PROMPTS[:1], return_tensors="pt")
    streamer = WaitsForTheCompile(decoder)
    tokens, report = decoder.decode(ids["input_ids"], ids["attention_mask"], options(streamer=streamer))
    assert streamer.worker_pid is not None and streamer.worker_pid != os.getpid()
    assert [swap.shape[0] for swap in decoder.swaps] == [1]  # one row
    assert 1 < decoder.swaps[0].token < NEW_TOKENS - 16, "swapped at a look boundary inside the call"
    assert (report.compiled, report.warmup) == ("eager", "compiled")
    assert tokens.tolist() == greedy.plain_generate(varied, PROMPTS[:1], NEW_TOKENS)
    assert streamer.tokens == tokens[0].tolist()  # every new token streamed once, across the swap
    assert compiled_on and set(compiled_on) == {"intelrt-compile-load"}, compiled_on
    loaded = len(compiled_on)
    again, report = decoder.decode(ids["input_ids"], ids["attention_mask"], options(24))
    assert report.warmup == "compiled" and len(compiled_on) == loaded, "a later call compiled again"
    assert again.tolist() == greedy.plain_generate(varied, PROMPTS[:1], 24)


def test_the_models_own_forward_is_built_by_the_worker_too(varied: intelrt.Loaded, compiled_on: list[str]) -> None:
    """The step of a family the compact step does not reproduce (and of Intel GPUs) is the model's
    own forward, compiled for the batch's static shapes: the worker builds that graph, this process
    loads it, and the batch's step is swapped (one row bucket: all rows; a bucket of fewer rows would
    compile here) with the same tokens."""
    choice = DecodeChoice("fast", cache="static", compile="eager", step="model", warmup="adaptive",
                          compile_worker=True)
    decoder = BackgroundCompilingDecoder(varied.model, choice, None, backend=varied.plan.backend)
    ids = varied.tokenizer(PROMPTS, return_tensors="pt", padding=True)
    before, report = decoder.decode(ids["input_ids"], ids["attention_mask"], options(24))
    assert report.warmup == "eager" and decoder.wait_for_compile(300)
    after, report = decoder.decode(ids["input_ids"], ids["attention_mask"], options(24))
    assert (report.step, report.warmup) == ("model", "compiled") and [s.shape[0] for s in decoder.swaps] == [2]
    assert before.tolist() == after.tolist() == greedy.plain_generate(varied, PROMPTS, 24)
    assert compiled_on and set(compiled_on) == {"intelrt-compile-load"}, compiled_on


def test_a_failed_worker_leaves_the_uncompiled_step(varied: intelrt.Loaded) -> None:
    """A compile that fails in the worker (here: a backend only this process registered) is said
    — a note naming the error, a warning — and not tried again; the step goes on uncompiled, with the
    same tokens."""
    from torch._dynamo import register_backend

    def here_only(gm: Any, example_inputs: Any) -> Any:
        return gm.forward

    register_backend(here_only, name="intelrt_test_here_only")
    decoder = BackgroundCompilingDecoder(varied.model, adaptive("intelrt_test_here_only"), None, backend=varied.plan.backend)
    ids = varied.tokenizer(PROMPTS[:1], return_tensors="pt")
    expected = greedy.plain_generate(varied, PROMPTS[:1], 24)
    first, _ = decoder.decode(ids["input_ids"], ids["attention_mask"], options(24))
    assert decoder.wait_for_compile(300)
    second, report = decoder.decode(ids["input_ids"], ids["attention_mask"], options(24))
    assert first.tolist() == second.tolist() == expected
    assert any("background compile (intelrt_test_here_only) failed (failed: " in note
               and "intelrt_test_here_only" in note.split("failed (failed: ", 1)[1] for note in report.notes), report.notes
    assert report.warmup == "eager" and not decoder.background and decoder.compiling is None and not decoder.swaps


def test_a_worker_past_its_timeout_is_stopped(varied: intelrt.Loaded) -> None:
    """``DecodeTuning.compile_timeout``: the worker is stopped (its process gone), the report says
    so, and the uncompiled step goes on."""
    decoder = BackgroundCompilingDecoder(varied.model, adaptive("eager"), None, DecodeTuning(compile_timeout=1), backend=varied.plan.backend)
    ids = varied.tokenizer(PROMPTS[:1], return_tensors="pt")
    decoder.decode(ids["input_ids"], ids["attention_mask"], options(24))
    worker = decoder.compiling
    assert worker is not None and getattr(worker, "pid", None) is not None
    assert decoder.wait_for_compile(60)
    tokens, report = decoder.decode(ids["input_ids"], ids["attention_mask"], options(24))
    assert any("timed out: the compile did not finish within 1 s" in note for note in report.notes), report.notes
    assert worker.state == "timed out" and not _alive(worker.pid)
    assert tokens.tolist() == greedy.plain_generate(varied, PROMPTS[:1], 24) and report.warmup == "eager"


def test_the_worker_refuses_a_model_its_config_does_not_build(varied: intelrt.Loaded) -> None:
    """The worker rebuilds the model from its class and config; a model changed after loading (here
    one layer's MLP replaced) would compile other graphs than the ones this process looks up, so the
    worker refuses it, naming why."""
    import copy

    import torch

    decoder = FastDecoder(varied.model, adaptive("eager"), None, backend=varied.plan.backend)
    job = CompileJob.of(varied.model, "cpu", decoder.compiled_choice("eager"), decoder.tuning, [], None)
    assert signature(skeleton(job)) == signature(varied.model)  # the model as loaded: rebuilt alike
    changed = copy.deepcopy(varied.model)
    changed.model.layers[0].mlp.down_proj = torch.nn.Linear(changed.config.intermediate_size,
                                                            changed.config.hidden_size, bias=True)
    job = CompileJob.of(changed, "cpu", decoder.compiled_choice("eager"), decoder.tuning, [], None)
    with pytest.raises(ValueError, match="built from its config differs"):
        skeleton(job)


def test_generate_compiles_in_a_worker_for_an_adaptive_plan(varied: intelrt.Loaded) -> None:
    """``Loaded.generate``'s decoder for an adaptive decision with a compile worker compiles in the
    background; a plan without a worker (Gaudi), other warm-ups and
    ``DecodeTuning(background_compile=False)`` keep the engine's own loop."""
    assert decoder_class(adaptive("eager"), DecodeTuning()) is BackgroundCompilingDecoder
    assert decoder_class(adaptive("eager"), DecodeTuning(background_compile=False)) is FastDecoder
    no_worker = DecodeChoice("fast", cache="static", compile="eager", step="compact", warmup="adaptive")
    assert decoder_class(no_worker, DecodeTuning()) is FastDecoder
    assert decoder_class(DecodeChoice("fast", cache="static", compile="eager", step="compact", warmup="compiled"),
                         DecodeTuning()) is FastDecoder
    generator = Generator(varied.model, GenerationPlan(adaptive("eager"), "work of unknown length",
                                                       BatchingChoice.padded("fast", 64), "padded batches"),
                          backend=varied.plan.backend)
    prompts = [varied.tokenizer(p)["input_ids"] for p in PROMPTS]
    settings = {"max_new_tokens": 20, "eos_token_id": None}
    before, report = generator.run(prompts, True, settings)
    assert isinstance(generator.decoder(), BackgroundCompilingDecoder) and report.path == "fast"
    assert report.warmup == "eager"
    assert generator.decoder().wait_for_compile(300)
    after, report = generator.run(prompts, True, settings)
    assert report.warmup == "compiled" and before == after == greedy.plain_generate(varied, PROMPTS, 20)


def test_a_process_may_end_while_its_step_compiles(varied: intelrt.Loaded, tmp_path: Path) -> None:
    """A program that generates once and ends does not wait for the compile it did not ask for, ends
    cleanly, and leaves no worker behind."""
    script = f"""
import time
import intelrt
from intelrt.decoding.background import BackgroundCompilingDecoder
from intelrt.decoding.keywords import DecodeOptions
from intelrt.plugin import DecodeChoice
loaded = intelrt.load({str(varied.plan.model.local_dir)!r})
choice = DecodeChoice("fast", cache="static", compile="eager", step="compact", warmup="adaptive", compile_worker=True)
decoder = BackgroundCompilingDecoder(loaded.model, choice, None, backend=loaded.plan.backend)
ids = loaded.tokenizer(["Intel GPUs are"], return_tensors="pt")
start = time.perf_counter()
decoder.decode(ids["input_ids"], ids["attention_mask"], DecodeOptions(20, False, 1.0, 0, 1.0, (), 1))
assert decoder.compiling is not None
print("decoded in", round(time.perf_counter() - start, 2), "worker", decoder.compiling.pid)
"""
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=300,
                          env={**os.environ, "INTELRT_COMPILE_CACHE": str(tmp_path)})
    assert done.returncode == 0, done.stderr[-3000:]
    assert "decoded in" in done.stdout and "Traceback" not in done.stderr
    assert not _alive(int(done.stdout.split("worker")[-1])), "the worker outlived its program"


def _alive(pid: int | None) -> bool:
    if pid is None:
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    status = Path(f"/proc/{pid}/stat")
    return not (status.exists() and status.read_text().split()[2] == "Z")


# -- inductor across processes ----------------------------------------------------------------------

@pytest.mark.slow
@pytest.mark.timeout(900)
def test_inductor_graphs_the_worker_built_are_found_here_and_by_the_next_process(tiny_model: Path,
                                                                                 tmp_path: Path) -> None:
    """With inductor on the CPU (one layer, one row): the worker compiles (misses); this process
    loads every graph it built from the caches (hits, no miss) and swaps; a second process with an
    empty inductor cache of its own finds them in intelrt's compile cache and its first call already
    runs compiled; the tokens never change."""
    from intelrt.tiny import build_causal_lm, build_tokenizer

    model_dir = tmp_path / "one-layer"
    build_causal_lm(model_dir, layers=1)
    build_tokenizer(model_dir)
    env = {**os.environ, "INTELRT_COMPILE_CACHE": str(tmp_path / "intelrt"), "OMP_NUM_THREADS": "1",
           "HF_HUB_OFFLINE": "1"}
    runs = []
    for name in ("first", "second"):
        done = subprocess.run([sys.executable, "-c", FIRST_MINUTE_PROBE, str(model_dir)], capture_output=True,
                              text=True, timeout=800, check=False,
                              env={**env, "TORCHINDUCTOR_CACHE_DIR": str(tmp_path / name)})
        assert done.returncode == 0, done.stderr[-3000:]
        runs.append(json.loads(done.stdout.strip().splitlines()[-1]))
    first, second = runs
    assert first["worker"]["fxgraph_cache_miss"] > 0, first
    assert first["warmup"] == ["eager", "compiled"] and first["swaps"] == 1, first
    assert first["here"].get("fxgraph_cache_hit", 0) >= first["worker"]["fxgraph_cache_miss"], first
    assert first["here"].get("fxgraph_cache_miss", 0) == 0, first
    assert first["threads"] and set(first["threads"]) == {"intelrt-compile-load"}, first
    assert second["warmup"] == ["compiled", "compiled"] and second["worker"] is None, second
    assert second["here"].get("fxgraph_cache_miss", 0) == 0 and second["here"].get("fxgraph_cache_hit", 0) > 0
    assert first["tokens"] == second["tokens"]


FIRST_MINUTE_PROBE = """
import json, sys, threading
import torch
torch.set_num_threads(1)
import intelrt
from torch._dynamo.callback import callback_handler
from torch._dynamo.utils import counters
from intelrt.decoding.background import BackgroundCompilingDecoder
from intelrt.decoding.keywords import DecodeOptions
from intelrt.plugin import DecodeChoice
threads = []
callback_handler.register_start_callback(lambda *_: threads.append(threading.current_thread().name))
loaded = intelrt.load(sys.argv[1])
choice = DecodeChoice("fast", cache="static", compile="inductor", step="compact", warmup="adaptive",
                      compile_worker=True)
decoder = BackgroundCompilingDecoder(loaded.model, choice, None, backend=loaded.plan.backend)
ids = loaded.tokenizer(["Intel GPUs are"], return_tensors="pt")
opts = DecodeOptions(12, False, 1.0, 0, 1.0, (), 1)
out, first = decoder.decode(ids["input_ids"], ids["attention_mask"], opts)
worker = decoder.compiling
assert decoder.wait_for_compile(700)
again, second = decoder.decode(ids["input_ids"], ids["attention_mask"], opts)
assert out.tolist() == again.tolist()
print(json.dumps({"warmup": [first.warmup, second.warmup], "swaps": len(decoder.swaps), "tokens": out.tolist(),
                  "worker": None if worker is None else worker.result.get("counters", {}).get("inductor", {}),
                  "here": dict(counters["inductor"]), "threads": threads}))
"""
