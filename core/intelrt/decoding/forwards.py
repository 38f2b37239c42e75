"""The forward a decode session runs per token, with the KV cache it owns.

``ModelForward``: the model's own forward over a transformers ``StaticCache`` (any decoder-only
model). ``CompactForward``: intelrt's compact step (``compact.py``) over its own per-layer cache.
Both give ``logits(input_ids, mask, positions, slots)`` for the last position of each row.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from .compact import CompactModel


class ModelForward:
    """The model's forward (compiled or not) with a transformers ``StaticCache``."""

    def __init__(self, model: Any, rows: int, length: int, forward: Callable[..., Any], cache_kwarg: str,
                 keep_logits: bool) -> None:
        from transformers import StaticCache

        self.cache = StaticCache(config=model.config, max_cache_len=length)
        self.model, self.forward = model, forward
        self.cache_kwarg, self.keep_logits = cache_kwarg, keep_logits

    def reset(self) -> None:
        self.cache.reset()

    def _inputs(self, input_ids: Any, mask: Any, positions: Any) -> dict[str, Any]:
        inputs = {"input_ids": input_ids, "attention_mask": mask, "position_ids": positions,
                  self.cache_kwarg: self.cache, "use_cache": True}
        if self.keep_logits:
            inputs["logits_to_keep"] = 1
        return inputs

    def prefill(self, input_ids: Any, mask: Any, positions: Any, slots: Any) -> Any:
        """The prompt's pass: eager, with the prompt's part of the mask, as transformers' generate
        passes it (some models read the mask's length as the sequence's)."""
        prompt_mask = mask[:, :input_ids.shape[1]]
        return self.model(**self._inputs(input_ids, prompt_mask, positions)).logits[:, -1, :]

    def logits(self, input_ids: Any, mask: Any, positions: Any, slots: Any) -> Any:
        return self.forward(**self._inputs(input_ids, mask, positions)).logits[:, -1, :]


class CompactForward:
    """The compact step with its own cache; ``forward`` is ``compact`` itself or its compiled form,
    ``prompt`` is ``compact.prompt`` or its compiled form; ``fused_attention``: decode steps run the
    one-kernel attention (the plan's ``attention_kernel``, where the model fits the kernel)."""

    def __init__(self, compact: CompactModel, rows: int, length: int, device: Any, forward: Callable[..., Any],
                 prompt: Callable[..., Any], compiled: bool, fused_attention: bool) -> None:
        self.compact, self.forward, self.prompt = compact, forward, prompt
        self.keys, self.values = compact.new_cache(rows, length, device)
        self.gemv = compiled and rows <= compact.tuning.gemv_max_rows
        self.fused_attention = fused_attention and compact.attention_kernel_fits()

    def reset(self) -> None:
        import torch

        torch._foreach_zero_([*self.keys, *self.values])  # a few launches, not one per cache

    def prefill(self, input_ids: Any, mask: Any, positions: Any, slots: Any) -> Any:
        return self.prompt(input_ids, positions, slots, mask, self.keys, self.values)

    def logits(self, input_ids: Any, mask: Any, positions: Any, slots: Any) -> Any:
        return self.forward(input_ids, positions, slots, mask, self.keys, self.values, self.gemv,
                            self.fused_attention)
