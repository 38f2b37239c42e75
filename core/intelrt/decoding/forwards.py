"""The forward a decode session runs per token, with the KV cache it owns.

``ModelForward``: the model's own forward over a transformers ``StaticCache`` (any decoder-only
model). ``CompactForward``: intelrt's compact step (``compact.py``) over its own per-layer cache.
Both give ``logits(input_ids, mask, positions, slots)`` for the last position of each row, and
name their cache tensors (``kv``) so the in-flight batch (``inflight.py``) can move rows in them.
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

        self.cache: Any = StaticCache(config=model.config, max_cache_len=length)
        self.model, self.forward = model, forward
        self.cache_kwarg, self.keep_logits = cache_kwarg, keep_logits

    def reset(self) -> None:
        self.cache.reset()

    def kv(self) -> list[Any]:
        """Every cache tensor, (rows, heads, length, head_dim) with slots on dim 2, once allocated
        (transformers allocates them at the first pass)."""
        return [t for layer in self.cache.layers if getattr(layer, "is_initialized", False)
                for t in (layer.keys, layer.values)]

    def inflight_blocker(self) -> str | None:
        """Why rows cannot join and leave this cache between steps, or ``None``: each layer must
        be a plain full-attention ``StaticLayer`` whose next slot is the device counter
        ``cumulative_length`` (a sliding-window layer rolls its slots instead)."""
        from transformers.cache_utils import StaticLayer

        for layer in self.cache.layers:
            if type(layer) is not StaticLayer or not hasattr(layer.cumulative_length, "fill_"):
                return (f"the model's cache has {type(layer).__name__} layers; in-flight batching needs "
                        "full-attention StaticLayer layers with a slot counter")
        return None

    def set_slot(self, slot: int) -> None:
        """Make ``slot`` the cache slot the next token is written to (every layer's counter)."""
        for layer in self.cache.layers:
            layer.cumulative_length.fill_(slot)

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
                 prompt: Callable[..., Any], compiled: bool, fused_attention: bool,
                 cache: tuple[list[Any], list[Any]] | None = None) -> None:
        self.compact, self.forward, self.prompt = compact, forward, prompt
        # ``cache``: the first ``rows`` rows of a larger cache (the in-flight batch's row buckets).
        self.keys, self.values = cache if cache is not None else compact.new_cache(rows, length, device)
        self.gemv = compiled and rows <= compact.tuning.gemv_max_rows
        self.fused_attention = fused_attention and compact.attention_kernel_fits()

    def reset(self) -> None:
        import torch

        torch._foreach_zero_([*self.keys, *self.values])  # a few launches, not one per cache

    def kv(self) -> list[Any]:
        return [*self.keys, *self.values]

    def inflight_blocker(self) -> str | None:
        return None

    def set_slot(self, slot: int) -> None:
        """Nothing to do: the compact step reads its slot from the session's ``slot`` buffer."""

    def prefill(self, input_ids: Any, mask: Any, positions: Any, slots: Any) -> Any:
        return self.prompt(input_ids, positions, slots, mask, self.keys, self.values)

    def logits(self, input_ids: Any, mask: Any, positions: Any, slots: Any) -> Any:
        return self.forward(input_ids, positions, slots, mask, self.keys, self.values, self.gemv,
                            self.fused_attention)
