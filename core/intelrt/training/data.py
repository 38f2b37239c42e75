"""Training data for a causal LM: a text file, a list of strings or a ``datasets.Dataset``
→ equal-length blocks of token ids, the way transformers' language-modelling examples do it."""

from __future__ import annotations

import os
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ..errors import ConfigurationError

DEFAULT_BLOCK_SIZE = 128


@dataclass(frozen=True)
class TextBlocks:
    """Token blocks ready for ``Trainer`` (a map-style dataset of ``{"input_ids": [...]}``)."""

    blocks: tuple[tuple[int, ...], ...]
    texts: int
    """How many texts (lines, list items or rows) went in."""
    tokens: int
    """Tokens in the blocks (a remainder shorter than a block is dropped when there is a full block)."""
    source: str

    def __len__(self) -> int:
        return len(self.blocks)

    def __getitem__(self, index: int) -> dict[str, list[int]]:
        return {"input_ids": list(self.blocks[index])}


def _texts_from(data: object) -> tuple[list[str], str]:
    if isinstance(data, (str, os.PathLike)):
        path = Path(data).expanduser()
        if not path.is_file():
            hint = " (to train on a string, pass it in a list: [text])" if isinstance(data, str) and not path.suffix else ""
            raise ConfigurationError(f"data={str(data)!r}: no such file{hint}. Pass a text file, a list of "
                                     "strings, or a datasets.Dataset with a 'text' column.")
        try:
            text = path.read_text(encoding="utf-8")
        except (OSError, UnicodeDecodeError) as exc:
            raise ConfigurationError(f"data={str(data)!r}: cannot read it as UTF-8 text ({exc})") from None
        return [line for line in text.splitlines() if line.strip()], str(path)
    if _is_hf_dataset(data):
        columns = list(getattr(data, "column_names", []) or [])
        if "text" not in columns:
            raise ConfigurationError(f"the datasets.Dataset has columns {columns}; train() reads a 'text' column "
                                     "(rename yours with dataset.rename_column(old, 'text')) or 'input_ids'")
        texts = list(data["text"])  # type: ignore[index]
        bad = sorted({type(t).__name__ for t in texts if not isinstance(t, str)})
        if bad:
            raise ConfigurationError(f"the 'text' column holds {', '.join(bad)} values; every row must be a str")
        return [t for t in texts if t.strip()], f"datasets.Dataset ({len(texts)} rows)"
    if isinstance(data, Sequence) and not isinstance(data, (bytes, bytearray)):
        items = list(data)
        bad = sorted({type(t).__name__ for t in items if not isinstance(t, str)})
        if bad:
            raise ConfigurationError(f"data holds {', '.join(bad)} items; pass a list of str")
        return [t for t in items if t.strip()], f"list of {len(items)} strings"
    raise ConfigurationError(f"data must be a text file path, a list of strings or a datasets.Dataset, "
                             f"not {type(data).__name__}")


def _is_hf_dataset(data: object) -> bool:
    return type(data).__module__.startswith("datasets.") and hasattr(data, "column_names")


def _token_ids_from_dataset(data: Any) -> list[list[int]] | None:
    if _is_hf_dataset(data) and "input_ids" in (data.column_names or []):
        return [list(map(int, row)) for row in data["input_ids"]]
    return None


def causal_lm_blocks(data: object, tokenizer: Any, block_size: int = DEFAULT_BLOCK_SIZE) -> TextBlocks:
    """Tokenize ``data``, join the texts with the end-of-text token, cut into ``block_size`` blocks.

    A ``datasets.Dataset`` that already has ``input_ids`` is used row by row, unchanged.
    """
    if not isinstance(block_size, int) or isinstance(block_size, bool) or block_size < 2:
        raise ConfigurationError(f"block_size must be an int >= 2, got {block_size!r}")
    rows = _token_ids_from_dataset(data)
    if rows is not None:
        rows = [r for r in rows if r]
        if not rows:
            raise ConfigurationError("the dataset's input_ids rows are all empty; nothing to train on")
        return TextBlocks(tuple(tuple(r) for r in rows), len(rows), sum(map(len, rows)),
                          f"datasets.Dataset ({len(rows)} rows of input_ids)")
    texts, source = _texts_from(data)
    if not texts:
        raise ConfigurationError(f"{source} holds no text; nothing to train on")
    eos = tokenizer.eos_token_id
    stream: list[int] = []
    for ids in tokenizer(texts, add_special_tokens=False)["input_ids"]:
        stream.extend(ids)
        if eos is not None:
            stream.append(eos)
    if len(stream) < 2:
        raise ConfigurationError(f"{source} tokenizes to {len(stream)} token(s); a language model needs at least 2")
    if len(stream) < block_size:
        blocks = [stream]
    else:
        blocks = [stream[i:i + block_size] for i in range(0, len(stream) - block_size + 1, block_size)]
    return TextBlocks(tuple(tuple(b) for b in blocks), len(texts), sum(map(len, blocks)), source)
