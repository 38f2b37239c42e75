"""The device-graph hook: which backend captures the decode step and how (issue 6).

CUDA is measured for real (docs/performance.md); XPU graphs and HPU graphs are decided under
simulation. The engine's use of a capturer (warm-up steps count as real tokens, one capture per
shape, a failed capture falls back without graphs and says so) is checked on the CPU with a
capturer whose "graph" re-runs the step.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

import intelrt
from intelrt.backends.cuda import CudaBackend
from intelrt.backends.decode_rules import decide_decode
from intelrt.errors import PlanError
from intelrt.hooks.request import Request
from intelrt.host.manager import get_host
from intelrt.plugin import (
    BackendStatus,
    Decided,
    DecodeChoice,
    DeviceInfo,
    Situation,
    triton_installed,
)
from intelrt.testing.simulation import simulate

#: The fast loop with an eager step of the model's own forward (what the engine tests vary).
EAGER = DecodeChoice("fast", cache="static")

CUDA = CudaBackend(BackendStatus("cuda", "cuda", True, "1 CUDA device(s) visible", 50,
                                 devices=(DeviceInfo(0, "NVIDIA H200", 141 * 2**30, True),)))
TEXT = Decided(task="text-generation")


def test_cuda_backend_plans_graphs_and_builds_the_capturer(tiny_model: Path) -> None:
    """The decode rule on the built-in cuda's facts: CUDA graphs around an inductor-compiled step — the
    compact step for a Qwen3, the model's own forward for an architecture it does not cover."""
    import dataclasses

    model = intelrt.plan(tiny_model).model  # with its transformers class resolved
    assert model.architecture is not None
    decision = decide_decode(CUDA, Situation(Request.build(tiny_model), model, {}, TEXT))
    assert decision is not None
    assert decision.value == DecodeChoice("fast", cache="static", graphs="cuda", compile="inductor", step="compact",
                                          compile_options={"coordinate_descent_tuning": True},
                                          attention_kernel=triton_installed(), warmup="adaptive", step_tokens=8192,
                                          step_attention="triton" if triton_installed() else "torch",
                                          compile_worker=True)
    assert "CUDA graph" in decision.reason and "qwen3 layers run as intelrt's compact step" in decision.reason
    assert any("engine steps of at most 8192 tokens" in note and "NVIDIA H200's 790 TFLOP/s" in note
               for note in decision.notes), decision.notes
    other = dataclasses.replace(model, config={**model.config, "model_type": "olmo"},
                                architecture=dataclasses.replace(model.architecture, name="OlmoForCausalLM",
                                                                 module="transformers.models.olmo.modeling_olmo"))
    fallback = decide_decode(CUDA, Situation(Request.build(tiny_model), other, {}, TEXT))
    assert fallback is not None and fallback.value.step == "model"
    assert fallback.value.compile_options == {"coordinate_descent_tuning": True}
    assert "OlmoForCausalLM is not one of the classes the compact step reproduces" in fallback.reason
    off = decide_decode(CUDA, Situation(Request.build(tiny_model, graphs="off", compile="none"), model, {}))
    assert off is not None and off.value.graphs is None and off.value.compile is None
    assert "graphs='off'" in off.reason and "compile='none'" in off.reason
    host = get_host()
    assert callable(host.graph_capturer(CUDA, "cuda")) and callable(CUDA.graph_capturer())
    assert host.graph_capturer(CUDA, "xpu") is None  # not CUDA's own graphs: nothing to capture them with


def test_decode_graphs_xpu_are_opt_in_before_torch_2_14(tiny_model: Path) -> None:
    """Upstream (vLLM) keeps XPU graphs opt-in until torch 2.14: so does intelrt (issue 17)."""
    with simulate("xpu", 1):  # the installed torch 2.13
        plan = intelrt.plan(tiny_model)
        asked = intelrt.plan(tiny_model, graphs="on").decisions["decode"]
        capture = get_host().graph_capturer(plan.backend, "xpu")
    decode = plan.decisions["decode"]
    assert (decode.plugin, decode.value.graphs, decode.value.compile) == ("xpu", None, "inductor")
    assert "XPU graphs are opt-in below torch 2.14 (this is torch 2.13" in decode.reason
    assert "vllm-project/vllm#38193" in decode.reason
    assert asked.value.graphs == "xpu" and "captured in an XPU graph" in asked.reason
    assert callable(capture)
    with simulate("xpu", 1, torch_version="2.14.0"):
        default = intelrt.plan(tiny_model).decisions["decode"]
    assert default.value.graphs == "xpu" and "XPU graphs by default from torch 2.14" in default.reason


def test_decode_graphs_xpu_without_xpugraph_decodes_without_graphs(tiny_model: Path) -> None:
    with simulate("xpu", 1, xpu_graphs=False):
        decode = intelrt.plan(tiny_model).decisions["decode"]
        with pytest.raises(PlanError, match="has no torch.xpu.XPUGraph"):
            intelrt.plan(tiny_model, graphs="on")
    assert decode.value.method == "fast" and decode.value.graphs is None
    assert "no device graph (torch 2.13.0+xpu has no torch.xpu.XPUGraph" in decode.reason


@pytest.mark.claim("H1")
def test_decode_graphs_hpu_lazy_mode_captures_hpu_graphs(tiny_model: Path) -> None:
    with simulate("hpu", 1, torch_fork=True, env={"PT_HPU_LAZY_MODE": "1"}) as sim:  # lazy mode needs Gaudi's fork
        plan = intelrt.plan(tiny_model)
        decode = plan.decisions["decode"]
        assert (decode.plugin, decode.value.graphs, decode.value.compile) == ("hpu", "hpu", None)
        assert "habana_frameworks.import" not in sim.calls  # planning never loads the stack (H3)
        capture = get_host().graph_capturer(plan.backend, "hpu")
        assert capture is not None
        steps: list[int] = []
        replay = capture(lambda: steps.append(len(steps)), warmup=2)
        recorded = [c for c in sim.calls if c.startswith("hpu.graph")]
        assert recorded == ["hpu.graph.capture_begin", "hpu.graph.capture_end"]
        assert len(steps) == 3  # two real warm-up steps, one recorded
        replay()
        assert sim.calls[-1] == "hpu.graph.replay"


@pytest.mark.claim("H9")
def test_decode_graphs_hpu_eager_mode_compiles_with_hpu_backend(tiny_model: Path) -> None:
    with simulate("hpu", 1):
        decode = intelrt.plan(tiny_model).decisions["decode"]
        with pytest.raises(PlanError, match="set PT_HPU_LAZY_MODE=1"):
            intelrt.plan(tiny_model, graphs="on")
    assert (decode.value.graphs, decode.value.compile, decode.claim) == (None, "hpu_backend", "H9")
    assert "HPU graphs record lazy-mode work and this run is eager" in decode.reason


def test_a_backend_of_intelrt_0_1_still_builds_its_capturer_with_a_deprecation_warning() -> None:
    """``graph_capturer(kind)`` (intelrt 0.1) still works for a minor release: the host passes the kind and
    warns naming the replacement (docs/plugin-api.md, Deprecated); the 0.2 form is asked only for its
    own ``graph_kind``."""
    from intelrt.backends.cpu import CpuBackend

    asked: list[str] = []

    class Old(CpuBackend):
        def graph_capturer(self, kind: str) -> Callable[..., Any] | None:  # type: ignore[override]
            asked.append(kind)
            return _rerun_capturer([]) if kind == "npu" else None

    class New(CpuBackend):
        graph_kind = "npu"

        def graph_capturer(self) -> Callable[..., Any] | None:
            return _rerun_capturer([])

    host = get_host()
    status = CpuBackend.detect({})
    with pytest.warns(DeprecationWarning, match=r"graph_capturer\(kind\) is deprecated: declare the class "
                                                r"attribute graph_kind = 'npu'"):
        assert host.graph_capturer(Old(status), "npu") is not None
    assert asked == ["npu"]
    assert host.graph_capturer(New(status), "npu") is not None and host.graph_capturer(New(status), "cuda") is None


def test_the_cpu_backend_answers_the_run_stage_without_a_device_runtime() -> None:
    """The CPU has no allocator, streams or timed events to ask: the engine's queries answer None (its
    budget is the configured one) and its compiled steps are kept as built for ``cpu``."""
    import torch

    from intelrt.backends.cpu import CpuBackend

    cpu, device = CpuBackend(CpuBackend.detect({})), torch.device("cpu")
    assert cpu.device_module() is None and cpu.memory_info(device) is None
    assert cpu.memory_in_use(device) is None and cpu.timing_events(device) is None
    assert cpu.capability(device) is None and cpu.compiled_for(device) == "cpu" and cpu.computes_on_host
    cpu.synchronize(device)  # nothing to wait for
    with cpu.side_stream(device):
        pass


def test_the_collective_table_and_the_decode_helpers_are_deprecated_with_their_replacement() -> None:
    import intelrt.plugin as api

    with pytest.warns(DeprecationWarning, match="DEVICE_COLLECTIVES is deprecated .* Backend.sharding_support"):
        assert api.DEVICE_COLLECTIVES["xccl"] == "xpu"  # type: ignore[attr-defined]
    assert "DEVICE_COLLECTIVES" not in api.__all__
    # the decode helpers a backend's own select_decode assembled: still there for a minor release, warning
    for name in ("fast_decode", "decode_graphs", "padded_generate_instead", "decode_warmup", "triton_installed"):
        with pytest.warns(DeprecationWarning, match=f"{name} is deprecated .* the decode and batching rules are"):
            assert callable(getattr(api, name))
        assert name not in api.__all__
    with pytest.raises(AttributeError):
        api.NOT_A_NAME  # type: ignore[attr-defined]  # noqa: B018


# -- the engine with a capturer ----------------------------------------------------------------

def _rerun_capturer(log: list[str]) -> Callable[..., Callable[[], object]]:
    """A 'graph' that re-runs the step: what a capturer must do, minus the device."""

    def capture(step: Callable[[], object], warmup: int = 2) -> Callable[[], object]:
        log.append("capture")
        for _ in range(warmup):
            step()
        return step

    return capture


def _decode(decoder: Any, loaded: intelrt.Loaded, prompts: list[str], max_new: int) -> Any:
    import torch

    from intelrt.decoding.generation import left_pad
    from intelrt.decoding.keywords import DecodeOptions

    ids, mask = left_pad([loaded.tokenizer(p)["input_ids"] for p in prompts], 1, torch.device("cpu"))
    options = DecodeOptions(max_new, False, 1.0, 0, 1.0, (), 1)
    return decoder.decode(ids, mask, options)


@pytest.fixture(scope="module")
def loaded(tiny_model: Path) -> intelrt.Loaded:
    return intelrt.load(tiny_model)


def test_decode_engine_counts_warmup_steps_and_captures_once(loaded: intelrt.Loaded) -> None:
    from intelrt.decoding.engine import FastDecoder

    log: list[str] = []
    plain = FastDecoder(loaded.model, EAGER, None, backend=loaded.plan.backend)
    graphed = FastDecoder(loaded.model, replace(EAGER, graphs="test"), _rerun_capturer(log), backend=loaded.plan.backend)
    expected, _ = _decode(plain, loaded, ["Intel GPUs are", "hi"], 20)
    for _ in range(2):
        tokens, report = _decode(graphed, loaded, ["Intel GPUs are", "hi"], 20)
        assert tokens.tolist() == expected.tolist() and tokens.shape[1] == 20
    assert log == ["capture"] and report.graphs == "test" and not report.captured  # reused, not re-captured


def test_decode_engine_falls_back_without_graphs_when_capture_fails(loaded: intelrt.Loaded) -> None:
    from intelrt.decoding.engine import FastDecoder

    def broken(step: Callable[[], object], warmup: int = 2) -> Callable[[], object]:
        raise RuntimeError("operation not permitted when stream is capturing")

    expected, _ = _decode(FastDecoder(loaded.model, EAGER, None, backend=loaded.plan.backend), loaded, ["Gaudi"], 12)
    decoder = FastDecoder(loaded.model, replace(EAGER, graphs="test"), broken, backend=loaded.plan.backend)
    tokens, report = _decode(decoder, loaded, ["Gaudi"], 12)
    assert tokens.tolist() == expected.tolist()
    assert report.graphs is None and any("graph capture (test) failed" in n for n in report.notes)


def test_decode_engine_captures_one_step_per_row_bucket_and_sampler_kind(loaded: intelrt.Loaded) -> None:
    """With graphs, the decode step is captured the first time a row bucket (and sampler kind, and
    power of two of table blocks the torch attention reads) is used, and replayed after: a repeated
    call captures nothing; prompts are prefilled uncaptured (their length varies); a sampling call
    gets its own step; the tokens equal an uncaptured decode's."""
    from intelrt.decoding.engine import FastDecoder
    from intelrt.decoding.keywords import DecodeOptions

    captured: list[str] = []

    def naming_capturer(step: Callable[[], object], warmup: int = 2) -> Callable[[], object]:
        captured.append(getattr(step, "__qualname__", "?").split(".<locals>")[0].split(".")[-1])
        for _ in range(warmup):
            step()
        return step

    compact = replace(EAGER, step="compact")
    plain = FastDecoder(loaded.model, compact, None, backend=loaded.plan.backend)
    graphed = FastDecoder(loaded.model, replace(compact, graphs="test"), naming_capturer, backend=loaded.plan.backend)
    pair, one, other, long = ["Intel GPUs are", "hi"], ["Intel GPUs are"], ["hi there"], ["hello " * 12]
    block = graphed.tuning.block_size
    assert all(len(loaded.tokenizer(p)["input_ids"]) + 11 <= block for p in pair + other), "one block each"
    reported = []
    for prompts in (pair, one, one, other, pair, long, long):
        expected, _ = _decode(plain, loaded, prompts, 12)
        tokens, report = _decode(graphed, loaded, prompts, 12)
        assert tokens.tolist() == expected.tolist() and report.step == "compact"
        reported.append(report.captured)
    assert reported[:5] == [True, True, False, False, False]  # what last_generation.captured tells the user
    assert reported[6] is False and set(captured) == {"_step_fn"} and len(captured) == 2 + reported[5]
    import torch

    ids = torch.tensor([loaded.tokenizer("Intel GPUs are")["input_ids"]])
    _, sampled = graphed.decode(ids, torch.ones_like(ids), DecodeOptions(12, True, 1.0, 0, 0.9, (), 1))
    assert sampled.captured and len(captured) == 3 + reported[5]


def test_decode_engine_pauses_the_garbage_collector_only_for_captured_shapes(loaded: intelrt.Loaded) -> None:
    """A call whose shape is already captured replays with Python's garbage collector paused (a
    collection in a process full of compiled graphs would stall the device between launches); the
    call that captures collects as usual, and the collector is left as the caller had it."""
    import gc

    from intelrt.decoding.engine import FastDecoder

    collector_on: list[bool] = []

    def recording_capturer(step: Callable[[], object], warmup: int = 2) -> Callable[[], object]:
        for _ in range(warmup):
            step()

        def replay() -> object:
            collector_on.append(gc.isenabled())
            return step()

        return replay

    decoder = FastDecoder(loaded.model, replace(EAGER, graphs="test"), recording_capturer,
                          backend=loaded.plan.backend)
    assert gc.isenabled()
    _, first = _decode(decoder, loaded, ["Intel GPUs are"], 12)
    assert first.captured and collector_on and all(collector_on)
    collector_on.clear()
    _, later = _decode(decoder, loaded, ["Intel GPUs are"], 12)
    assert not later.captured and collector_on and not any(collector_on)
    assert gc.isenabled()
    gc.disable()
    try:
        _decode(decoder, loaded, ["Intel GPUs are"], 12)
        assert not gc.isenabled()  # the caller's choice is kept
    finally:
        gc.enable()
