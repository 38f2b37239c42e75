"""``Loaded.train`` for the heads transformers' examples train (issue 26): seq2seq with
``Seq2SeqTrainer`` (whole and LoRA), token classification (whole and LoRA), LoRA on a
vision-language model's language model; anything else refused before it reads the data.

Each run is a few steps on tiny checkpoints (``tests/zoo/heads.py``); what a user would notice is
checked: the loss falls on the data trained on, what was saved loads back through ``intelrt.load``
and answers, and only the parts meant to train changed.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import torch
import transformers
from zoo import heads, table

import intelrt
from intelrt.errors import ConfigurationError

STEPS = {"epochs": 30, "per_device_train_batch_size": 4, "learning_rate": 5e-3, "save_strategy": "no",
         "use_cpu": True}
PAIRS = [{"input": "w5 w6 w7", "target": "w9 w10"}, {"input": "w11 w12", "target": "w13 w14 w15"},
         {"input": "w20 w21 w22 w23", "target": "w24"}, {"input": "w30", "target": "w31 w32"}]
TAGGED = [{"tokens": ["w5", "w6", "w7"], "tags": ["B-PER", "I-PER", "O"]},
          {"tokens": ["w8", "w9"], "ner_tags": [3, 4]},
          {"tokens": ["w10", "w11", "w12", "w13"], "tags": ["O", "O", "B-LOC", "O"]}]


@pytest.fixture(scope="module")
def head(one_torch_thread: None) -> Any:
    root = table.models_root()
    return lambda name: heads.build_head(name, root)


def _seq2seq_loss(model: Any, tokenizer: Any) -> float:
    batch = tokenizer([p["input"] for p in PAIRS], text_target=[p["target"] for p in PAIRS], padding=True,
                      return_tensors="pt")
    batch["labels"][batch["labels"] == tokenizer.pad_token_id] = -100
    with torch.no_grad():
        return float(model(**batch).loss)


@pytest.mark.parametrize("lora", [False, True], ids=["whole", "lora"])
def test_a_seq2seq_model_trains_with_seq2seq_trainer_and_loads_back(head: Any, tmp_path: Path, lora: bool) -> None:
    loaded = intelrt.load(head("bart"), dtype="float32")
    before = _seq2seq_loss(loaded.model, loaded.tokenizer)
    result = loaded.train(PAIRS, lora=lora or None, output_dir=tmp_path / "out", **STEPS)
    assert result.adapter is lora and result.examples == len(PAIRS)
    assert result.final_loss < result.first_loss
    again = intelrt.load(tmp_path / "out", dtype="float32")
    assert isinstance(again.model, transformers.BartForConditionalGeneration) or lora
    assert _seq2seq_loss(again.model, again.tokenizer) < before
    assert again.generate("w5 w6 w7", max_new_tokens=3) == loaded.generate("w5 w6 w7", max_new_tokens=3)


def _tag_loss(model: Any, tokenizer: Any) -> float:
    from intelrt.training.data import ModelLimits
    from intelrt.training.heads import token_examples

    collator = transformers.DataCollatorForTokenClassification(tokenizer)
    rows = token_examples(TAGGED, tokenizer, dict(model.config.label2id), ModelLimits())
    with torch.no_grad():
        return float(model(**collator([rows[i] for i in range(len(rows))])).loss)


@pytest.mark.parametrize("lora", [False, True], ids=["whole", "lora"])
def test_a_token_classifier_trains_and_tags_after_reloading(head: Any, tmp_path: Path, lora: bool) -> None:
    loaded = intelrt.load(head("bert-token"), dtype="float32")
    before = _tag_loss(loaded.model, loaded.tokenizer)
    classifier = loaded.model.classifier.weight.detach().clone()
    result = loaded.train(TAGGED, lora=lora or None, output_dir=tmp_path / "out", **STEPS)
    assert result.final_loss < result.first_loss
    again = intelrt.load(tmp_path / "out", dtype="float32")
    assert _tag_loss(again.model, again.tokenizer) < before
    assert not torch.equal(again.model.classifier.weight.detach().cpu(), classifier)  # the head trained (LoRA: whole)
    tags = again.pipeline("token-classification")("w5 w6 w7")
    assert all(t["word"] in {"w5", "w6", "w7"} and t["entity"] in heads.TOKEN_LABELS for t in tags)


def test_lora_on_a_vision_language_model_trains_its_language_model_only(head: Any, tmp_path: Path) -> None:
    loaded = intelrt.load(head("llava"), dtype="float32")
    rows = [{"images": [picture], "text": f"<image> w{5 + i} w{6 + i} w{7 + i}"}
            for i, picture in enumerate(heads.images(4))]
    vision_before = {n: p.detach().clone() for n, p in loaded.model.named_parameters() if "vision_tower" in n}
    result = loaded.train(rows, lora=True, output_dir=tmp_path / "out", **STEPS)
    assert result.adapter and result.final_loss < result.first_loss
    trainable = [n for n, p in loaded.model.named_parameters() if p.requires_grad]
    assert trainable and all("language_model" in n and "lora_" in n for n in trainable), trainable[:5]
    assert all(torch.equal(p, vision_before[n.replace("base_model.model.", "")]) for n, p in
               loaded.model.named_parameters() if "vision_tower" in n)
    again = intelrt.load(tmp_path / "out", dtype="float32")
    pictures = heads.images(1)
    assert again.generate("<image> w5", images=pictures, max_new_tokens=4) == \
        loaded.generate("<image> w5", images=pictures, max_new_tokens=4)
    with pytest.raises(ConfigurationError, match="LoRA adapters .lora=True.*transformers.Trainer"):
        intelrt.load(head("llava")).train(rows, output_dir=tmp_path / "whole")


def test_other_heads_are_refused_with_the_way_out(head: Any, tmp_path: Path) -> None:
    vision = intelrt.load(head("vit"))
    with pytest.raises(ConfigurationError, match="loaded for 'image-classification'.*transformers.Trainer and "
                                                 "intelrt.training_arguments"):
        vision.train(["anything"], output_dir=tmp_path / "out")
    assert not (tmp_path / "out").exists()
    with pytest.raises(ConfigurationError, match='item 0: expected a JSON object with "input", "target"'):
        intelrt.load(head("t5")).train(["plain text"], output_dir=tmp_path / "t5")
    with pytest.raises(ConfigurationError, match="tag 'B-ORG' is not one of the model's labels"):
        intelrt.load(head("bert-token")).train([{"tokens": ["w5"], "tags": ["B-ORG"]}], output_dir=tmp_path / "tags")
