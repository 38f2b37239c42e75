"""Loaded.train on the CPU, for real: LoRA lowers the loss, saves, reloads to the same output
(issue 5; SPEC X8 train/eval switch, X9 QLoRA)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from intelrt.errors import ConfigurationError

pytestmark = pytest.mark.usefixtures("one_torch_thread")


PROMPT = "Intel GPUs are"


@pytest.fixture(scope="module")
def trained(tiny_model: Path, tmp_path_factory: pytest.TempPathFactory) -> tuple[object, object, str, Path]:
    import intelrt
    from intelrt.tiny import corpus_text

    loaded = intelrt.load(tiny_model)
    base_text = loaded.generate(PROMPT, max_new_tokens=12)
    out = tmp_path_factory.mktemp("lora")
    result = loaded.train(corpus_text().splitlines(), lora=True, epochs=5, output_dir=out, block_size=64,
                          learning_rate=1e-2, per_device_train_batch_size=4, disable_tqdm=True)
    return loaded, result, str(base_text), out


@pytest.mark.claim("X9")
def test_X9_lora_fine_tune_lowers_the_training_loss(trained: tuple[object, object, str, Path]) -> None:
    _, result, _, _ = trained
    losses = [loss for _, loss in result.losses]  # type: ignore[attr-defined]
    assert result.adapter and not result.quantized and result.steps == 35  # type: ignore[attr-defined]
    assert len(losses) == 35
    first, last = sum(losses[:5]) / 5, sum(losses[-5:]) / 5
    assert last < first - 0.1, (first, last)
    assert 0 < result.trainable_parameters < 0.2 * result.total_parameters  # type: ignore[attr-defined]


@pytest.mark.claim("X8")
def test_X8_model_is_back_in_inference_mode_after_training(trained: tuple[object, object, str, Path]) -> None:
    loaded, _, _, _ = trained
    assert loaded.model.training is False  # type: ignore[attr-defined]
    assert not any(m.training for m in loaded.model.modules())  # type: ignore[attr-defined]


def test_saved_adapter_reloads_with_the_same_greedy_output(trained: tuple[object, object, str, Path]) -> None:
    import torch

    import intelrt

    loaded, result, base_text, out = trained
    assert {"adapter_config.json", "adapter_model.safetensors", "tokenizer.json"} <= {p.name for p in out.iterdir()}
    assert json.loads((out / "intelrt_train.json").read_text())["steps"] == result.steps  # type: ignore[attr-defined]
    trained_text = loaded.generate(PROMPT, max_new_tokens=12)  # type: ignore[attr-defined]
    assert trained_text != base_text, "training must have changed the output"
    reloaded = intelrt.load(out)
    assert reloaded.plan.model.base is not None
    assert reloaded.generate(PROMPT, max_new_tokens=12) == trained_text
    ids = reloaded.tokenizer(PROMPT, return_tensors="pt")
    with torch.inference_mode():
        torch.testing.assert_close(reloaded.model(**ids).logits, loaded.model(**ids).logits)  # type: ignore[attr-defined]
    with pytest.raises(ConfigurationError, match=r"loaded from the adapter directory.*train from the base model"):
        reloaded.train(["more text"], lora=True, output_dir=out / "again")


@pytest.mark.claim("X9")
def test_X9_qlora_trains_adapters_on_a_4bit_model_and_full_training_is_refused(tiny_model: Path,
                                                                              tmp_path: Path) -> None:
    import intelrt

    loaded = intelrt.load(tiny_model, quantization="4bit")
    with pytest.raises(ConfigurationError, match=r"loaded with quantization=.4bit. \(quantized\).*lora=True.*QLoRA"):
        loaded.train(["Intel GPUs run PyTorch."], output_dir=tmp_path)
    result = loaded.train(["Intel GPUs run PyTorch through the XPU backend."] * 8, lora=True, output_dir=tmp_path,
                          max_steps=2, block_size=16, disable_tqdm=True)
    assert result.quantized and result.adapter and result.steps == 2
    assert "QLoRA adapters" in str(result)
    assert (tmp_path / "adapter_model.safetensors").is_file()


@pytest.mark.parametrize("data, message", [
    ("no-such-file.txt", r"no-such-file\.txt.*no such file"),
    ([1, 2], r"holds int items"),
    ([" ", ""], r"holds no text"),
    (42, r"text file path, a \.jsonl file, a list of strings or a datasets\.Dataset"),
])
def test_bad_training_data_is_a_clear_error(tiny_model: Path, tmp_path: Path, data: object, message: str) -> None:
    import intelrt

    with pytest.raises(ConfigurationError, match=message):
        intelrt.load(tiny_model).train(data, lora=True, output_dir=tmp_path)


def test_dataset_with_a_text_column_and_a_text_file_both_train(tiny_model: Path, tmp_path: Path) -> None:
    import datasets

    import intelrt

    loaded = intelrt.load(tiny_model)
    bad = datasets.Dataset.from_dict({"sentence": ["a b c"]})
    with pytest.raises(ConfigurationError, match=r"columns \['sentence'\].*rename_column"):
        loaded.train(bad, lora=True, output_dir=tmp_path)
    good = datasets.Dataset.from_dict({"text": ["Intel GPUs run PyTorch."] * 4})
    assert loaded.train(good, lora=True, output_dir=tmp_path / "a", max_steps=1, block_size=8,
                        disable_tqdm=True).steps == 1
    text = tmp_path / "data.txt"
    text.write_text("Gaudi runs PyTorch eager by default.\n\nIt captures graphs with torch.compile.\n")
    assert loaded.train(text, lora=True, output_dir=tmp_path / "b", max_steps=1, block_size=8,
                        disable_tqdm=True).steps == 1


def test_epochs_and_overrides_are_checked(tiny_model: Path, tmp_path: Path) -> None:
    import intelrt

    loaded = intelrt.load(tiny_model)
    with pytest.raises(ConfigurationError, match="epochs must be a number > 0"):
        loaded.train(["text"], epochs=0, output_dir=tmp_path)
    with pytest.raises(ConfigurationError, match="pass epochs="):
        loaded.train(["text"], num_train_epochs=2, output_dir=tmp_path)
    with pytest.raises(ConfigurationError, match="did you mean 'learning_rate'"):
        loaded.train(["text"], learning_rat=1e-3, output_dir=tmp_path)
