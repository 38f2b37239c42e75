"""The compiled step built in the background (issue 31): an ``adaptive`` plan decodes from the first
call with the uncompiled step while the compiled one builds on a worker thread, which takes over the
engine's batch (its paged KV cache, tables and positions) at a look boundary; the tokens equal plain
``model.generate``'s before and after the swap, and nothing compiles on the caller's thread.

torch.compile's backends here are ``eager`` (dynamo's trace, no code generation) and a counting
backend that records which thread compiled: what inductor makes of the step is tested elsewhere
(``test_decode_families.py``, ``test_decode_warmup.py``)."""

from __future__ import annotations

import subprocess
import sys
import threading
from pathlib import Path
from typing import Any

import greedy
import pytest
from varied_weights import varied_copy

import intelrt
from intelrt.decoding.background import BackgroundCompilingDecoder
from intelrt.decoding.engine import FastDecoder
from intelrt.decoding.generation import GenerationPlan, Generator, decoder_class
from intelrt.decoding.keywords import DecodeOptions
from intelrt.decoding.tuning import DecodeTuning
from intelrt.plugin import BatchingChoice, DecodeChoice

PROMPTS = ["Intel GPUs are", "the cat sat on the mat and then"]
NEW_TOKENS = 60

COMPILED_ON: list[str] = []
"""The thread of every graph the counting backend compiled."""


def _counting(gm: Any, example_inputs: Any) -> Any:
    COMPILED_ON.append(threading.current_thread().name)
    return gm.forward


def adaptive(backend: str) -> DecodeChoice:
    return DecodeChoice("fast", cache="static", compile=backend, step="compact", warmup="adaptive")


@pytest.fixture(scope="module")
def varied(tiny_model: Path, tmp_path_factory: pytest.TempPathFactory) -> intelrt.Loaded:
    return intelrt.load(varied_copy(tiny_model, tmp_path_factory.mktemp("varied"), seed=6))


@pytest.fixture(scope="module")
def counting() -> str:
    from torch._dynamo import register_backend

    register_backend(_counting, name="intelrt_test_counting")
    return "intelrt_test_counting"


def options(new_tokens: int = NEW_TOKENS, streamer: Any = None) -> DecodeOptions:
    return DecodeOptions(new_tokens, False, 1.0, 0, 1.0, (), 1, streamer=streamer)


class WaitsForTheCompile:
    """A streamer that, at its first token after the prompt, blocks until the background compile
    has ended: the swap then happens at the next step boundary, in the middle of the call."""

    def __init__(self, decoder: BackgroundCompilingDecoder) -> None:
        self.decoder, self.puts, self.tokens = decoder, 0, []

    def put(self, value: Any) -> None:
        self.puts += 1
        if self.puts == 2:
            assert not self.decoder.swaps, "the first tokens come from the uncompiled step"
            assert self.decoder.compiling is not None, "the compile runs while the first tokens are decoded"
            assert self.decoder.wait_for_compile(300)
        if self.puts > 1:
            self.tokens += value.tolist()

    def end(self) -> None:
        pass


def test_the_compiled_step_takes_over_in_the_middle_of_a_call(varied: intelrt.Loaded, counting: str,
                                                              tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("INTELRT_COMPILE_CACHE", str(tmp_path))
    decoder = BackgroundCompilingDecoder(varied.model, adaptive(counting), None)
    ids = varied.tokenizer(PROMPTS[:1], return_tensors="pt")
    streamer = WaitsForTheCompile(decoder)
    tokens, report = decoder.decode(ids["input_ids"], ids["attention_mask"], options(streamer=streamer))
    assert [swap.shape[0] for swap in decoder.swaps] == [1]  # one row
    assert 1 < decoder.swaps[0].token < NEW_TOKENS - 16, "swapped at a look boundary inside the call"
    assert (report.compiled, report.warmup) == (counting, "compiled")
    assert tokens.tolist() == greedy.plain_generate(varied, PROMPTS[:1], NEW_TOKENS)
    assert streamer.tokens == tokens[0].tolist()  # every new token streamed once, across the swap


def test_nothing_compiles_on_the_callers_thread(varied: intelrt.Loaded, counting: str, tmp_path: Path,
                                                monkeypatch: pytest.MonkeyPatch) -> None:
    """Calls of two batch shapes (one row, then two, whose batch the later one-row call reuses):
    every graph the backend compiled was compiled on a worker thread, and calls after the swaps run
    the compiled step without compiling again."""
    monkeypatch.setenv("INTELRT_COMPILE_CACHE", str(tmp_path))
    decoder = BackgroundCompilingDecoder(varied.model, adaptive(counting), None)
    COMPILED_ON.clear()
    seen = []
    for prompts in (PROMPTS[:1], PROMPTS, PROMPTS[:1], PROMPTS):
        ids = varied.tokenizer(prompts, return_tensors="pt", padding=True)
        tokens, report = decoder.decode(ids["input_ids"], ids["attention_mask"], options(24))
        seen.append((tokens.tolist() == greedy.plain_generate(varied, prompts, 24), report.warmup))
        assert decoder.wait_for_compile(300)
    compiled = len(COMPILED_ON)
    ids = varied.tokenizer(PROMPTS, return_tensors="pt", padding=True)
    decoder.decode(ids["input_ids"], ids["attention_mask"], options(24))
    assert all(same for same, _ in seen) and [warmup for _, warmup in seen[2:]] == ["compiled", "compiled"]
    assert [swap.shape[0] for swap in decoder.swaps][-1:] == [2] and len(decoder.swaps) <= 2, decoder.swaps
    assert COMPILED_ON and all(name.startswith("intelrt-compile-") for name in COMPILED_ON), COMPILED_ON
    assert len(COMPILED_ON) == compiled, "a later call compiled again"


def test_a_failed_background_compile_leaves_the_uncompiled_step(varied: intelrt.Loaded, tmp_path: Path,
                                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    """A compile that raises on the worker is said (a note, a warning) and not tried again; the
    step goes on uncompiled, with the same tokens."""
    from torch._dynamo import register_backend

    def failing(gm: Any, example_inputs: Any) -> Any:
        raise RuntimeError("no code for this device")

    register_backend(failing, name="intelrt_test_failing")
    monkeypatch.setenv("INTELRT_COMPILE_CACHE", str(tmp_path))
    decoder = BackgroundCompilingDecoder(varied.model, adaptive("intelrt_test_failing"), None)
    ids = varied.tokenizer(PROMPTS[:1], return_tensors="pt")
    expected = greedy.plain_generate(varied, PROMPTS[:1], 24)
    first, _ = decoder.decode(ids["input_ids"], ids["attention_mask"], options(24))
    assert decoder.wait_for_compile(300)
    second, report = decoder.decode(ids["input_ids"], ids["attention_mask"], options(24))
    assert first.tolist() == second.tolist() == expected
    assert any("background compile (intelrt_test_failing) failed" in note and "no code for this device" in note
               for note in report.notes), report.notes
    assert not decoder.background and decoder.compiling is None and not decoder.swaps


def test_generate_compiles_in_the_background_for_an_adaptive_plan(varied: intelrt.Loaded, tmp_path: Path,
                                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    """``Loaded.generate``'s decoder for an adaptive decision compiles in the background (a plan's
    other warm-ups, and ``DecodeTuning(background_compile=False)``, keep the engine's own loop)."""
    monkeypatch.setenv("INTELRT_COMPILE_CACHE", str(tmp_path))
    assert decoder_class(adaptive("eager"), DecodeTuning()) is BackgroundCompilingDecoder
    assert decoder_class(adaptive("eager"), DecodeTuning(background_compile=False)) is FastDecoder
    assert decoder_class(DecodeChoice("fast", cache="static", compile="eager", step="compact", warmup="compiled"),
                         DecodeTuning()) is FastDecoder
    generator = Generator(varied.model, GenerationPlan(adaptive("eager"), "work of unknown length",
                                                       BatchingChoice.padded("fast", 64), "padded batches"))
    prompts = [varied.tokenizer(p)["input_ids"] for p in PROMPTS]
    settings = {"max_new_tokens": 20, "eos_token_id": None}
    before, report = generator.run(prompts, True, settings)
    assert isinstance(generator.decoder(), BackgroundCompilingDecoder) and report.path == "fast"
    assert generator.decoder().wait_for_compile(300)
    after, report = generator.run(prompts, True, settings)
    assert report.warmup == "compiled" and before == after == greedy.plain_generate(varied, PROMPTS, 20)


def test_a_process_may_end_while_its_step_compiles(varied: intelrt.Loaded, tmp_path: Path) -> None:
    """The worker is a daemon thread: a program that generates once and ends does not wait for
    the compile it did not ask for, and ends cleanly."""
    script = f"""
import time
import intelrt
from intelrt.decoding.background import BackgroundCompilingDecoder
from intelrt.decoding.keywords import DecodeOptions
from intelrt.plugin import BatchingChoice, DecodeChoice
loaded = intelrt.load({str(varied.plan.model.local_dir)!r})
choice = DecodeChoice("fast", cache="static", compile="eager", step="compact", warmup="adaptive")
decoder = BackgroundCompilingDecoder(loaded.model, choice, None)
ids = loaded.tokenizer(["Intel GPUs are"], return_tensors="pt")
start = time.perf_counter()
decoder.decode(ids["input_ids"], ids["attention_mask"], DecodeOptions(20, False, 1.0, 0, 1.0, (), 1))
assert decoder.compiling is not None
print("decoded in", round(time.perf_counter() - start, 2))
"""
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=300,
                          env={**__import__("os").environ, "INTELRT_COMPILE_CACHE": str(tmp_path)})
    assert done.returncode == 0, done.stderr[-3000:]
    assert "decoded in" in done.stdout and "Traceback" not in done.stderr
