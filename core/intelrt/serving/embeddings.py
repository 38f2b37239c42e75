"""``/v1/embeddings`` for a feature-extraction model: each input's last hidden states, mean-pooled
over its tokens (as :meth:`Loaded.embed` pools), unit length unless ``normalize: false`` (OpenAI's
embeddings are normalized; vLLM's embedding pooler normalizes by default), as floats or as
base64 of little-endian float32 (what the ``openai`` client asks for by default)."""

from __future__ import annotations

import base64
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from .errors import ApiError

if TYPE_CHECKING:
    from ..runtime.loaded import Loaded
    from .protocol import EmbeddingRequest


def input_ids(loaded: Loaded, body: EmbeddingRequest, context: int) -> list[list[int]]:
    """``body.input`` as token ids, each within ``context`` (truncated when asked)."""
    value = body.input
    if isinstance(value, str):
        items: list[Any] = [value]
    elif value and all(isinstance(t, int) for t in value):
        items = [value]
    else:
        items = list(value)
    ids = [list(item) if isinstance(item, list) else
           list(loaded.tokenizer(item, add_special_tokens=body.add_special_tokens)["input_ids"]) for item in items]
    vocabulary = loaded.model.get_input_embeddings().num_embeddings
    for row, item in enumerate(ids):
        bad = next((t for t in item if not 0 <= t < vocabulary), None)
        if bad is not None:
            raise ApiError(400, f"input[{row}]: token id {bad} is outside the model's vocabulary (0 .. "
                                f"{vocabulary - 1})", param="input")
    if body.truncate_prompt_tokens is not None:
        ids = [item[-body.truncate_prompt_tokens:] for item in ids]
    for row, item in enumerate(ids):
        if not item:
            raise ApiError(400, f"input[{row}] is empty after tokenization", param="input")
        if len(item) > context:
            raise ApiError(400, f"This model's maximum context length is {context} tokens; input[{row}] has "
                                f"{len(item)} (send truncate_prompt_tokens to keep the last ones)", param="input",
                           code="context_length_exceeded")
    return ids


def embed(loaded: Loaded, ids: Sequence[Sequence[int]], normalize: bool) -> list[list[float]]:
    """One vector per row of ``ids`` (a forward over them padded together)."""
    import torch

    model = loaded.model
    longest = max(len(row) for row in ids)
    pad = loaded.tokenizer.pad_token_id or 0
    tokens = torch.tensor([list(row) + [pad] * (longest - len(row)) for row in ids], device=model.device)
    mask = torch.tensor([[1] * len(row) + [0] * (longest - len(row)) for row in ids], device=model.device)
    with torch.inference_mode():
        hidden = model(input_ids=tokens, attention_mask=mask).last_hidden_state.float()
    weights = mask.unsqueeze(-1).to(hidden.dtype)
    pooled = (hidden * weights).sum(1) / weights.sum(1).clamp(min=1)
    if normalize:
        pooled = torch.nn.functional.normalize(pooled, dim=-1)
    return [[float(v) for v in row] for row in pooled.cpu()]


def encoded(vector: list[float], encoding: str) -> list[float] | str:
    if encoding == "float":
        return vector
    import struct

    return base64.b64encode(struct.pack(f"<{len(vector)}f", *vector)).decode("ascii")
