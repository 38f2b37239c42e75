"""Training data for a causal LM: a text file, a ``.jsonl`` file, a list of strings or a
``datasets.Dataset`` → equal-length blocks of token ids, the way transformers' language-modelling
examples do it.

Every row is checked before ``Trainer`` sees it: a broken ``.jsonl`` line names the file and the
line, a token id outside the model's vocabulary names the id and the vocabulary size (the
embedding would fail with an index error deep inside the forward pass), and a row longer than
the model's positions is truncated with a count — or refused in strict mode.
"""

from __future__ import annotations

import json
import logging
import numbers
import os
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ..errors import ConfigurationError

log = logging.getLogger(__name__)

DEFAULT_BLOCK_SIZE = 128
JSONL_SUFFIXES = (".jsonl", ".ndjson")
TABLE_SUFFIXES = {".csv": "'csv'", ".tsv": "'csv', delimiter='\\t'", ".json": "'json'", ".parquet": "'parquet'",
                  ".arrow": "'arrow'"}
"""Files of rows and columns: read as plain text, their header, separators and quoting would be
trained on as if they were prose."""


@dataclass(frozen=True)
class TextBlocks:
    """Token blocks ready for ``Trainer`` (a map-style dataset of ``{"input_ids": [...]}``)."""

    blocks: tuple[tuple[int, ...], ...]
    texts: int
    """How many texts (lines, list items or rows) went in."""
    tokens: int
    """Tokens in the blocks (a remainder shorter than a block is dropped when there is a full block)."""
    source: str
    truncated: int = 0
    """Rows of token ids cut to the model's length (``max_position_embeddings``)."""

    def __len__(self) -> int:
        return len(self.blocks)

    def __getitem__(self, index: int) -> dict[str, list[int]]:
        return {"input_ids": list(self.blocks[index])}


@dataclass(frozen=True)
class ModelLimits:
    """What the model can take: token ids below ``vocab_size``, rows of at most ``max_length``."""

    vocab_size: int | None = None
    max_length: int | None = None
    strict: bool = False
    """Refuse over-long rows instead of truncating them."""


@dataclass(frozen=True)
class _Rows:
    """Texts or rows of token ids, each with where it came from (``file line N``, ``row N``)."""

    texts: list[tuple[str, str]]
    ids: list[tuple[str, list[int]]]
    source: str


def _read_text(path: Path, shown: str) -> str:
    try:
        raw = path.read_bytes()
    except OSError as exc:
        raise ConfigurationError(f"data={shown!r}: cannot read it ({exc})") from None
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        line = raw.count(b"\n", 0, exc.start) + 1
        raise ConfigurationError(f"{path} line {line}: not UTF-8 text (byte {raw[exc.start]:#04x} at offset "
                                 f"{exc.start}); save the file as UTF-8") from None


def _jsonl_rows(path: Path, text: str) -> _Rows:
    texts: list[tuple[str, str]] = []
    ids: list[tuple[str, list[int]]] = []
    for number, line in enumerate(text.splitlines(), start=1):
        if not line.strip():
            continue
        where = f"{path} line {number}"
        try:
            row = json.loads(line)
        except ValueError as exc:
            raise ConfigurationError(f"{where}: not JSON ({exc}); every line of a .jsonl file is one JSON object "
                                     'such as {"text": "..."}') from None
        if not isinstance(row, dict) or not ({"text", "input_ids"} & set(row)):
            raise ConfigurationError(f'{where}: expected a JSON object with a "text" (or "input_ids") field, got '
                                     f"{line.strip()[:80]!r}")
        if "text" in row:
            if not isinstance(row["text"], str):
                raise ConfigurationError(f'{where}: "text" holds {type(row["text"]).__name__}, not a string')
            if row["text"].strip():  # a blank row, as a list of strings drops it (all blank: refused below)
                texts.append((where, row["text"]))
        else:
            ids.append((where, _id_row(where, row["input_ids"])))
        if texts and ids:
            raise ConfigurationError(f'{where}: the file mixes "text" and "input_ids" rows; use one kind per file')
    return _Rows(texts, ids, str(path))


def _id_row(where: str, row: object) -> list[int]:
    tolist = getattr(row, "tolist", None)  # a dataset formatted as numpy or torch gives arrays
    if callable(tolist):
        row = tolist()
    if not isinstance(row, (list, tuple)) or any(isinstance(t, bool) or not isinstance(t, numbers.Integral)
                                                 for t in row):
        raise ConfigurationError(f"{where}: input_ids must be a list of whole numbers, got {str(row)[:80]}")
    return [int(t) for t in row]


def _rows_from(data: object) -> _Rows:
    if isinstance(data, (str, os.PathLike)):
        path = Path(data).expanduser()
        if not path.is_file():
            hint = " (to train on a string, pass it in a list: [text])" if isinstance(data, str) and not path.suffix else ""
            raise ConfigurationError(f"data={str(data)!r}: no such file{hint}. Pass a text file, a .jsonl file, a "
                                     "list of strings, or a datasets.Dataset with a 'text' column.")
        if path.suffix.lower() in TABLE_SUFFIXES:
            builder = TABLE_SUFFIXES[path.suffix.lower()]
            raise ConfigurationError(
                f"data={str(data)!r} is a {path.suffix.lower().lstrip('.')} file: read as plain text, its header and "
                "separators would be trained on as prose. Load it as a table and pass it with a 'text' column — "
                f"datasets.load_dataset({builder}, data_files='{path}')['train'] — or write the texts as a .jsonl "
                "file with a \"text\" field, or a text file of one example per line")
        text = _read_text(path, str(data))
        if path.suffix.lower() in JSONL_SUFFIXES:
            return _jsonl_rows(path, text)
        lines = [(f"{path} line {n}", line) for n, line in enumerate(text.splitlines(), start=1) if line.strip()]
        return _Rows(lines, [], str(path))
    if _is_hf_dataset(data):
        columns = list(getattr(data, "column_names", []) or [])
        if "input_ids" in columns:
            rows = list(data["input_ids"])  # type: ignore[index]
            return _Rows([], [(f"datasets.Dataset row {i}", _id_row(f"datasets.Dataset row {i}", r))
                              for i, r in enumerate(rows)], f"datasets.Dataset ({len(rows)} rows of input_ids)")
        if "text" not in columns:
            raise ConfigurationError(f"the datasets.Dataset has columns {columns}; train() reads a 'text' column "
                                     "(rename yours with dataset.rename_column(old, 'text')) or 'input_ids'")
        texts = list(data["text"])  # type: ignore[index]
        bad = sorted({type(t).__name__ for t in texts if not isinstance(t, str)})
        if bad:
            raise ConfigurationError(f"the 'text' column holds {', '.join(bad)} values; every row must be a str")
        return _Rows([(f"datasets.Dataset row {i}", t) for i, t in enumerate(texts) if t.strip()], [],
                     f"datasets.Dataset ({len(texts)} rows)")
    if isinstance(data, Sequence) and not isinstance(data, (bytes, bytearray)):
        items = list(data)
        bad = sorted({type(t).__name__ for t in items if not isinstance(t, str)})
        if bad:
            raise ConfigurationError(f"data holds {', '.join(bad)} items; pass a list of str")
        return _Rows([(f"item {i}", t) for i, t in enumerate(items) if t.strip()], [],
                     f"list of {len(items)} strings")
    raise ConfigurationError(f"data must be a text file path, a .jsonl file, a list of strings or a datasets.Dataset, "
                             f"not {type(data).__name__}")


def _is_hf_dataset(data: object) -> bool:
    return type(data).__module__.startswith("datasets.") and hasattr(data, "column_names")


def _check_ids(where: str, ids: Sequence[int], vocab_size: int | None) -> None:
    """An id outside ``[0, vocab_size)`` ends in an index error inside the embedding: name it here."""
    if not ids:
        return
    low, high = min(ids), max(ids)
    if low < 0:
        raise ConfigurationError(f"{where}: token id {low} is negative; token ids run from 0 to the vocabulary size")
    if vocab_size is not None and high >= vocab_size:
        raise ConfigurationError(f"{where}: token id {high} is outside the model's vocabulary of {vocab_size} tokens "
                                 f"(ids 0..{vocab_size - 1}); tokenize with this model's tokenizer, or resize the "
                                 "model's embeddings (model.resize_token_embeddings) for added tokens")


def _fit_rows(rows: list[tuple[str, list[int]]], limits: ModelLimits, source: str) -> tuple[list[list[int]], int]:
    limit = limits.max_length
    longer = [(where, len(ids)) for where, ids in rows if limit is not None and len(ids) > limit]
    if not longer:
        return [ids for _, ids in rows], 0
    first, length = longer[0]
    if limits.strict:
        raise ConfigurationError(f"strict mode: {len(longer)} of {len(rows)} rows of {source} are longer than the "
                                 f"model's {limit} positions (max_position_embeddings), the first at {first} "
                                 f"({length} tokens); shorten them, or leave strict off to truncate them")
    log.warning("%d of %d rows of %s are longer than the model's %d positions (max_position_embeddings) and were "
                "truncated to %d tokens (the first: %s, %d tokens); pass strict=True to refuse them instead",
                len(longer), len(rows), source, limit, limit, first, length)
    return [ids[:limit] for _, ids in rows], len(longer)


def _fit_block_size(block_size: int, limits: ModelLimits) -> int:
    limit = limits.max_length
    if limit is None or block_size <= limit:
        return block_size
    if limits.strict:
        raise ConfigurationError(f"strict mode: block_size={block_size} is longer than the model's {limit} positions "
                                 "(max_position_embeddings); pass block_size <= that")
    log.warning("block_size=%d is longer than the model's %d positions (max_position_embeddings): using blocks of "
                "%d tokens", block_size, limit, limit)
    return limit


def causal_lm_blocks(data: object, tokenizer: Any, block_size: int = DEFAULT_BLOCK_SIZE,
                     limits: ModelLimits | None = None) -> TextBlocks:
    """Tokenize ``data``, join the texts with the end-of-text token, cut into ``block_size`` blocks.

    Rows of ``input_ids`` (a ``datasets.Dataset`` column or ``.jsonl`` rows) are used row by row,
    checked against ``limits`` and cut to the model's length.
    """
    if not isinstance(block_size, int) or isinstance(block_size, bool) or block_size < 2:
        raise ConfigurationError(f"block_size must be an int >= 2, got {block_size!r}")
    limits = limits or ModelLimits()
    rows = _rows_from(data)
    if rows.ids:
        for where, ids in rows.ids:
            _check_ids(where, ids, limits.vocab_size)
        kept = [(where, ids) for where, ids in rows.ids if ids]
        if not kept:
            raise ConfigurationError(f"{rows.source}: every input_ids row is empty; nothing to train on")
        single = [where for where, ids in kept if len(ids) == 1]
        if single:  # no token to predict: its loss is nan, which reads as a diverged run
            raise ConfigurationError(
                f"{single[0]}: a row of 1 token ({len(single)} such row(s) in {rows.source}); a language model learns "
                "each token from the ones before it, so a row needs at least 2. Join such rows to others, or remove "
                "them")
        fitted, truncated = _fit_rows(kept, limits, rows.source)
        return TextBlocks(tuple(tuple(r) for r in fitted), len(kept), sum(map(len, fitted)), rows.source, truncated)
    if not rows.texts:
        raise ConfigurationError(f"{rows.source} holds no text; nothing to train on")
    block_size = _fit_block_size(block_size, limits)
    eos = tokenizer.eos_token_id
    stream: list[int] = []
    encoded = tokenizer([text for _, text in rows.texts], add_special_tokens=False)["input_ids"]
    for (where, _), ids in zip(rows.texts, encoded, strict=True):
        _check_ids(f"{where} (as tokenized)", ids, limits.vocab_size)
        stream.extend(ids)
        if eos is not None:
            stream.append(eos)
    _check_ids(f"{rows.source}: the end-of-text token", [eos] if eos is not None else [], limits.vocab_size)
    if len(stream) < 2:
        raise ConfigurationError(f"{rows.source} tokenizes to {len(stream)} token(s); a language model needs at least 2")
    if len(stream) < block_size:
        blocks = [stream]
    else:
        blocks = [stream[i:i + block_size] for i in range(0, len(stream) - block_size + 1, block_size)]
    return TextBlocks(tuple(tuple(b) for b in blocks), len(rows.texts), sum(map(len, blocks)), rows.source)
