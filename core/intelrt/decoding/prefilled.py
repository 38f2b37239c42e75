"""Prompts whose keys and values the engine is handed instead of computing them.

A vision-language model's prefill merges image features into the prompt's embeddings — the model's
own code, which the engine's step (a language model's) does not run. transformers' ``generate``
computes that prefill (``decoding/vision_language.py``); the engine takes its keys and values, as a
cached prefix, and its next-token logits, and every later step is the language model's. The
engine writes the keys and values into a request's blocks when it is admitted — again after a
preemption, so a recomputed request never needs the images — and samples its first token from the
logits.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from . import paged
from .paged import PagedCache


@dataclass(frozen=True, eq=False)
class PrefilledPrompt:
    """The keys and values of every prompt token, per layer, and the logits after the last one.

    ``keys[i]``, ``values[i]``: layer ``i``'s, ``(prompt tokens, kv_heads, head_dim)`` on the
    engine's device, keys rotated as the model rotates them (what a transformers ``Cache`` holds).
    ``logits``: ``(vocab,)``, the model's raw next-token logits. ``digest``: identifies what the
    prefill read (token ids, images …): the engine's prefix cache chains its blocks' digests from
    it, so two prompts of the same token ids but other images never share blocks."""

    keys: Sequence[Any]
    values: Sequence[Any]
    logits: Any
    digest: bytes

    @property
    def tokens(self) -> int:
        return int(self.keys[0].shape[0])

    def mismatch(self, cache: PagedCache, prompt_tokens: int) -> str | None:
        """Why this prefill cannot be written into ``cache`` for a prompt of ``prompt_tokens``."""
        layers = len(cache.keys)
        if len(self.keys) != layers or len(self.values) != layers:
            return f"the prefill holds {len(self.keys)} layers' keys; the engine's cache has {layers} layers"
        if self.tokens != prompt_tokens:
            return f"the prefill holds {self.tokens} tokens' keys for a prompt of {prompt_tokens} tokens"
        for i, (k, v) in enumerate(zip(self.keys, self.values, strict=True)):
            want_k = (prompt_tokens, cache.kv_heads, cache.head_dim)
            want_v = (prompt_tokens, cache.kv_heads, cache.value_dim)
            if tuple(k.shape) != want_k or tuple(v.shape) != want_v:
                return (f"layer {i}'s prefill keys {tuple(k.shape)} and values {tuple(v.shape)} are not the "
                        f"engine cache's {want_k} and {want_v}")
        return None

    def write(self, cache: PagedCache, slots: Any, start: int, end: int) -> None:
        """Store the keys and values of prompt positions ``start .. end - 1`` at ``slots``."""
        for pool, states in zip(cache.keys, self.keys, strict=True):
            paged.write(pool, slots, states[start:end])
        for pool, states in zip(cache.values, self.values, strict=True):
            paged.write(pool, slots, states[start:end])
