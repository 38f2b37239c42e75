"""Quantization for real on the CPU (issue 29): torchao int8 weight-only and its CPU int4 layout,
and AutoRound, on the tiny model. The plan's ``quantization_config`` loads the same model plain
transformers loads with the same quantization (same greedy tokens); a saved checkpoint loads
with plain ``from_pretrained``, is read back as pre-quantized, and generates the same; LoRA trains
where PEFT supports the base and is refused — as transformers' Trainer refuses it — where not."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from varied_weights import varied_copy

from intelrt.errors import PlanError
from intelrt.quantization import Target, decide, read_checkpoint_quantization
from intelrt.quantization.builders import from_pretrained_kwargs
from intelrt.quantization.lora import lora_support, require_lora
from intelrt.quantization.saving import save_quantized

pytest.importorskip("torchao")
CPU = Target("cpu")
PROMPTS = ["Intel GPUs are", "the cat sat on the mat and then"]


@pytest.fixture(scope="module")
def varied(tiny_model: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    return varied_copy(tiny_model, tmp_path_factory.mktemp("varied"), seed=5)


def greedy(model: Any, tokenizer: Any, prompts: list[str] = PROMPTS, new: int = 10) -> list[list[int]]:
    import torch

    tokenizer.padding_side = "left"
    inputs = tokenizer(prompts, return_tensors="pt", padding=True)
    with torch.inference_mode():
        out = model.generate(**inputs, max_new_tokens=new, do_sample=False, eos_token_id=None,
                             pad_token_id=tokenizer.pad_token_id)
    return out[:, inputs["input_ids"].shape[1]:].tolist()


def load(path: Path, **kwargs: Any) -> Any:
    import torch
    from transformers import AutoModelForCausalLM

    torch.manual_seed(0)
    return AutoModelForCausalLM.from_pretrained(path, dtype=kwargs.pop("dtype", torch.float32), **kwargs)


def plan_for(request: str, path: Path) -> Any:
    config = json.loads((path / "config.json").read_text())
    plan = decide(request, read_checkpoint_quantization(config, path), CPU, dtype="float32",
                  in_features=(config["hidden_size"], config["intermediate_size"]))
    assert plan.choice is not None
    return plan.choice


@pytest.mark.parametrize("request_, plain", [("int8", "Int8WeightOnlyConfig"), ("int4", "IntxWeightOnlyConfig")])
def test_torchao_loads_generates_saves_and_reloads_as_plain_transformers_does(
        varied: Path, tmp_path: Path, request_: str, plain: str, one_torch_thread: None) -> None:
    import torch
    import torchao.quantization as ao
    from torchao.quantization.granularity import PerGroup
    from transformers import AutoTokenizer, TorchAoConfig

    tokenizer = AutoTokenizer.from_pretrained(varied)
    choice = plan_for(request_, varied)
    assert choice.details["config"] == plain
    ours = load(varied, **from_pretrained_kwargs(choice))
    theirs_type = (ao.Int8WeightOnlyConfig() if request_ == "int8" else
                   ao.IntxWeightOnlyConfig(weight_dtype=torch.int4, granularity=PerGroup(choice.group_size)))
    theirs = load(varied, quantization_config=TorchAoConfig(theirs_type))
    expected = greedy(theirs, tokenizer)
    assert type(ours.model.layers[0].mlp.down_proj.weight) is type(theirs.model.layers[0].mlp.down_proj.weight)
    assert greedy(ours, tokenizer) == expected
    assert any(len(set(row)) > 2 for row in expected)  # the tokens change: a real comparison
    saved = save_quantized(ours, choice, tmp_path / "saved", tokenizer=tokenizer)
    found = read_checkpoint_quantization(json.loads((saved / "config.json").read_text()), saved)
    assert found is not None and found.method == "torchao" and found.scheme == plain
    reread = decide(None, found, CPU)
    assert reread.choice is not None and reread.choice.bits == choice.bits and reread.claim == "T4"
    assert greedy(load(saved), tokenizer) == expected  # plain from_pretrained, no quantization_config
    with pytest.raises(PlanError, match="contradicts the checkpoint"):
        decide("4bit", found, CPU)


def test_lora_trains_on_a_torchao_int8_base_and_is_refused_on_int4_as_the_trainer_refuses_it(
        varied: Path, tmp_path: Path, one_torch_thread: None) -> None:
    import torch
    from peft import LoraConfig, PeftModel, get_peft_model
    from transformers.trainer_utils import validate_quantization_for_training

    int8 = plan_for("int8", varied)
    assert lora_support(int8).ok
    model = get_peft_model(load(varied, **from_pretrained_kwargs(int8)),
                           LoraConfig(r=4, lora_alpha=8, target_modules=["q_proj", "v_proj"], lora_dropout=0.0))
    validate_quantization_for_training(model)  # transformers' Trainer accepts it
    before = {n: p.detach().clone() for n, p in model.named_parameters() if p.requires_grad}
    optimizer = torch.optim.AdamW([p for p in model.parameters() if p.requires_grad], lr=1e-2)
    ids = torch.randint(0, 300, (2, 12), generator=torch.Generator().manual_seed(0))
    losses = []
    for _ in range(3):
        loss = model(input_ids=ids, labels=ids).loss
        loss.backward()
        optimizer.step()
        optimizer.zero_grad()
        losses.append(float(loss))
    assert all(torch.isfinite(torch.tensor(losses))) and losses[-1] < losses[0]
    assert any(not torch.equal(before[n], p) for n, p in model.named_parameters() if p.requires_grad)
    model.save_pretrained(tmp_path / "adapter")
    reloaded = PeftModel.from_pretrained(load(varied, **from_pretrained_kwargs(int8)), tmp_path / "adapter")
    with torch.inference_mode():
        assert torch.allclose(reloaded(input_ids=ids).logits, model(input_ids=ids).logits, atol=1e-4)

    int4 = plan_for("int4", varied)
    assert not lora_support(int4).ok and "is_trainable" in lora_support(int4).reason
    with pytest.raises(PlanError, match="lora=True on this quantized model is refused"):
        require_lora(int4)
    on_int4 = get_peft_model(load(varied, **from_pretrained_kwargs(int4)),
                             LoraConfig(r=4, target_modules=["q_proj"], lora_dropout=0.0))
    with pytest.raises(ValueError, match="do not support training"):
        validate_quantization_for_training(on_int4)


@pytest.mark.slow
def test_autoround_quantizes_saves_and_loads_with_plain_transformers(varied: Path, tmp_path: Path,
                                                                   one_torch_thread: None) -> None:
    pytest.importorskip("auto_round")
    from transformers import AutoRoundConfig, AutoTokenizer

    from intelrt.tiny import corpus_text

    tokenizer = AutoTokenizer.from_pretrained(varied)
    choice = plan_for("autoround", varied)
    assert choice.method == "auto-round" and not choice.trainable
    with pytest.raises(PlanError, match="pass calibration="):
        save_quantized(load(varied), choice, tmp_path / "refused", tokenizer=tokenizer)  # offline, hub dataset
    words = corpus_text().split()
    texts = [" ".join(words[i * 60:(i + 1) * 60]) for i in range(4)]
    saved = save_quantized(load(varied), choice, tmp_path / "ar", tokenizer=tokenizer, calibration=texts, iters=0)
    found = read_checkpoint_quantization(json.loads((saved / "config.json").read_text()), saved)
    assert found is not None and (found.method, found.bits, found.group_size) == ("auto-round", 4, choice.group_size)
    plan = decide(None, found, CPU, dtype="float32")
    assert plan.choice is not None and plan.choice.dtype == "float16"  # auto-round's torch kernels cast float32 away
    plain = load(saved)
    assert str(plain.dtype) == "torch.float16"  # what the plan said transformers + auto-round would do
    planned = load(saved, **from_pretrained_kwargs(plan.choice), quantization_config=AutoRoundConfig(backend="auto"))
    assert greedy(planned, tokenizer) == greedy(plain, tokenizer)
