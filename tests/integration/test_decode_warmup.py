"""Warm-up that pays for itself (issue 18): the plan chooses eager, static (captured, not compiled),
compiled, or adaptive (static until compiling pays) from the kind of work, and says why; the
engine switches an adaptive step to compiled after enough tokens or at once when the compile
cache holds it; a compiled step is kept across processes in intelrt's cache directory, and a
second process (its own inductor cache empty) finds every compiled graph there.

CUDA plans are decided on the CPU with a stand-in ``BackendStatus`` (plans touch no device)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from varied_weights import varied_copy

import intelrt
from intelrt.backends.cuda import CudaBackend
from intelrt.backends.decode_rules import decide_decode
from intelrt.errors import PlanError
from intelrt.hooks.request import Request
from intelrt.plugin import (
    BackendStatus,
    Decided,
    DecodeChoice,
    DeviceInfo,
    Situation,
    triton_installed,
)

CUDA = CudaBackend(BackendStatus("cuda", "cuda", True, "1 CUDA device(s) visible", 50,
                                 devices=(DeviceInfo(0, "NVIDIA H200", 141 * 2**30, True),)))


def cuda_decode(tiny_model: Path, **options: object) -> tuple[DecodeChoice, str]:
    model = intelrt.plan(tiny_model).model
    decision = decide_decode(CUDA, Situation(Request.build(tiny_model, **options), model, {},
                                             Decided(task="text-generation")))
    return decision.value, decision.reason


@pytest.mark.parametrize("workload, warmup, graphs, compiled, kernel, said", [
    ("one-shot", "static", "cuda", None, False, "one-shot work"),
    ("server", "compiled", "cuda", "inductor", True, "server work"),
    ("batch", "compiled", "cuda", "inductor", True, "batch work"),
    ("auto", "adaptive", "cuda", "inductor", True, "work of unknown length"),
])
def test_cuda_warmup_follows_the_kind_of_work(tiny_model: Path, workload: str, warmup: str, graphs: str,
                                              compiled: str | None, kernel: bool, said: str) -> None:
    value, reason = cuda_decode(tiny_model, workload=workload)
    assert (value.warmup, value.graphs, value.compile) == (warmup, graphs, compiled)
    assert value.attention_kernel == (kernel and triton_installed())
    assert said in reason


@pytest.mark.parametrize("warmup, graphs, compiled", [
    ("eager", None, None), ("static", "cuda", None), ("compiled", "cuda", "inductor")])
def test_an_explicit_warmup_wins_over_the_workload(tiny_model: Path, warmup: str, graphs: str | None,
                                                   compiled: str | None) -> None:
    value, reason = cuda_decode(tiny_model, workload="server" if warmup != "compiled" else "one-shot", warmup=warmup)
    assert (value.warmup, value.graphs, value.compile) == (warmup, graphs, compiled)
    assert f"warmup='{warmup}'" in reason


def test_the_users_compile_and_graphs_settings_cap_the_warmup(tiny_model: Path) -> None:
    value, reason = cuda_decode(tiny_model, workload="server", compile="none")
    assert (value.warmup, value.compile) == ("static", None) and "compile='none'" in reason
    value, _ = cuda_decode(tiny_model, workload="server", compile="none", graphs="off")
    assert (value.warmup, value.graphs, value.compile) == ("eager", None, None)
    # asked to compile, the work unknown: compiled, by a worker, never waited for (issue 39) ...
    value, reason = cuda_decode(tiny_model, compile="on")
    assert (value.warmup, value.compile, value.compile_worker) == ("adaptive", "inductor", True)
    assert "compile='on'" in reason and "compile worker" in reason
    value, reason = cuda_decode(tiny_model, compile="on", workload="one-shot")  # one call: the user waits, as asked
    assert (value.warmup, value.compile_worker) == ("compiled", False) and "compiler named (compile='on')" in reason
    value, reason = cuda_decode(tiny_model, compile="on", workload="batch")  # ... at the first call for batch work
    assert (value.warmup, value.compile, value.compile_worker) == ("compiled", "inductor", False)


@pytest.mark.parametrize("options, named", [
    ({"warmup": "static", "compile": "inductor"}, "warmup='static' does not compile"),
    ({"warmup": "compiled", "compile": "none"}, "compile='none' forbids it"),
    ({"warmup": "eager", "graphs": "on"}, "warmup='eager' runs the step as it is"),
    ({"warmup": "static", "graphs": "off"}, "warmup='static' captures the step in a device graph"),
])
def test_contradictory_settings_are_refused(tiny_model: Path, options: dict[str, str], named: str) -> None:
    with pytest.raises(PlanError, match=named):
        cuda_decode(tiny_model, **options)


@pytest.mark.parametrize("workload", ["auto", "one-shot", "server", "batch"])
def test_the_cpu_runs_the_step_eagerly_for_every_kind_of_work(tiny_model: Path, workload: str) -> None:
    decode = intelrt.plan(tiny_model, workload=workload).decisions["decode"]
    assert (decode.value.warmup, decode.value.graphs, decode.value.compile) == ("eager", None, None)
    assert "compile warm-up outweighs its gain on the cpu backend" in decode.reason


def test_the_cpu_compiles_when_asked_and_has_no_graphs_to_capture(tiny_model: Path) -> None:
    decode = intelrt.plan(tiny_model, warmup="compiled").decided.decode
    assert isinstance(decode, DecodeChoice) and (decode.warmup, decode.compile) == ("compiled", "inductor")
    with pytest.raises(PlanError, match="the CPU has no device graphs"):
        intelrt.plan(tiny_model, warmup="static")


def test_intelrt_run_is_one_shot_work(tiny_model: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from intelrt.cli import main

    assert main(["run", str(tiny_model), "--max-new-tokens", "4", "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert data["plan"]["request"]["workload"] == "one-shot"


def test_a_plugins_decision_must_honour_a_forced_warmup(tiny_model: Path) -> None:
    """A plugin's decode decision that leaves ``warmup`` unset prepares the step as its compile and
    graphs say: a forced warm-up it does not give is a plan error naming the plugin, not a silent
    change; a workload it does not weigh is said in a note."""
    from intelrt.host.manager import PluginHost
    from intelrt.planning.planner import make_plan
    from intelrt.plugin import Decision, hookimpl

    class AlwaysCompiled:
        @hookimpl
        def intelrt_select_decode(self) -> Decision:
            return Decision(DecodeChoice("fast", cache="static", compile="inductor"), "always compiled")

    host = PluginHost(entry_points=False)
    host.register(AlwaysCompiled(), "always_compiled")
    plan = make_plan(Request.build(tiny_model), host=host)
    assert plan.decided.decode is not None and plan.decided.decode.prepared == "compiled"
    with pytest.raises(PlanError, match="warmup='static', and plugin 'always_compiled'"):
        make_plan(Request.build(tiny_model, warmup="static"), host=host)
    assert make_plan(Request.build(tiny_model, warmup="compiled"), host=host).decided.decode == plan.decided.decode
    notes = make_plan(Request.build(tiny_model, workload="one-shot"), host=host).decisions["decode"].notes
    assert any("workload='one-shot' is not weighed" in n and "'compiled'" in n for n in notes)


# -- the engine ----------------------------------------------------------------------------------

@pytest.fixture(scope="module")
def varied(tiny_model: Path, tmp_path_factory: pytest.TempPathFactory) -> intelrt.Loaded:
    return intelrt.load(varied_copy(tiny_model, tmp_path_factory.mktemp("varied"), seed=6))


def test_an_adaptive_step_compiles_once_the_work_has_been_long(varied: intelrt.Loaded, tmp_path: Path,
                                                               monkeypatch: pytest.MonkeyPatch) -> None:
    """torch.compile's ``eager`` backend stands in for inductor (the switch is the engine's; what
    inductor makes of the step is tested elsewhere): the first calls run uncompiled, the call after
    ``compile_after_tokens`` compiles, and the tokens never change."""
    from intelrt.decoding.engine import FastDecoder
    from intelrt.decoding.keywords import DecodeOptions
    from intelrt.decoding.tuning import DecodeTuning

    monkeypatch.setenv("INTELRT_COMPILE_CACHE", str(tmp_path))
    choice = DecodeChoice("fast", cache="static", compile="eager", step="compact", warmup="adaptive")
    decoder = FastDecoder(varied.model, choice, None, DecodeTuning(compile_after_tokens=20), backend=varied.plan.backend)
    ids = varied.tokenizer(["Intel GPUs are"], return_tensors="pt")
    options = DecodeOptions(12, False, 1.0, 0, 1.0, (), 1)
    seen = []
    for _ in range(3):
        tokens, report = decoder.decode(ids["input_ids"], ids["attention_mask"], options)
        seen.append((tokens.tolist(), report.compiled, report.warmup))
    assert [s[1:] for s in seen] == [(None, "eager"), (None, "eager"), ("eager", "compiled")]
    assert seen[0][0] == seen[1][0] == seen[2][0]


def test_an_adaptive_step_compiles_at_once_when_the_cache_holds_it(varied: intelrt.Loaded, tmp_path: Path,
                                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    from intelrt.decoding.engine import FastDecoder
    from intelrt.decoding.keywords import DecodeOptions

    monkeypatch.setenv("INTELRT_COMPILE_CACHE", str(tmp_path))
    choice = DecodeChoice("fast", cache="static", compile="eager", step="compact", warmup="adaptive")
    ids = varied.tokenizer(["Intel GPUs are"], return_tensors="pt")
    options = DecodeOptions(12, False, 1.0, 0, 1.0, (), 1)
    first = FastDecoder(varied.model, choice, None, backend=varied.plan.backend)
    cache = first._cache(varied.model.device)
    _, report = first.decode(ids["input_ids"], ids["attention_mask"], options)
    assert report.compiled is None and first._offline is not None
    shape = first._shape_key(first._offline)  # what the same call's compiled step is keyed by
    assert not cache.holds(shape)
    cache.path(shape).parent.mkdir(parents=True)
    cache.path(shape).write_bytes(b"")  # an entry (empty: loading it fails softly, the compile runs)
    second = FastDecoder(varied.model, choice, None, backend=varied.plan.backend)
    _, report = second.decode(ids["input_ids"], ids["attention_mask"], options)
    assert (report.compiled, report.warmup) == ("eager", "compiled")


@pytest.mark.slow
@pytest.mark.timeout(1200)
def test_a_second_process_finds_the_compiled_step_in_intelrts_cache(tiny_model: Path, tmp_path: Path) -> None:
    """Two fresh processes compile the same step with inductor on the CPU, each with an empty
    inductor cache of its own: the first compiles (misses) and keeps the artifacts in intelrt's
    cache; the second loads them and finds every graph (hits, no miss), and is faster."""
    env = {**os.environ, "INTELRT_COMPILE_CACHE": str(tmp_path / "intelrt"), "OMP_NUM_THREADS": "1"}
    command = [sys.executable, "-m", "intelrt.cli.first_answer", "intelrt", str(tiny_model), "--device", "cpu",
               "--new-tokens", "8", "--prompt-tokens", "8", "--warmup", "compiled"]
    runs = []
    for name in ("first", "second"):
        done = subprocess.run(command, env={**env, "TORCHINDUCTOR_CACHE_DIR": str(tmp_path / name)},
                              capture_output=True, text=True, timeout=1100, check=False)
        assert done.returncode == 0, done.stderr[-3000:]
        runs.append(json.loads(done.stdout.strip().splitlines()[-1]))
    first, second = runs
    assert first["report"]["compiled"] == second["report"]["compiled"] == "inductor"
    assert first["fxgraph_cache_miss"] > 0
    assert second["fxgraph_cache_hit"] >= first["fxgraph_cache_miss"] and second["fxgraph_cache_miss"] == 0
    assert second["tokens"] == first["tokens"]
    assert list((tmp_path / "intelrt").rglob("*.bin")), "the compiled step is kept in intelrt's cache"


@pytest.mark.parametrize(("compile_options", "tuning", "launch"), [
    ({}, {}, True),
    ({}, {"programmatic_launch": False}, False),
    ({"triton.enable_pdl": False}, {}, False),
], ids=["default", "tuning-off", "plan-says-off"])
def test_the_compiled_step_launches_programmatically_unless_told_not_to(
        varied: intelrt.Loaded, compile_options: dict[str, bool], tuning: dict[str, bool], launch: bool) -> None:
    """While the step compiles, inductor generates programmatic dependent launches
    (``triton.enable_pdl``; it acts only on Hopper or newer GPUs): on by default, off with
    ``DecodeTuning(programmatic_launch=False)``, and a plan's own setting of it is not overwritten.
    Outside the step's compilation inductor's setting is what it was."""
    import torch._inductor.config as inductor_config

    from intelrt.decoding.engine import FastDecoder
    from intelrt.decoding.tuning import DecodeTuning

    choice = DecodeChoice("fast", cache="static", compile="inductor", step="compact", compile_options=compile_options)
    decoder = FastDecoder(varied.model, choice, None, DecodeTuning(**tuning), backend=varied.plan.backend)
    before = inductor_config.triton.enable_pdl
    with decoder.compiler_settings():
        assert inductor_config.triton.enable_pdl is launch
    assert inductor_config.triton.enable_pdl == before


# -- never wait for a compile, on every backend (issue 39) ------------------------------------------

def test_work_of_unknown_length_never_waits_for_a_compile_on_the_cpu(tiny_model: Path) -> None:
    """The CPU compiles only when a compiler is named; then, as on CUDA, the step decodes from the
    first call and a compile worker builds the compiled step (a server or batch job compiles at the
    first call; ``warmup='compiled'`` waits for it)."""
    decode = intelrt.plan(tiny_model, compile="inductor").decisions["decode"]
    assert (decode.value.warmup, decode.value.compile, decode.value.compile_worker) == ("adaptive", "inductor", True)
    assert "never waiting for a compile" in decode.reason and "compile worker" in decode.reason
    batch = intelrt.plan(tiny_model, compile="inductor", workload="batch").decided.decode
    waits = intelrt.plan(tiny_model, compile="inductor", warmup="compiled").decided.decode
    assert batch is not None and (batch.warmup, batch.compile_worker) == ("compiled", False)
    assert waits is not None and (waits.warmup, waits.compile_worker) == ("compiled", False)


def test_intel_gpus_plan_a_compile_worker_and_gaudi_says_why_it_cannot(tiny_model: Path) -> None:
    """Under the simulated runtimes: an Intel GPU (inductor with Triton for XPU, the model's own
    forward) plans the compile worker for work of unknown length, and compiles at the first call for
    batch work; a Gaudi in eager mode plans the adaptive step without a worker — a Gaudi is driven
    by one process (H6) — and says so; batch work compiles with ``hpu_backend`` at the first call."""
    from intelrt.testing.simulation import simulate

    with simulate("xpu", 1):
        xpu = intelrt.plan(tiny_model).decisions["decode"]
        xpu_batch = intelrt.plan(tiny_model, workload="batch").decided.decode
        xpu_once = intelrt.plan(tiny_model, workload="one-shot").decided.decode
    assert (xpu.value.warmup, xpu.value.compile, xpu.value.step, xpu.value.compile_worker) == (
        "adaptive", "inductor", "model", True)
    assert "compile worker" in xpu.reason and "XPU graphs are opt-in below torch 2.14" in xpu.reason
    assert xpu_batch is not None and (xpu_batch.warmup, xpu_batch.compile) == ("compiled", "inductor")
    assert xpu_once is not None and (xpu_once.warmup, xpu_once.compile) == ("eager", None)
    with simulate("hpu", 1):
        hpu = intelrt.plan(tiny_model).decisions["decode"]
        hpu_batch = intelrt.plan(tiny_model, workload="batch").decided.decode
    assert (hpu.value.warmup, hpu.value.compile, hpu.value.compile_worker) == ("adaptive", "hpu_backend", False)
    assert "a Gaudi is driven by one process (H6" in hpu.reason and "compile_after_tokens" in hpu.reason
    assert hpu_batch is not None and (hpu_batch.warmup, hpu_batch.compile) == ("compiled", "hpu_backend")
