"""Training data errors name the file and the line (issue 16): a broken ``.jsonl`` line was trained
as raw JSON text; an out-of-vocabulary or negative token id ended in an index error inside the
embedding; rows longer than the model's positions ran without a word. Every case goes through
``Loaded.train`` on the tiny model, and is refused before ``Trainer`` starts."""

from __future__ import annotations

import json
import logging
from pathlib import Path

import pytest

import intelrt
from intelrt.errors import ConfigurationError

pytestmark = pytest.mark.usefixtures("one_torch_thread")

FAST = {"disable_tqdm": True, "per_device_train_batch_size": 4, "max_steps": 1, "save_strategy": "no"}


@pytest.fixture
def loaded(tiny_model: Path) -> intelrt.Loaded:
    return intelrt.load(tiny_model)


def _jsonl(tmp_path: Path, *lines: str) -> Path:
    path = tmp_path / "data.jsonl"
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return path


@pytest.mark.parametrize(("lines", "message"), [
    (['{"text": "Intel GPUs run PyTorch."}', '{"text": "Gaudi runs it too."', '{"text": "ok"}'],
     r"data\.jsonl line 2: not JSON \(Expecting ',' delimiter"),
    (['{"text": "fine"}', "", '["a", "list"]'], r'data\.jsonl line 3: expected a JSON object with a "text"'),
    (['{"prompt": "no text field"}'], r'data\.jsonl line 1: expected a JSON object with a "text" \(or "input_ids"\)'),
    (['{"text": 42}'], r'data\.jsonl line 1: "text" holds int, not a string'),
    (['{"text": "words"}', '{"input_ids": [1, 2, 3]}'], r'data\.jsonl line 2: the file mixes "text" and "input_ids"'),
    (['{"input_ids": [1, "two", 3]}'], r"data\.jsonl line 1: input_ids must be a list of whole numbers"),
    (['{"input_ids": [1, 2.5]}'], r"data\.jsonl line 1: input_ids must be a list of whole numbers"),
    (['{"input_ids": [1, true]}'], r"data\.jsonl line 1: input_ids must be a list of whole numbers"),
    (['{"input_ids": [5, 999999]}'], r"data\.jsonl line 1: token id 999999 is outside the model's vocabulary of "
                                     r"\d+ tokens"),
    (['{"input_ids": [5, -3]}'], r"data\.jsonl line 1: token id -3 is negative"),
    (["", "  "], r"data\.jsonl holds no text; nothing to train on"),
], ids=["broken-line", "a-json-list", "no-text-field", "text-not-a-string", "text-and-input-ids-mixed",
        "an-id-that-is-a-string", "an-id-that-is-a-float", "an-id-that-is-a-bool", "an-id-outside-the-vocabulary",
        "a-negative-id", "empty-file"])
def test_a_bad_jsonl_line_is_named_with_its_file_and_line(loaded: intelrt.Loaded, tmp_path: Path,
                                                          lines: list[str], message: str) -> None:
    path = _jsonl(tmp_path, *lines)
    named = f"{tmp_path}/{message}" if message.startswith("data") else message  # the file's whole path
    with pytest.raises(ConfigurationError, match=named):
        loaded.train(path, output_dir=tmp_path / "out", **FAST)
    assert not (tmp_path / "out").exists(), "nothing may be written before the data is checked"


def test_a_jsonl_of_texts_or_of_token_ids_trains(loaded: intelrt.Loaded, tmp_path: Path, tiny_model: Path) -> None:
    texts = _jsonl(tmp_path, *[json.dumps({"text": "Intel GPUs run PyTorch through the XPU backend."})] * 8)
    result = loaded.train(texts, output_dir=tmp_path / "texts", block_size=8, **FAST)
    assert result.examples > 1 and result.steps == 1
    ids = tmp_path / "ids.jsonl"
    ids.write_text("\n".join(json.dumps({"input_ids": [1, 2, 3, 4, 5, 6]}) for _ in range(8)), encoding="utf-8")
    result = intelrt.load(tiny_model).train(ids, output_dir=tmp_path / "ids", **FAST)
    assert result.examples == 8 and result.truncated_rows == 0


def test_a_text_file_that_is_not_utf8_names_its_line(loaded: intelrt.Loaded, tmp_path: Path) -> None:
    path = tmp_path / "data.txt"
    path.write_bytes("first line\nsecond line\nthird \xe9t\xe9\n".encode("latin-1"))
    with pytest.raises(ConfigurationError, match=rf"{path} line 3: not UTF-8 text \(byte 0xe9 at offset 29\)"):
        loaded.train(path, output_dir=tmp_path / "out", **FAST)


@pytest.fixture
def id_rows() -> type:
    datasets = pytest.importorskip("datasets")
    return datasets.Dataset  # type: ignore[no-any-return]


@pytest.mark.parametrize(("rows", "message"), [
    ([[1, 2, 3], [4, 5, 10**6]], r"datasets\.Dataset row 1: token id 1000000 is outside the model's vocabulary of "
                                 r"(\d+) tokens \(ids 0\.\.\d+\); tokenize with this model's tokenizer"),
    ([[1, 2, 3], [-1, 5]], r"datasets\.Dataset row 1: token id -1 is negative"),
], ids=["an-id-outside-the-vocabulary", "a-negative-id"])
def test_out_of_range_token_ids_name_the_id_and_the_vocabulary_size(loaded: intelrt.Loaded, tmp_path: Path,
                                                                     id_rows: type, rows: list[list[int]],
                                                                     message: str) -> None:
    """They ended in ``IndexError: index out of range in self`` from the embedding."""
    with pytest.raises(ConfigurationError, match=message):
        loaded.train(id_rows.from_dict({"input_ids": rows}), output_dir=tmp_path / "out", **FAST)  # type: ignore[attr-defined]
    size = loaded.model.get_input_embeddings().num_embeddings
    with pytest.raises(ConfigurationError, match=rf"token id {size} is outside the model's vocabulary of {size} tokens"):
        loaded.train(id_rows.from_dict({"input_ids": [[0, size]]}), output_dir=tmp_path / "out", **FAST)  # type: ignore[attr-defined]
    loaded.train(id_rows.from_dict({"input_ids": [[0, size - 1]] * 4}), output_dir=tmp_path / "edge", **FAST)  # type: ignore[attr-defined]


@pytest.mark.parametrize("format_", ["torch", "numpy"])
def test_a_dataset_formatted_as_arrays_is_read_as_ids(loaded: intelrt.Loaded, tmp_path: Path, id_rows: type,
                                                      format_: str) -> None:
    """``with_format("torch")`` hands rows over as tensors: they are ids like any list of ints."""
    rows = id_rows.from_dict({"input_ids": [[1, 2, 3, 4]] * 8}).with_format(format_)  # type: ignore[attr-defined]
    assert loaded.train(rows, output_dir=tmp_path / "out", **FAST).examples == 8
    bad = id_rows.from_dict({"input_ids": [[1, 2], [3, 10**6]]}).with_format(format_)  # type: ignore[attr-defined]
    with pytest.raises(ConfigurationError, match=r"datasets\.Dataset row 1: token id 1000000 is outside"):
        loaded.train(bad, output_dir=tmp_path / "bad", **FAST)


def test_text_whose_tokens_the_model_cannot_embed_names_the_line(tiny_model: Path, tmp_path: Path) -> None:
    """A tokenizer with more tokens than the model's embedding (tokens added, embeddings not resized)."""
    loaded = intelrt.load(tiny_model)
    loaded.model.resize_token_embeddings(40)
    path = tmp_path / "data.txt"
    path.write_text("short\nIntel GPUs run PyTorch through the XPU backend.\n", encoding="utf-8")
    with pytest.raises(ConfigurationError, match=rf"{path} line 1 \(as tokenized\): token id \d+ is outside the "
                                                 r"model's vocabulary of 40 tokens.*resize_token_embeddings"):
        loaded.train(path, output_dir=tmp_path / "out", **FAST)


def test_over_long_rows_are_truncated_with_a_count(loaded: intelrt.Loaded, tmp_path: Path, id_rows: type,
                                                   caplog: pytest.LogCaptureFixture) -> None:
    """They ran past max_position_embeddings without a word."""
    limit = loaded.model.config.max_position_embeddings
    rows = [[1] * (limit + 40), [2] * 10, [3] * (limit + 1), [4] * limit]
    with caplog.at_level(logging.WARNING, logger="intelrt"):
        result = loaded.train(id_rows.from_dict({"input_ids": rows}), output_dir=tmp_path / "out", **FAST)  # type: ignore[attr-defined]
    assert result.truncated_rows == 2 and result.to_dict()["truncated_rows"] == 2
    assert (f"2 of 4 rows of datasets.Dataset (4 rows of input_ids) are longer than the model's {limit} positions "
            f"(max_position_embeddings) and were truncated to {limit} tokens (the first: datasets.Dataset row 0, "
            f"{limit + 40} tokens); pass strict=True to refuse them instead") in caplog.text
    assert "2 rows truncated to the model's length" in str(result)


def test_over_long_rows_are_refused_in_strict_mode(tiny_model: Path, tmp_path: Path, id_rows: type) -> None:
    strict = intelrt.load(tiny_model, strict=True)
    limit = strict.model.config.max_position_embeddings
    with pytest.raises(ConfigurationError, match=rf"strict mode: 1 of 2 rows of .* are longer than the model's {limit} "
                                                 rf"positions .*the first at datasets\.Dataset row 1 \({limit + 1} tokens\)"):
        strict.train(id_rows.from_dict({"input_ids": [[1] * 5, [1] * (limit + 1)]}), output_dir=tmp_path / "o", **FAST)  # type: ignore[attr-defined]
    path = _jsonl(tmp_path, json.dumps({"input_ids": [7] * (limit + 3)}))
    with pytest.raises(ConfigurationError, match=rf"the first at {path} line 1 \({limit + 3} tokens\)"):
        strict.train(path, output_dir=tmp_path / "o", **FAST)


def test_a_block_size_beyond_the_models_positions_is_cut_with_a_warning_or_refused_in_strict_mode(
        tiny_model: Path, tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    loaded = intelrt.load(tiny_model)
    limit = loaded.model.config.max_position_embeddings
    text = ["Intel GPUs run PyTorch through the XPU backend. " * 40] * 4
    with caplog.at_level(logging.WARNING, logger="intelrt"):
        result = loaded.train(text, output_dir=tmp_path / "out", block_size=limit * 2, **FAST)
    assert f"block_size={limit * 2} is longer than the model's {limit} positions" in caplog.text
    assert result.steps == 1
    with pytest.raises(ConfigurationError, match=rf"strict mode: block_size={limit * 2} is longer than the model's "
                                                 rf"{limit} positions"):
        intelrt.load(tiny_model, strict=True).train(text, output_dir=tmp_path / "o", block_size=limit * 2, **FAST)
