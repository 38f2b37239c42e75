"""Quantization for real on the CPU (issue 29), through intelrt's own entry points: torchao int8
weight-only and its CPU int4 layout loaded with ``intelrt.load(quantization=...)`` generate the
tokens plain transformers generates with the same ``TorchAoConfig``, on the fast decode loop's
compact step too (issue 42);
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

    return AutoModelForCausalLM.from_pretrained(path, **{"dtype": torch.float32, **kwargs})


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
    # the fast loop's compact step (q/k/v and gate/up fused by rows, torchao's kernel) gives the same tokens
    decode = loaded.plan.decisions["decode"]
    assert (decode.value.method, decode.value.step) == ("fast", "compact")
    assert "torchao" in decode.reason and "the kernel:" in decode.reason
    for prompts in (PROMPTS[:1], PROMPTS):
        got = loaded.generate_ids([tokenizer(p)["input_ids"] for p in prompts], max_new_tokens=10, eos_token_id=None)
        report = loaded.last_generation
        assert report is not None and (report.path, report.step) == ("fast", "compact"), report
        assert got == greedy(reference, tokenizer, prompts)
    fused = loaded.model.model.layers[0].self_attn
    assert type(fused.q_proj.weight).__name__ == layout  # the model's own weights: views of the fused rows
    saved = loaded.save_quantized(tmp_path / "saved")
    config = json.loads((saved / "config.json").read_text())
    assert config["quantization_config"]["quant_method"] == "torchao"
    assert greedy(plain(saved), tokenizer) == expected  # plain from_pretrained, no quantization_config
    replanned = intelrt.plan(saved).decisions["quantization"]
    assert replanned.value.pre_quantized and replanned.value.bits == choice.bits and replanned.claim == "T4"
    with pytest.raises(PlanError, match="contradicts the checkpoint"):
        intelrt.plan(saved, quantization="4bit")


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
def test_autoround_tunes_saves_offline_and_loads_back_onto_the_compact_step(varied: Path, tmp_path: Path,
                                                                           one_torch_thread: None) -> None:
    """AutoRound with tuning steps (not only round-to-nearest) on local calibration text, saved, then
    loaded back offline by plain transformers and by intelrt, whose compact step runs auto-round's
    own layers and gives the same tokens (issue 42)."""
    pytest.importorskip("auto_round")
    from transformers import AutoTokenizer

    from intelrt.decoding.fidelity import compare, model_logits, step_logits
    from intelrt.tiny import corpus_text

    words = corpus_text().split()
    texts = [" ".join(words[i * 60:(i + 1) * 60]) for i in range(4)]
    with pytest.raises(PlanError, match="--calibration FILE"):  # offline: auto-round's dataset is on the hub
        intelrt.quantize(varied, method="autoround", output=tmp_path / "refused")
    saved = intelrt.quantize(varied, method="autoround", output=tmp_path / "ar", calibration=texts, iters=4)
    plan = intelrt.plan(saved)
    found = plan.decided.quantization
    assert found is not None and (found.method, found.bits, found.source) == ("auto-round", 4, "checkpoint")
    assert plan.decided.dtype == "float16"  # auto-round's torch kernels cast the float32 model to float16
    decode = plan.decisions["decode"]
    assert decode.value.step == "compact" and "auto-round's QuantLinear" in decode.reason
    reference = plain(saved)
    assert str(reference.dtype) == "torch.float16"  # what the plan said transformers + auto-round do
    assert "QuantLinear" in type(reference.model.layers[0].self_attn.q_proj).__name__
    tokenizer = AutoTokenizer.from_pretrained(saved)
    loaded = intelrt.load(saved)
    expected = greedy(reference, tokenizer)
    assert greedy(loaded.model, tokenizer) == expected
    got = loaded.generate_ids([tokenizer(p)["input_ids"] for p in PROMPTS[:1]], max_new_tokens=10, eos_token_id=None)
    assert loaded.last_generation.step == "compact", loaded.last_generation
    assert got == greedy(reference, tokenizer, PROMPTS[:1])
    ids = tokenizer(PROMPTS, return_tensors="pt", padding=True)["input_ids"]
    assert compare(model_logits(reference, ids), step_logits(reference, ids)).top1 == 1.0


def _compressed_tensors_checkpoint(source: Path, target: Path) -> Path:
    """``source`` quantized W4A16 (int4 groups of 32, symmetric) and saved packed by
    compressed-tensors itself, as llm-compressor saves it: scales from the weights, then
    ``ModelCompressor.compress_model`` and ``update_config``."""
    import shutil

    from compressed_tensors.compressors import ModelCompressor
    from compressed_tensors.quantization import (
        QuantizationArgs,
        QuantizationConfig,
        QuantizationScheme,
        QuantizationStatus,
        apply_quantization_config,
    )
    from compressed_tensors.quantization.utils import compute_dynamic_scales_and_zp

    model = plain(source)
    weights = QuantizationArgs(num_bits=4, type="int", strategy="group", group_size=32, symmetric=True)
    apply_quantization_config(model, QuantizationConfig(
        config_groups={"group_0": QuantizationScheme(targets=["Linear"], weights=weights)}, ignore=["lm_head"]))
    for module in model.modules():
        if hasattr(module, "weight_scale"):
            scale, _ = compute_dynamic_scales_and_zp(value=module.weight, args=weights, module=module)
            module.weight_scale.data = scale.to(module.weight_scale.dtype).reshape(module.weight_scale.shape)
            module.quantization_status = QuantizationStatus.FROZEN
    compressor = ModelCompressor.from_pretrained_model(model, quantization_format="pack-quantized")
    compressor.compress_model(model)
    model.save_pretrained(target)
    compressor.update_config(target)
    for name in ("tokenizer.json", "tokenizer_config.json", "special_tokens_map.json"):
        if (source / name).is_file():
            shutil.copy(source / name, target / name)
    return target


def test_a_compressed_tensors_checkpoint_decodes_on_the_compact_step_as_transformers_runs_it(
        varied: Path, tmp_path: Path, one_torch_thread: None) -> None:
    """A packed W4A16 compressed-tensors checkpoint: planned from its quantization_config, decompressed
    at load (transformers decompresses at the first forward, which the compact step never calls), its
    layers run as themselves in the compact step, the tokens plain transformers gives (issue 42)."""
    pytest.importorskip("compressed_tensors")
    from intelrt.decoding.fidelity import compare, model_logits, step_logits

    saved = _compressed_tensors_checkpoint(varied, tmp_path / "ct")
    plan = intelrt.plan(saved)
    found = plan.decided.quantization
    assert found is not None and (found.method, found.scheme, found.group_size) == ("compressed-tensors", "w4a16", 32)
    assert plan.decisions["decode"].value.step == "compact"
    loaded = intelrt.load(saved)
    reference = plain(saved)
    tokenizer = loaded.tokenizer
    for prompts in (PROMPTS[:1], PROMPTS):
        got = loaded.generate_ids([tokenizer(p)["input_ids"] for p in prompts], max_new_tokens=10, eos_token_id=None)
        assert loaded.last_generation.step == "compact", loaded.last_generation
        assert got == greedy(reference, tokenizer, prompts)
    # every position's distribution, not only the (repetitive) greedy tokens of this 4-bit model
    ids = tokenizer(PROMPTS, return_tensors="pt", padding=True)["input_ids"]
    same = compare(model_logits(reference, ids), step_logits(loaded.model, ids))
    assert same.top1 == 1.0 and same.kl_mean < 1e-6, same
    four_bit = compare(model_logits(plain(varied), ids), step_logits(loaded.model, ids))
    assert 1e-4 < four_bit.kl_mean < 0.1, four_bit  # quantized: not the float model, and close to it


def test_fp8_on_the_cpu_runs_intel_neural_compressors_measure_then_quantize_flow(
        varied: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, one_torch_thread: None) -> None:
    """INC's own FP8 flow, its CPU path (quantize-dequantize): the measure run on calibration text
    writes the statistics and the QUANTIZE file; QUANT_CONFIG naming it loads the model with INC's FP8
    layers, which decode on the fast loop; FP8's fidelity to the bfloat16 model is measured (issue 42)."""
    pytest.importorskip("neural_compressor")
    import torch

    from intelrt.decoding.fidelity import compare, model_logits
    from intelrt.tiny import corpus_text

    monkeypatch.chdir(tmp_path)  # INC writes its statistics under ./hqt_output (Optimum Habana's default)
    monkeypatch.delenv("QUANT_CONFIG", raising=False)
    words = corpus_text().split()
    texts = [" ".join(words[i * 40:(i + 1) * 40]) for i in range(4)]
    measured = intelrt.quantize(varied, method="fp8", calibration=texts, output=tmp_path / "fp8")
    written = json.loads((measured / "inc_fp8_quantize.json").read_text())
    assert (written["mode"], written["use_qdq"], written["scale_method"]) == ("QUANTIZE", True, "maxabs_pow2")
    assert any((tmp_path / "hqt_output").glob("measure*maxabs*"))
    monkeypatch.setenv("QUANT_CONFIG", str(measured / "inc_fp8_quantize.json"))
    loaded = intelrt.load(varied, quantization="fp8")
    choice = loaded.plan.decided.quantization
    assert choice is not None and (choice.method, choice.details["stage"]) == ("inc", "quantize")
    assert type(loaded.model.model.layers[0].self_attn.q_proj).__name__ == "PatchedLinear"
    tokenizer = loaded.tokenizer
    for prompts in (PROMPTS[:1], PROMPTS):
        got = loaded.generate_ids([tokenizer(p)["input_ids"] for p in prompts], max_new_tokens=8, eos_token_id=None)
        assert loaded.last_generation.path == "fast"
        assert got == greedy(loaded.model, tokenizer, prompts, new=8)
    ids = tokenizer(PROMPTS, return_tensors="pt", padding=True)["input_ids"]
    fp8 = compare(model_logits(plain(varied, dtype=torch.bfloat16), ids), model_logits(loaded.model, ids))
    assert fp8.kl_mean > 0 and fp8.top1 >= 0.5, fp8  # FP8's rounding, measured
    with pytest.raises(PlanError, match="use_qdq"):  # a Gaudi configuration on the CPU: refused with the fix
        (tmp_path / "gaudi.json").write_text(json.dumps({**written, "use_qdq": False}))
        monkeypatch.setenv("QUANT_CONFIG", str(tmp_path / "gaudi.json"))
        intelrt.plan(varied, quantization="fp8")
