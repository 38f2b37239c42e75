"""What each trainable head trains on — the data it reads, the batches its collator makes, the
``Trainer`` that trains it and the LoRA adapters PEFT puts on it — following transformers' own
training examples:

* a causal LM: blocks of text (:mod:`intelrt.training.data`), ``DataCollatorForLanguageModeling``;
* a seq2seq model (T5, BART, Marian …): ``{"input": …, "target": …}`` rows tokenized with
  ``text_target`` and ``DataCollatorForSeq2Seq``, trained by ``Seq2SeqTrainer``
  (``examples/pytorch/summarization/run_summarization.py``); LoRA with PEFT's ``SEQ_2_SEQ_LM``;
* a token classifier: ``{"tokens": [...], "tags": [...]}`` rows (``ner_tags`` as in CoNLL-2003), the
  label of each word on its first sub-token and ``-100`` on the rest
  (``examples/pytorch/token-classification/run_ner.py: tokenize_and_align_labels``),
  ``DataCollatorForTokenClassification``; LoRA with PEFT's ``TOKEN_CLS`` (the classifier trains whole);
* a vision-language model: LoRA on the linear layers of its language model only (the vision tower
  and projector stay frozen), on ``{"images": [...], "text": …}`` rows or chat ``{"messages": [...]}``
  made into batches by the model's processor, loss on the text tokens only.

Everything else is refused before anything loads or trains, with the way out
(:func:`refusal`): ``loaded.model`` is transformers' own model, which ``Trainer`` trains directly.
"""

from __future__ import annotations

import json
import os
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ..errors import ConfigurationError
from .data import JSONL_SUFFIXES, ModelLimits

CAUSAL, SEQ2SEQ, TOKENS, VISION_LANGUAGE = "causal", "seq2seq", "token-classification", "vision-language"
TRAINABLE = {"text-generation": CAUSAL, "text2text-generation": SEQ2SEQ, "token-classification": TOKENS,
             "image-text-to-text": VISION_LANGUAGE}
"""The plan's task → how it trains."""
LORA_TASK_TYPES = {CAUSAL: "CAUSAL_LM", SEQ2SEQ: "SEQ_2_SEQ_LM", TOKENS: "TOKEN_CLS", VISION_LANGUAGE: "CAUSAL_LM"}
"""PEFT's ``TaskType`` per kind (it decides the wrapper class and, for ``TOKEN_CLS``, that the
classifier is saved whole: ``modules_to_save``)."""
IGNORE = -100
"""The label ``CrossEntropyLoss`` skips (transformers' ``ignore_index``)."""


def refusal(task: str, encoder_decoder: bool = False) -> str | None:
    """Why a model loaded for ``task`` cannot be trained by ``Loaded.train`` (``None``: it can).
    A plan-time check: it needs no weights."""
    kind = TRAINABLE.get(task)
    if kind == CAUSAL and encoder_decoder:
        kind = SEQ2SEQ
    if kind is not None:
        return None
    return (f"Loaded.train trains causal LMs, seq2seq models, token classifiers and LoRA adapters on a "
            f"vision-language model's language model; this model was loaded for {task!r}. Its model "
            "(loaded.model) is transformers' own: train it with transformers.Trainer and "
            "intelrt.training_arguments(output_dir, plan=loaded), which carries the plan's device settings")


def training_kind(task: str, model: Any) -> str:
    """How the loaded model trains (:data:`TRAINABLE`), or a :class:`ConfigurationError` with the way out."""
    encoder_decoder = bool(getattr(getattr(model, "config", None), "is_encoder_decoder", False))
    why = refusal(task, encoder_decoder)
    if why is not None:
        raise ConfigurationError(why)
    kind = TRAINABLE[task]
    return SEQ2SEQ if kind == CAUSAL and encoder_decoder else kind


@dataclass(frozen=True)
class Examples:
    """Tokenized examples for ``Trainer`` (a map-style dataset of dicts)."""

    rows: tuple[dict[str, Any], ...]
    source: str
    truncated: int = 0
    """Rows cut to the model's length."""

    def __len__(self) -> int:
        return len(self.rows)

    def __getitem__(self, index: int) -> dict[str, Any]:
        return dict(self.rows[index])


def read_rows(data: object, what: str) -> tuple[list[tuple[str, dict[str, Any]]], str]:
    """Rows of ``data`` (a ``.jsonl`` file, a list of dicts or a ``datasets.Dataset``), each with where
    it came from."""
    if isinstance(data, (str, os.PathLike)):
        path = Path(data).expanduser()
        if not path.is_file() or path.suffix.lower() not in JSONL_SUFFIXES:
            raise ConfigurationError(f"data={str(data)!r}: {what} trains on a .jsonl file of JSON objects, a list of "
                                     "dicts or a datasets.Dataset")
        rows = []
        for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), start=1):
            if line.strip():
                try:
                    row = json.loads(line)
                except ValueError as exc:
                    raise ConfigurationError(f"{path} line {number}: not JSON ({exc})") from None
                rows.append((f"{path} line {number}", row))
        return rows, str(path)
    if type(data).__module__.startswith("datasets.") and hasattr(data, "column_names"):
        table: Any = data
        return [(f"datasets.Dataset row {i}", dict(row)) for i, row in enumerate(table)], "datasets.Dataset"
    if isinstance(data, Sequence) and not isinstance(data, (str, bytes)):
        return [(f"item {i}", row) for i, row in enumerate(data)], f"list of {len(data)} rows"
    raise ConfigurationError(f"data must be a .jsonl file, a list of dicts or a datasets.Dataset for {what}, "
                             f"not {type(data).__name__}")


def _fields(where: str, row: object, *names: str) -> list[Any]:
    if not isinstance(row, dict) or any(n not in row for n in names):
        shown = ", ".join(f'"{n}"' for n in names)
        raise ConfigurationError(f"{where}: expected a JSON object with {shown}, got {str(row)[:80]!r}")
    return [row[n] for n in names]


def seq2seq_examples(data: object, tokenizer: Any, limits: ModelLimits) -> Examples:
    """``{"input": …, "target": …}`` rows (or ``input_ids`` with ``labels``) → encoder ids, mask and labels."""
    rows, source = read_rows(data, "a seq2seq model")
    made: list[dict[str, Any]] = []
    truncated = 0
    for where, row in rows:
        if isinstance(row, dict) and "input_ids" in row and "labels" in row:
            made.append({"input_ids": list(row["input_ids"]), "labels": list(row["labels"])})
            continue
        source_text, target = _fields(where, row, "input", "target")
        if not isinstance(source_text, str) or not isinstance(target, str):
            raise ConfigurationError(f'{where}: "input" and "target" must be strings')
        encoded = tokenizer(source_text, text_target=target)
        ids, labels = list(encoded["input_ids"]), list(encoded["labels"])
        if limits.max_length and (len(ids) > limits.max_length or len(labels) > limits.max_length):
            if limits.strict:
                raise ConfigurationError(f"strict mode: {where} is longer than the model's {limits.max_length} "
                                         "positions")
            ids, labels, truncated = ids[:limits.max_length], labels[:limits.max_length], truncated + 1
        made.append({"input_ids": ids, "attention_mask": [1] * len(ids), "labels": labels})
    if not made:
        raise ConfigurationError(f"{source} holds no rows; nothing to train on")
    return Examples(tuple(made), source, truncated)


def token_examples(data: object, tokenizer: Any, label2id: dict[str, int], limits: ModelLimits) -> Examples:
    """``{"tokens": [...], "tags": [...]}`` rows → ids with each word's label on its first sub-token
    (``run_ner.py: tokenize_and_align_labels``); tags are label names of ``config.label2id`` or ids."""
    rows, source = read_rows(data, "a token classifier")
    ids_of = {str(k): int(v) for k, v in label2id.items()}
    made: list[dict[str, Any]] = []
    truncated = 0
    for where, row in rows:
        tag_field = "ner_tags" if isinstance(row, dict) and "ner_tags" in row else "tags"
        words, tags = _fields(where, row, "tokens", tag_field)
        if not isinstance(words, list) or not isinstance(tags, list) or len(words) != len(tags):
            raise ConfigurationError(f'{where}: "tokens" and "{tag_field}" must be lists of the same length')
        labels = []
        for tag in tags:
            if isinstance(tag, int) and not isinstance(tag, bool) and 0 <= tag < len(ids_of):
                labels.append(tag)
            elif isinstance(tag, str) and tag in ids_of:
                labels.append(ids_of[tag])
            else:
                raise ConfigurationError(f"{where}: tag {tag!r} is not one of the model's labels "
                                         f"({', '.join(ids_of)}); set id2label/label2id in its config to yours")
        encoded = tokenizer(words, is_split_into_words=True, truncation=bool(limits.max_length),
                            max_length=limits.max_length)
        aligned, previous = [], None
        for word in encoded.word_ids():
            aligned.append(IGNORE if word is None or word == previous else labels[word])
            previous = word
        truncated += int(max((w for w in encoded.word_ids() if w is not None), default=-1) < len(words) - 1)
        made.append({"input_ids": list(encoded["input_ids"]), "attention_mask": list(encoded["attention_mask"]),
                     "labels": aligned})
    if not made:
        raise ConfigurationError(f"{source} holds no rows; nothing to train on")
    return Examples(tuple(made), source, truncated)


def vision_language_rows(data: object) -> Examples:
    """``{"images": [...], "text": …}`` or ``{"messages": [...]}`` rows, kept whole: the processor
    makes them into tensors batch by batch (:class:`VisionLanguageCollator`)."""
    rows, source = read_rows(data, "a vision-language model")
    made = []
    for where, row in rows:
        if isinstance(row, dict) and "messages" in row:
            made.append({"messages": row["messages"]})
            continue
        images, text = _fields(where, row, "images", "text")
        if not isinstance(text, str):
            raise ConfigurationError(f'{where}: "text" must be a string')
        made.append({"images": images if isinstance(images, list) else [images], "text": text})
    if not made:
        raise ConfigurationError(f"{source} holds no rows; nothing to train on")
    return Examples(tuple(made), source)


class VisionLanguageCollator:
    """A batch of rows through the model's processor; labels are the text's ids, with padding and
    image tokens ``-100`` (the loss is on what the model writes, not on its image placeholders)."""

    def __init__(self, processor: Any) -> None:
        self.processor = processor
        tokenizer = getattr(processor, "tokenizer", processor)
        self.ignored = {i for i in (getattr(processor, "image_token_id", None),
                                    getattr(tokenizer, "pad_token_id", None)) if isinstance(i, int)}

    def __call__(self, rows: list[dict[str, Any]]) -> Any:
        if all("messages" in r for r in rows):
            batch = self.processor.apply_chat_template([r["messages"] for r in rows], tokenize=True, return_dict=True,
                                                       return_tensors="pt", padding=True)
        elif any("messages" in r for r in rows):
            raise ConfigurationError("the data mixes chat rows ({'messages': …}) and image-text rows; use one kind")
        else:
            batch = self.processor(text=[r["text"] for r in rows], images=[r["images"] for r in rows],
                                   return_tensors="pt", padding=True)
        labels = batch["input_ids"].clone()
        for token in self.ignored:
            labels[labels == token] = IGNORE
        if "attention_mask" in batch:
            labels[batch["attention_mask"] == 0] = IGNORE
        batch["labels"] = labels
        return batch


def language_model_linears(model: Any) -> list[str]:
    """The full names of the linear layers of a vision-language model's language model (its
    ``language_model`` submodule; the output head excluded), where LoRA goes."""
    import torch

    prefix = next((name for name, _ in model.named_modules() if name.split(".")[-1] == "language_model"), None)
    if prefix is None:
        raise ConfigurationError(f"{type(model).__name__} has no language_model submodule to put LoRA adapters on; "
                                 "pass a peft.LoraConfig with your target_modules")
    return [name for name, module in model.named_modules()
            if name.startswith(prefix + ".") and isinstance(module, torch.nn.Linear)]
