"""Quantization for real on the CPU (issue 29), through intelrt's own entry points: torchao int8
weight-only and its CPU int4 layout loaded with ``intelrt.load(quantization=...)`` generate the
tokens plain transformers generates with the same ``TorchAoConfig``, on the fast decode loop too;
LoRA trains on the int8 base with ``Loaded.train`` and is refused on int4 as transformers'
Trainer refuses it; ``Loaded.save_quantized`` and ``intelrt quantize`` write checkpoints plain
``from_pretrained`` loads, which plan as pre-quantized and generate the same; AutoRound quantizes,
saves and loads back."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from varied_weights import varied_copy

import intelrt
from intelrt.errors import PlanError

pytest.importorskip("torchao")
PROMPTS = ["Intel GPUs are", "the cat sat on the mat and then"]


@pytest.fixture(scope="module")
def varied(tiny_model: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    return varied_copy(tiny_model, tmp_path_factory.mktemp("varied"), seed=5)


def greedy(model: Any, tokenizer: Any, prompts: list[str] = PROMPTS, new: int = 10) -> list[list[int]]:
    """transformers' own generate, greedy, on a left-padded batch."""
    import torch

    tokenizer.padding_side = "left"
    inputs = tokenizer(prompts, return_tensors="pt", padding=True)
    with torch.inference_mode():
        out = model.generate(**inputs, max_new_tokens=new, do_sample=False, eos_token_id=None,
                             pad_token_id=tokenizer.pad_token_id)
    return out[:, inputs["input_ids"].shape[1]:].tolist()


def plain(path: Path, **kwargs: Any) -> Any:
    import torch
    from transformers import AutoModelForCausalLM

    return AutoModelForCausalLM.from_pretrained(path, dtype=torch.float32, **kwargs)


def theirs(request_: str, group_size: int | None) -> Any:
    """The TorchAoConfig a transformers user writes for the same quantization (torchao's docs)."""
    import torch
    import torchao.quantization as ao
    from torchao.quantization.granularity import PerGroup
    from transformers import TorchAoConfig

    if request_ == "int8":
        return TorchAoConfig(ao.Int8WeightOnlyConfig())
    return TorchAoConfig(ao.IntxWeightOnlyConfig(weight_dtype=torch.int4, granularity=PerGroup(group_size)))


@pytest.mark.parametrize("request_, layout", [("int8", "Int8Tensor"), ("int4", "IntxUnpackedToInt8Tensor")])
def test_torchao_loads_generates_on_the_fast_loop_saves_and_reloads_as_plain_transformers_does(
        varied: Path, tmp_path: Path, request_: str, layout: str, one_torch_thread: None) -> None:
    loaded = intelrt.load(varied, quantization=request_)
    choice = loaded.plan.decided.quantization
    assert choice is not None and (choice.method, choice.requested) == ("torchao", request_)
    weight = loaded.model.model.layers[0].mlp.down_proj.weight
    assert type(weight).__name__ == layout
    reference = plain(varied, quantization_config=theirs(request_, choice.group_size))
    assert type(reference.model.layers[0].mlp.down_proj.weight) is type(weight)
    tokenizer = loaded.tokenizer
    expected = greedy(reference, tokenizer)
    assert any(len(set(row)) > 2 for row in expected)  # the tokens change: a real comparison
    assert greedy(loaded.model, tokenizer) == expected
    # the fast loop (the model's own forward over a static KV cache) gives the same tokens
    decode = loaded.plan.decisions["decode"]
    assert (decode.value.method, decode.value.step) == ("fast", "model") and "torchao" in decode.reason
    for prompts in (PROMPTS[:1], PROMPTS):
        got = loaded.generate_ids([tokenizer(p)["input_ids"] for p in prompts], max_new_tokens=10, eos_token_id=None)
        report = loaded.last_generation
        assert report is not None and (report.path, report.step) == ("fast", "model")
        assert got == greedy(reference, tokenizer, prompts)
    saved = loaded.save_quantized(tmp_path / "saved")
    config = json.loads((saved / "config.json").read_text())
    assert config["quantization_config"]["quant_method"] == "torchao"
    assert greedy(plain(saved), tokenizer) == expected  # plain from_pretrained, no quantization_config
    replanned = intelrt.plan(saved).decisions["quantization"]
    assert replanned.value.pre_quantized and replanned.value.bits == choice.bits and replanned.claim == "T4"
    with pytest.raises(PlanError, match="contradicts the checkpoint"):
        intelrt.plan(saved, quantization="4bit")


def test_the_compact_step_refuses_torchao_weights_instead_of_crashing(varied: Path, one_torch_thread: None) -> None:
    from intelrt.decoding.compact import CompactModel, Unsupported

    loaded = intelrt.load(varied, quantization="int8")
    with pytest.raises(Unsupported, match=r"weight is a Int8Tensor \(quantized\), not a plain tensor"):
        CompactModel(loaded.model)


def test_lora_trains_on_a_torchao_int8_base_and_is_refused_on_int4_as_the_trainer_refuses_it(
        varied: Path, tmp_path: Path, one_torch_thread: None) -> None:
    from peft import LoraConfig, get_peft_model
    from transformers.trainer_utils import validate_quantization_for_training

    texts = [" ".join(["the cat sat on the mat"] * 8)] * 8
    int8 = intelrt.load(varied, quantization="int8")
    result = int8.train(texts, lora=True, epochs=2, output_dir=tmp_path / "adapter", block_size=16)
    assert result.steps > 0 and result.final_loss == result.final_loss  # finite
    adapted = intelrt.load(tmp_path / "adapter", quantization="int8")  # the adapter on its int8 base
    assert adapted.generate("Intel GPUs are", max_new_tokens=4)

    int4 = intelrt.load(varied, quantization="int4")
    with pytest.raises(PlanError, match="lora=True on this quantized model is refused: torchao int4 weight-only"):
        int4.train(texts, lora=True, output_dir=tmp_path / "refused")
    on_int4 = get_peft_model(plain(varied, quantization_config=theirs("int4", int4.plan.decided.quantization.group_size)),
                             LoraConfig(r=4, target_modules=["q_proj"], lora_dropout=0.0))
    with pytest.raises(ValueError, match="do not support training"):
        validate_quantization_for_training(on_int4)  # what transformers' Trainer would raise, later
    with pytest.raises(intelrt.ConfigurationError, match="quantization='int4'.*Pass lora=True"):
        int4.train(texts, output_dir=tmp_path / "whole")


def test_intelrt_quantize_writes_a_checkpoint_from_the_command_line(varied: Path, tmp_path: Path,
                                                                   capsys: pytest.CaptureFixture[str]) -> None:
    from intelrt.cli import main

    out = tmp_path / "int8"
    assert main(["quantize", str(varied), "--method", "int8", "--output", str(out), "--json"]) == 0
    report = json.loads(capsys.readouterr().out)
    assert report["output"] == str(out) and "model.safetensors" in report["files"]
    assert intelrt.plan(out).decided.quantization.scheme == "Int8WeightOnlyConfig"
    assert main(["quantize", str(varied), "--method", "int8", "--output", str(out)]) == 2  # not empty
    assert "is not empty" in capsys.readouterr().err
    assert main(["quantize", str(varied), "--method", "int8", "--iters", "3", "--output", str(tmp_path / "x")]) == 2
    assert "quantizes without calibration" in capsys.readouterr().err
    assert main(["quantize", str(out), "--method", "int8", "--output", str(tmp_path / "again")]) != 0
    assert "quantized already" in capsys.readouterr().err


@pytest.mark.slow
def test_autoround_quantizes_saves_and_loads_with_plain_transformers(varied: Path, tmp_path: Path,
                                                                   one_torch_thread: None) -> None:
    pytest.importorskip("auto_round")
    from transformers import AutoTokenizer

    from intelrt.tiny import corpus_text

    words = corpus_text().split()
    texts = [" ".join(words[i * 60:(i + 1) * 60]) for i in range(4)]
    with pytest.raises(PlanError, match="--calibration FILE"):  # offline: auto-round's dataset is on the hub
        intelrt.quantize(varied, method="autoround", output=tmp_path / "refused")
    saved = intelrt.quantize(varied, method="autoround", output=tmp_path / "ar", calibration=texts, iters=0)
    plan = intelrt.plan(saved)
    found = plan.decided.quantization
    assert found is not None and (found.method, found.bits, found.source) == ("auto-round", 4, "checkpoint")
    assert plan.decided.dtype == "float16"  # auto-round's torch kernels cast the float32 model to float16
    reference = plain(saved)
    assert str(reference.dtype) == "torch.float16"  # what the plan said transformers + auto-round do
    tokenizer = AutoTokenizer.from_pretrained(saved)
    loaded = intelrt.load(saved)
    assert greedy(loaded.model, tokenizer) == greedy(reference, tokenizer)
