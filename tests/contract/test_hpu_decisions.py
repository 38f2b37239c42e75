"""Plan decisions on Gaudi: placement (H6), quantization (H7), training arguments (H8),
collective (H10), kernels and attention, and the CLI refusing 4-bit on first-generation Gaudi."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest

import intelrt
from intelrt.errors import PlanError
from intelrt.hooks.types import Setting
from intelrt.host.manager import PluginHost
from intelrt.plugin import CompileChoice, QuantizationChoice

INT64 = {"PT_ENABLE_INT64_SUPPORT": "1"}
GENERATIONS = ("gaudi1", "gaudi2", "gaudi3")


def _settings(plan: intelrt.Plan, **overrides: Any) -> dict[str, list[Setting]]:
    found: dict[str, list[Setting]] = {}
    for _plugin, setting in PluginHost().training_arguments(backend=plan.backend, plan=plan,
                                                  overrides=overrides):
        found.setdefault(setting.name, []).append(setting)
    return found


@pytest.mark.claim("H6")
@pytest.mark.parametrize("generation", GENERATIONS)
def test_H6_device_map_is_hpu(simulate, tiny_model: Path, generation: str) -> None:  # type: ignore[no-untyped-def]
    simulate("hpu", 8, generation=generation, env=INT64)
    placement = intelrt.plan(tiny_model).decisions["placement"]
    assert placement.value.device_map == "hpu" and placement.plugin == "hpu" and placement.claim == "H6"
    assert "'hpu:N' is not supported" in placement.reason


#: A Llama of about 70B parameters: about 130 GiB of weights in bfloat16, more than a Gaudi 2's 96 GiB.
LLAMA_70B = {"architectures": ["LlamaForCausalLM"], "model_type": "llama", "hidden_size": 8192,
             "intermediate_size": 28672, "num_hidden_layers": 80, "num_attention_heads": 64,
             "num_key_value_heads": 8, "vocab_size": 128256}


@pytest.mark.claim("H6")
@pytest.mark.parametrize(("count", "generation", "memory"), [(1, "gaudi2", "96.0"), (8, "gaudi2", "96.0"),
                                                             (8, "gaudi1", "32.0")])
def test_H6_too_big_for_one_gaudi_is_refused_with_the_way_out(simulate, tmp_path: Path, count: int,  # type: ignore[no-untyped-def]
                                                              generation: str, memory: str) -> None:
    """A Gaudi process drives one Gaudi: the old plan, device_map='auto' "across the visible
    Gaudis", could not run; the plan refuses and names the ways out instead. The fit is judged
    against the generation's nominal HBM: detection acquires no Gaudi, so it asks the stack for no memory."""
    import json

    (tmp_path / "config.json").write_text(json.dumps(LLAMA_70B), encoding="utf-8")
    simulate("hpu", count, generation=generation, env=INT64)
    with pytest.raises(PlanError) as refused:
        intelrt.plan(tmp_path)
    assert re.search(rf"[\d.]+ GiB of weights \(x1\.2 headroom\) do not fit one Gaudi \({memory} GiB\), and a Gaudi "
                     r"process drives one Gaudi.*device_map='auto' across Gaudis is not supported \(SPEC H6\)\. Ways "
                     r"out: .*one process per Gaudi with the weights split across them — intelrt launch --nproc N "
                     r"your_script.py with parallel='tensor'", str(refused.value))
    # 4-bit is a way out where bitsandbytes runs (H7): Gaudi 2 and 3, not the first generation
    assert ("quantization='4bit'" in str(refused.value)) is (generation != "gaudi1")


@pytest.mark.claim("H7")
@pytest.mark.parametrize("generation, label", [("gaudi2", "Gaudi 2"), ("gaudi3", "Gaudi 3")])
def test_H7_bitsandbytes_4bit_nf4_on_gaudi2_and_3(simulate, tiny_model: Path, generation: str, label: str) -> None:  # type: ignore[no-untyped-def]
    simulate("hpu", 8, generation=generation, env=INT64)
    decision = intelrt.plan(tiny_model, quantization="4bit").decisions["quantization"]
    assert decision.value == QuantizationChoice.bitsandbytes("4bit", "bfloat16")
    assert (decision.value.quant_type, decision.value.compute_dtype, decision.value.double_quant) == (
        "nf4", "bfloat16", True)
    assert decision.claim == "H7" and f"bitsandbytes 4-bit runs on {label}" in decision.reason
    assert any("registers only the NF4 4-bit dequantize kernel" in n for n in decision.notes)
    eight = intelrt.plan(tiny_model, quantization="8bit").decisions["quantization"]
    assert eight.value == QuantizationChoice.bitsandbytes("8bit", "bfloat16") and eight.claim == "H7"
    assert eight.value.bits == 8 and eight.value.scheme == "llm.int8"


@pytest.mark.claim("H7")
def test_H7_nf4_note_matches_bitsandbytes_hpu_backend() -> None:
    """The note is a fact of bitsandbytes 0.50: its HPU kernel refuses every quant_type but nf4."""
    import importlib.util

    spec = importlib.util.find_spec("bitsandbytes")
    assert spec is not None and spec.origin is not None
    source = (Path(spec.origin).parent / "backends" / "hpu" / "ops.py").read_text()
    assert source.count("@register_kernel(") == 1 and '"bitsandbytes::dequantize_4bit", "hpu"' in source
    assert "HPU backend only supports quant_type 'nf4'" in source


@pytest.mark.claim("H7")
@pytest.mark.parametrize("bits", ["4bit", "8bit"])
def test_H7_first_generation_gaudi_refuses_bitsandbytes(simulate, tiny_model: Path, bits: str) -> None:  # type: ignore[no-untyped-def]
    simulate("hpu", 8, generation="gaudi1", env=INT64)
    with pytest.raises(PlanError, match=r"does not run on Gaudi 1 \(first-generation Gaudi runs none"):
        intelrt.plan(tiny_model, quantization=bits)


@pytest.mark.claim("H7")
def test_H7_cli_plan_4bit_on_gaudi1_exits_nonzero_naming_first_generation(
        tiny_model: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch) -> None:
    from intelrt.cli import main

    monkeypatch.setenv("PT_ENABLE_INT64_SUPPORT", "1")
    code = main(["plan", str(tiny_model), "--simulate", "hpu:8:gaudi1", "--quantization", "4bit"])
    err = capsys.readouterr().err
    assert code != 0
    assert "does not run on Gaudi 1 (first-generation Gaudi" in err and "Traceback" not in err
    assert main(["plan", str(tiny_model), "--simulate", "hpu:8:gaudi2", "--quantization", "4bit"]) == 0


@pytest.mark.claim("H8")
@pytest.mark.parametrize("generation", GENERATIONS)
def test_H8_bf16_on_every_generation(simulate, tiny_model: Path, generation: str) -> None:  # type: ignore[no-untyped-def]
    simulate("hpu", 8, generation=generation, env=INT64)
    plan = intelrt.plan(tiny_model)
    assert plan.decided.dtype == "bfloat16" and plan.decisions["dtype"].claim == "H8"
    settings = _settings(plan)
    assert {s.value for s in settings["bf16"]} == {True}
    assert any(s.claim == "H8" and s.reason == "every Gaudi generation supports bfloat16" for s in settings["bf16"])
    assert [s.value for s in settings["ddp_backend"]] == ["hccl"]
    assert "fp16" not in settings
    assert _settings(plan, bf16=False).get("bf16") is None, "the user's keyword wins"


@pytest.mark.claim("H8")
def test_H8_float16_refused_on_first_generation_gaudi(simulate, tiny_model: Path) -> None:  # type: ignore[no-untyped-def]
    simulate("hpu", 8, generation="gaudi1", env=INT64)
    with pytest.raises(PlanError, match="first-generation Gaudi has no float16"):
        intelrt.plan(tiny_model, dtype="float16")
    with pytest.raises(PlanError, match="use bf16=True"):
        _settings(intelrt.plan(tiny_model), fp16=True)


@pytest.mark.claim("H8")
def test_H8_transformers_training_arguments_agree_on_gaudi1(simulate, tiny_model: Path) -> None:  # type: ignore[no-untyped-def]
    """transformers' own TrainingArguments, against the simulated stack: Gaudi found, bf16 accepted,
    hpu_backend chosen for torch_compile=True (the same values intelrt plans)."""
    simulate("hpu", 8, generation="gaudi1", env=INT64)
    from transformers import TrainingArguments

    plan = intelrt.plan(tiny_model)
    settings = _settings(plan, torch_compile=True)
    kwargs = {name: found[0].value for name, found in settings.items()}
    # ddp_backend is for launched ranks: given to a lone process, accelerate 1.15 expects a process group
    assert kwargs.pop("ddp_backend") == "hccl"
    args = TrainingArguments(output_dir=str(tiny_model.parent / "unused"), report_to=[], torch_compile=True, **kwargs)
    assert args.device.type == "hpu" and args.bf16 is True
    assert args.torch_compile_backend == "hpu_backend" == kwargs["torch_compile_backend"]


@pytest.mark.claim("H9")
def test_H9_training_compile_backend_is_hpu_backend_and_others_are_refused(simulate, tiny_model: Path) -> None:  # type: ignore[no-untyped-def]
    simulate("hpu", 8, generation="gaudi3", env=INT64)
    plan = intelrt.plan(tiny_model)
    backend = _settings(plan, torch_compile=True)["torch_compile_backend"]
    assert [(s.value, s.claim) for s in backend] == [("hpu_backend", "H9")]
    assert "torch_compile_backend" not in _settings(plan)
    with pytest.raises(PlanError, match="torch_compile_backend='inductor' does not run on Gaudi"):
        _settings(plan, torch_compile=True, torch_compile_backend="inductor")
    assert "torch_compile_backend" not in _settings(plan, torch_compile=True, torch_compile_backend="eager")
    on = intelrt.plan(tiny_model, compile="on").decisions["compile"]
    assert on.value == CompileChoice(True, "hpu_backend") and on.claim == "H9"
    with pytest.raises(PlanError, match="only 'hpu_backend' and 'eager' run on Gaudi"):
        intelrt.plan(tiny_model, compile="inductor")


@pytest.mark.claim("H10")
def test_H10_hccl_with_its_limits_in_the_plan(simulate, tiny_model: Path) -> None:  # type: ignore[no-untyped-def]
    simulate("hpu", 8, generation="gaudi2", env=INT64)
    plan = intelrt.plan(tiny_model)
    collective = plan.decisions["collective"]
    assert collective.value == "hccl" and collective.plugin == "hpu" and collective.claim == "H10"
    notes = " | ".join(collective.notes)
    assert "one process per Gaudi" in notes and "accelerate launch" in notes
    assert "sum, min, max only" in notes and "no int64" in notes
    with pytest.raises(PlanError, match="ddp_backend='nccl' does not run on Gaudi"):
        _settings(plan, ddp_backend="nccl")
    assert "ddp_backend" not in _settings(plan, ddp_backend="hccl"), "explicit hccl works and is the user's"


def test_kernels_are_off_on_gaudi_because_kernels_refuses_hpu(simulate, tiny_model: Path) -> None:  # type: ignore[no-untyped-def]
    from kernels.layer.kernelize import _validate_device_type

    with pytest.raises(ValueError, match="Unsupported device type 'hpu'"):
        _validate_device_type("hpu")  # the library fact the decision rests on
    simulate("hpu", 8, env=INT64)
    kernels = intelrt.plan(tiny_model).decisions["kernels"]
    assert kernels.value.use_kernels is False and kernels.plugin == "hpu"
    assert "does not accept device type 'hpu'" in kernels.reason
    with pytest.raises(PlanError, match="kernels=True"):
        intelrt.plan(tiny_model, kernels=True)


def test_flash_attention_is_refused_on_gaudi_and_fused_sdpa_is_default(simulate, tiny_model: Path) -> None:  # type: ignore[no-untyped-def]
    simulate("hpu", 8, env=INT64)  # the stand-in stack ships hpex/kernels/FusedSDPA.py, as the bridge does
    assert intelrt.plan(tiny_model).decided.attention == "intelrt_hpu_fused_sdpa"
    assert intelrt.plan(tiny_model, attention="sdpa").decided.attention == "sdpa"
    assert intelrt.plan(tiny_model, attention="eager").decided.attention == "eager"
    with pytest.raises(PlanError, match="Optimum for Intel Gaudi"):
        intelrt.plan(tiny_model, attention="flash_attention_2")
