"""Load and run on the CPU for real: the plan applied, text generated, encoders served."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

import intelrt
from intelrt.errors import ConfigurationError


@pytest.fixture(scope="module")
def loaded(tiny_model: Path) -> intelrt.Loaded:
    return intelrt.load(tiny_model)


def test_load_applies_the_plan(loaded: intelrt.Loaded) -> None:
    import torch

    assert loaded.plan.backend.name == "cpu"
    assert loaded.device == torch.device("cpu")
    assert loaded.model.dtype == torch.float32
    assert loaded.model.config._attn_implementation == "sdpa"
    assert not loaded.model.training


def test_generate_returns_text_equal_to_plain_transformers(loaded: intelrt.Loaded, tiny_model: Path) -> None:
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    text = loaded.generate("Intel GPUs are", max_new_tokens=8)
    assert isinstance(text, str) and text
    tokenizer = AutoTokenizer.from_pretrained(tiny_model)
    model = AutoModelForCausalLM.from_pretrained(tiny_model)
    ids = tokenizer("Intel GPUs are", return_tensors="pt")
    with torch.inference_mode():
        out = model.generate(**ids, max_new_tokens=8, do_sample=False, pad_token_id=tokenizer.pad_token_id)
    assert text == tokenizer.decode(out[0, ids["input_ids"].shape[1]:], skip_special_tokens=True)


def test_generate_a_list_returns_one_text_per_prompt(loaded: intelrt.Loaded) -> None:
    texts = loaded.generate(["short", "a much longer prompt about Gaudi"], max_new_tokens=4)
    assert isinstance(texts, list) and len(texts) == 2 and all(isinstance(t, str) for t in texts)
    assert texts[1] == loaded.generate("a much longer prompt about Gaudi", max_new_tokens=4)


@pytest.mark.parametrize("prompt, kwargs, message", [
    ([], {}, "empty list of prompts"),
    ([1, 2], {}, "every prompt must be a str"),
    (b"bytes", {}, "prompt must be a str or a list of str"),
    ("hi", {"max_new_tokens": "5"}, "max_new_tokens must be an int >= 1"),
    ("hi", {"max_new_tokens": 0}, "max_new_tokens must be an int >= 1"),
])
def test_generate_rejects_bad_input_clearly(loaded: intelrt.Loaded, prompt: object, kwargs: dict,  # type: ignore[type-arg]
                                            message: str) -> None:
    with pytest.raises(ConfigurationError, match=message):
        loaded.generate(prompt, **kwargs)  # type: ignore[arg-type]


def test_encoder_is_loaded_for_feature_extraction(tiny_encoder: Path) -> None:
    model = intelrt.load(tiny_encoder)
    assert model.plan.task == "feature-extraction"
    vectors = model.embed(["one text", "and another"])
    assert tuple(vectors.shape) == (2, 32)
    with pytest.raises(ConfigurationError, match="loaded for 'feature-extraction'"):
        model.generate("hello")


def test_classifier_is_loaded_for_text_classification(tiny_classifier: Path) -> None:
    model = intelrt.load(tiny_classifier)
    assert model.plan.task == "text-classification"  # transformers' pipeline name (intelrt's old one is an alias)
    assert type(model.model).__name__ == "BertForSequenceClassification"
    labels = model.classify(["good", "bad", "neutral"])
    assert len(labels) == 3 and set(labels) <= {"label_0", "label_1", "label_2"}


def test_tokenizer_less_model_loads_and_generate_explains(tiny_model: Path, tmp_path: Path) -> None:
    bare = tmp_path / "bare"
    bare.mkdir()
    for name in ("config.json", "generation_config.json", "model.safetensors"):
        shutil.copy(tiny_model / name, bare / name)
    model = intelrt.load(bare)
    assert model.tokenizer is None
    assert any("no tokenizer" in n for n in model.plan.notes)
    with pytest.raises(ConfigurationError, match="needs a tokenizer"):
        model.generate("hello")


@pytest.mark.claim("C5")
def test_c5_opted_in_pickle_checkpoint_loads(tiny_model: Path, tmp_path: Path) -> None:
    import torch
    from safetensors.torch import load_file

    model_dir = tmp_path / "pickled"
    shutil.copytree(tiny_model, model_dir)
    torch.save(load_file(model_dir / "model.safetensors"), model_dir / "pytorch_model.bin")
    (model_dir / "model.safetensors").unlink()
    model = intelrt.load(model_dir, allow_pickle=True)
    assert model.generate("Gaudi", max_new_tokens=3)
