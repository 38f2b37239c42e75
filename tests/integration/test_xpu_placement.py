"""X6 placement, X7 continuous batching, X9 quantization and compile on Intel GPUs — planned under
the simulated XPU runtime; the plan's from_pretrained keywords then load the tiny model for real on
the CPU (the device swapped for "cpu", everything else as planned)."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
import transformers

import intelrt
from intelrt.errors import PlanError
from intelrt.plugin import CompileChoice, QuantizationChoice
from intelrt.runtime.pretrained_kwargs import from_pretrained_kwargs
from intelrt.testing.simulation import simulate as start_simulation

TINY_GIB = 1e-6  # device memory far below the tiny model's weights: it does not fit one device


@pytest.mark.claim("X6")
def test_X6_a_model_that_fits_goes_to_one_xpu(simulate, tiny_model: Path) -> None:  # type: ignore[no-untyped-def]
    simulate("xpu", count=2, memory_gib=64)
    decision = intelrt.plan(tiny_model).decisions["placement"]
    assert (decision.value.device_map, decision.plugin, decision.claim) == ("xpu", "xpu", "X6")
    assert decision.reason.startswith("the weights fit one Intel GPU") and "64.0 GiB per device" in decision.reason
    assert any("pipeline() without device= also picks the Intel GPU" in n for n in decision.notes)


@pytest.mark.claim("X6")
def test_X6_a_model_too_big_for_one_xpu_is_split_across_the_visible_ones(simulate, tiny_model: Path) -> None:  # type: ignore[no-untyped-def]
    simulate("xpu", count=2, memory_gib=TINY_GIB)  # two Max 1550 cards: four devices (FLAT)
    decision = intelrt.plan(tiny_model).decisions["placement"]
    assert decision.value.device_map == "auto" and "accelerate splits them across the 4 devices of the run" in decision.reason
    # selecting one device leaves nothing to split across: that XPU, named, with the 4-bit hint
    one = intelrt.plan(tiny_model, devices=[1]).decisions["placement"]
    assert one.value.device_map == "xpu:1" and "may not fit" in one.reason
    assert any("quantization='4bit'" in n for n in one.notes)


@pytest.mark.claim("X7")
def test_X7_continuous_batching_leaves_graphs_and_async_to_transformers(simulate, tiny_model: Path) -> None:  # type: ignore[no-untyped-def]
    from transformers import ContinuousBatchingConfig

    simulate("xpu", count=1)
    decision = intelrt.plan(tiny_model).decisions["batching"]
    assert (decision.plugin, decision.claim) == ("xpu", "X7")
    assert decision.value.method == "continuous"
    assert decision.value.use_graphs is None and decision.value.use_async_batching is None
    assert "turns them off: attention=sdpa needs an attention mask" in decision.notes[0]
    # None is transformers' own "decide automatically" for both settings
    config = ContinuousBatchingConfig(use_cuda_graph=decision.value.use_graphs,
                                      use_async_batching=decision.value.use_async_batching)
    assert config.use_cuda_graph is None and config.use_async_batching is None
    forced = intelrt.plan(tiny_model, graphs="off").decisions["batching"]
    assert forced.value.use_graphs is False and "XPU graphs off (graphs=off)" in forced.notes[0]


@pytest.mark.claim("X9")
def test_X9_bitsandbytes_4bit_with_the_qlora_note_loads_on_cpu(tiny_model: Path) -> None:
    with start_simulation("xpu", count=1):
        plan = intelrt.plan(tiny_model, quantization="4bit")
    decision = plan.decisions["quantization"]
    assert (decision.plugin, decision.claim) == ("defaults", "X9")  # intelrt's table, on the XPU's facts
    assert decision.value == QuantizationChoice.bitsandbytes("4bit", "bfloat16")
    assert any(n.startswith("QLoRA: to fine-tune a model too big for the device, train LoRA adapters")
               for n in decision.notes)
    kwargs = from_pretrained_kwargs(plan)
    config = kwargs["quantization_config"]
    assert config.load_in_4bit and config.bnb_4bit_compute_dtype == torch.bfloat16
    kwargs["device_map"] = "cpu"  # bitsandbytes 0.50 runs 4-bit on the CPU too
    model = transformers.AutoModelForCausalLM.from_pretrained(tiny_model, **kwargs)
    assert type(model.model.layers[0].mlp.down_proj).__name__ == "Linear4bit"


@pytest.mark.claim("X9")
@pytest.mark.parametrize(("kwargs", "message"), [
    ({"packages": {"bitsandbytes": "0.46.1"}}, r"on Intel Data Center GPU Max needs bitsandbytes >= 0\.47, and this is "
                                               r"0\.46\.1"),
    ({"torch_version": "2.5.1"}, r"needs torch >= 2\.6 .*this is torch 2\.5\.1"),
    ({"packages": {"bitsandbytes": None}}, r"bitsandbytes, which is not installed"),
])
def test_X9_bitsandbytes_floors_are_checked(simulate, tiny_model: Path, kwargs: dict, message: str) -> None:  # type: ignore[no-untyped-def,type-arg]
    simulate("xpu", count=1, **kwargs)
    with pytest.raises(PlanError, match=message):
        intelrt.plan(tiny_model, quantization="8bit")


def test_compile_on_xpu_is_inductor_with_the_reason(simulate, tiny_model: Path) -> None:  # type: ignore[no-untyped-def]
    simulate("xpu", count=1)
    auto = intelrt.plan(tiny_model).decisions["compile"]
    assert auto.plugin == "xpu" and auto.value.enabled is False and "inductor" in auto.reason
    on = intelrt.plan(tiny_model, compile=True).decisions["compile"]
    assert on.value == CompileChoice(True, "inductor")
    assert "Triton kernels for Intel GPUs" in on.reason
    with pytest.raises(PlanError, match="compile='cudagraphs' cannot run on Intel GPUs"):
        intelrt.plan(tiny_model, compile="cudagraphs")


@pytest.mark.claim("X4")
def test_X4_the_plans_from_pretrained_kwargs_load_the_tiny_model_on_cpu(tiny_model: Path) -> None:
    with start_simulation("xpu", count=2):
        plan = intelrt.plan(tiny_model)
    kwargs = from_pretrained_kwargs(plan)
    assert {k: kwargs[k] for k in ("dtype", "device_map", "attn_implementation")} == {
        "dtype": "bfloat16", "device_map": "xpu", "attn_implementation": "sdpa"}
    kwargs["device_map"] = "cpu"  # the only change: this machine has no Intel GPU
    model = transformers.AutoModelForCausalLM.from_pretrained(tiny_model, **kwargs)
    assert model.dtype == torch.bfloat16 and model.config._attn_implementation == "sdpa"
    with torch.no_grad():
        logits = model(torch.tensor([[1, 2, 3]])).logits
    assert logits.shape[:2] == (1, 3) and torch.isfinite(logits.float()).all()


def test_other_backends_get_no_xpu_decision(simulate, tiny_model: Path) -> None:  # type: ignore[no-untyped-def]
    simulate("xpu", count=2)
    plan = intelrt.plan(tiny_model, backend="cpu")
    assert plan.backend.name == "cpu"
    assert all(d.plugin != "xpu" for d in plan.decisions.values())
    assert all(s.plugin != "xpu" for s in plan.env)
