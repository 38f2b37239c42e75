"""Both sides of one comparison on the same tiny model: plain transformers, and intelrt.

Causal LMs: greedy, ``MAX_NEW_TOKENS`` new tokens, one prompt and a left-padded batch of three of
different lengths. Plain: ``from_pretrained`` + ``model.generate``; intelrt: ``intelrt.load`` +
``generate_ids`` (a list is padded by intelrt itself). Encoders: the tiny word-level tokenizer;
``classify`` compares predicted labels, ``embed`` mean-pooled last hidden states.
"""

from __future__ import annotations

import random
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from . import shrink

MAX_NEW_TOKENS = 8
PROMPT_LENGTHS = (5, 9, 3)
EMBED_ATOL = 1e-4
"""Mean-pooled embeddings agree within this (sdpa and eager attention differ by float rounding)."""
CLASSIFY_SKIP: dict[str, str] = {
    "layoutlmv2": "document model: needs bbox and image inputs (its visual backbone needs detectron2)",
    "layoutlmv3": "document model: needs bbox (and pixel) inputs",
    "lilt": "document model: needs bbox inputs sized to the layout embedding",
    "tapas": "table model: needs (batch, length, 7) token_type_ids from its table tokenizer",
}
"""Sequence-classification model types that are not text-only models."""


def architectures(kind: str) -> list[str]:
    """Every model type of transformers' auto mapping for ``kind``: causal LMs, sequence classifiers,
    and (``embed``) the base models of the text classifiers."""
    from transformers.models.auto import modeling_auto

    if kind == "causal":
        return list(modeling_auto.MODEL_FOR_CAUSAL_LM_MAPPING_NAMES)
    classifiers = list(modeling_auto.MODEL_FOR_SEQUENCE_CLASSIFICATION_MAPPING_NAMES)
    if kind == "classify":
        return classifiers
    causal = set(modeling_auto.MODEL_FOR_CAUSAL_LM_MAPPING_NAMES)
    # Encoders: text classifiers that are not decoder-only causal LMs, with a base model class.
    return [m for m in classifiers if m in modeling_auto.MODEL_MAPPING_NAMES and m not in causal]


FALLS_BACK: dict[str, str] = {
    "dory": "its attention writes a cache of other shape than its config says (index_copy_ size mismatch)",
    "gpt_neox_japanese": "its attention's key/value layout cannot be viewed as the paged cache's",
    "hrm_text": "its forward reads cache-layer attributes (supports_early_init) the paged cache's layers lack",
    "mimo_v2_flash": "its layers store different numbers of key/value heads (2 and 4), and the paged cache holds one shape",
    "mllama": "its forward reads the cache layers' keys (cross-attention states) itself",
}
"""Causal LMs whose planned fast loop (the model's own forward over the paged cache) fails at its
first call, so every call runs on ``generate`` — known defects of the plan, asserted exactly by
``test_model_zoo.py`` (a model that stops falling back, or starts, fails it) and marked in the
docs table."""


def skip_reason(kind: str, model_type: str) -> str | None:
    return shrink.SKIP.get(model_type) if kind == "causal" else CLASSIFY_SKIP.get(model_type)


def prompts() -> list[list[int]]:
    rng = random.Random(0)
    return [[rng.randrange(shrink.FIRST_PROMPT_ID, shrink.LAST_PROMPT_ID) for _ in range(n)] for n in PROMPT_LENGTHS]


def texts() -> list[str]:
    rng = random.Random(1)
    return [" ".join(f"w{rng.randrange(shrink.FIRST_PROMPT_ID, shrink.LAST_PROMPT_ID)}" for _ in range(n))
            for n in PROMPT_LENGTHS]


def until_eos(rows: list[list[int]], eos: int = shrink.EOS_ID) -> list[list[int]]:
    return [row[:row.index(eos) + 1] if eos in row else row for row in rows]


def left_pad(batch: Sequence[Sequence[int]], pad: int = shrink.GENERATION_PAD_ID) -> tuple[Any, Any]:
    import torch

    width = max(len(p) for p in batch)
    ids = torch.full((len(batch), width), pad, dtype=torch.long)
    mask = torch.zeros((len(batch), width), dtype=torch.long)
    for row, prompt in enumerate(batch):
        ids[row, width - len(prompt):] = torch.tensor(prompt)
        mask[row, width - len(prompt):] = 1
    return ids, mask


def plain_causal(directory: Path, batches: dict[str, list[list[int]]]) -> dict[str, list[list[int]]]:
    import torch
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(directory, dtype=torch.float32).eval()
    out = {}
    for name, batch in batches.items():
        ids, mask = left_pad(batch)
        with torch.inference_mode():
            result = model.generate(input_ids=ids, attention_mask=mask, do_sample=False,
                                    max_new_tokens=MAX_NEW_TOKENS, pad_token_id=shrink.GENERATION_PAD_ID)
        sequences = result.sequences if hasattr(result, "sequences") else result
        out[name] = until_eos(sequences[:, ids.shape[1]:].tolist())
    return out


def intelrt_causal(loaded: Any, batches: dict[str, list[list[int]]]) -> dict[str, tuple[list[list[int]], Any]]:
    """Per batch: the new tokens and ``last_generation`` (the path taken and why)."""
    out = {}
    for name, batch in batches.items():
        single = len(batch) == 1
        got = loaded.generate_ids(batch[0] if single else batch, max_new_tokens=MAX_NEW_TOKENS)
        out[name] = ([got] if single else got, loaded.last_generation)
    return out


def encoder_inputs(directory: Path) -> Any:
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(directory)
    return tokenizer(texts(), return_tensors="pt", padding=True, truncation=True)


def plain_encoder(directory: Path, head: str) -> Any:
    """``classify``: the predicted labels; ``embed``: mean-pooled last hidden states."""
    import torch
    from transformers import AutoModel, AutoModelForSequenceClassification

    auto = AutoModelForSequenceClassification if head == "classify" else AutoModel
    model = auto.from_pretrained(directory, dtype=torch.float32).eval()
    inputs = encoder_inputs(directory)
    with torch.inference_mode():
        output = model(**inputs)
    if head == "classify":
        labels = model.config.id2label
        return [labels.get(int(i), str(int(i))) for i in output.logits.argmax(-1)]
    hidden = output.last_hidden_state
    mask = inputs["attention_mask"].unsqueeze(-1).to(hidden.dtype)
    return (hidden * mask).sum(1) / mask.sum(1).clamp(min=1)
