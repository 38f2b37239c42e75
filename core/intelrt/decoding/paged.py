"""The paged KV cache on the device, and attention over it in torch operations.

One key tensor and one value tensor per layer, each ``(blocks, block_size, kv_heads, head_dim)``
(vLLM's layout for FlashAttention, ``vllm/v1/attention/backends/flash_attn.py``): token slot ``s``
of the flat view is slot ``s % block_size`` of block ``s // block_size``. A request's *block
table* lists its blocks in order; its token at position ``p`` lives at flat slot
``table[p // block_size] * block_size + p % block_size``. Block ids and reference counts are
``blocks.py``'s; this module holds the tensors and reads and writes them.

Attention here is for devices (or layers) without the one-kernel decode attention
(``triton_attention.py``, which reads through the block table itself):

* :func:`decode_attention`: one new token per row: the row's context gathered from its blocks
  (``width`` blocks of the table), masked to the row's length, attended with grouped-query heads
  sharing their key/value head (no expansion);
* :func:`prefill_attention`: a chunk of one request's prompt: its context gathered, then
  ``scaled_dot_product_attention`` with the causal mask of the chunk's positions — the fused,
  memory-efficient kernels where the device has them, so full scores are never materialised
  (a soft-capped layer, which SDPA cannot express, is computed in tiles of queries instead).
"""

from __future__ import annotations

from typing import Any

from .blocks import BlockPool

PREFILL_SCORE_TILE = 1 << 22
"""A soft-capped layer's prefill computes at most this many scores (query x key x head) at once."""


class PagedCache:
    """Key and value blocks of every layer on ``device``, with their :class:`BlockPool`."""

    def __init__(self, layers: int, kv_heads: int, head_dim: int, dtype: Any, device: Any, blocks: int,
                 block_size: int, prefix_caching: bool = True) -> None:
        import torch

        shape = (blocks, block_size, kv_heads, head_dim)
        self.keys = [torch.zeros(shape, dtype=dtype, device=device) for _ in range(layers)]
        self.values = [torch.zeros(shape, dtype=dtype, device=device) for _ in range(layers)]
        self.pool = BlockPool(blocks, block_size, prefix_caching)
        self.block_size, self.kv_heads, self.head_dim = block_size, kv_heads, head_dim
        self.dtype, self.device = dtype, device

    @property
    def bytes(self) -> int:
        return sum(t.numel() * t.element_size() for t in (*self.keys, *self.values))

    def tensors(self) -> list[Any]:
        return [*self.keys, *self.values]


def flat(pool: Any) -> Any:
    """``pool`` (blocks, block_size, heads, dim) as (slots, heads, dim)."""
    return pool.view(-1, pool.shape[2], pool.shape[3])


def write(pool: Any, slots: Any, states: Any) -> None:
    """Store ``states`` (tokens, heads, dim) at flat ``slots`` (tokens,) of ``pool``."""
    flat(pool).index_copy_(0, slots, states.to(pool.dtype))


def gather(pool: Any, table: Any) -> Any:
    """The context of each row of ``table`` (rows, width): (rows, heads, width * block_size, dim)."""
    rows, width = table.shape
    context = pool[table.reshape(-1)].view(rows, width * pool.shape[1], pool.shape[2], pool.shape[3])
    return context.transpose(1, 2)


def _soft_cap(x: Any, cap: float | None) -> Any:
    import torch

    return x if cap is None else torch.tanh(x / cap) * cap


def attend(q: Any, keys: Any, values: Any, allowed: Any, scaling: float, softcap: float | None = None) -> Any:
    """Grouped-query attention of ``q`` (rows, q_heads, T, D) over ``keys``/``values``
    (rows, kv_heads, L, D), ``allowed`` (rows, T, L) bool: each key/value head serves its group of
    query heads directly, with no expanded K or V. Returns (rows, T, q_heads * D). Materialises the
    scores: for decode steps (T = 1) and tiles of a soft-capped prefill."""
    import torch

    rows, q_heads, steps, dim = q.shape
    kv_heads, length = keys.shape[1], keys.shape[2]
    groups = q_heads // kv_heads
    grouped = q.reshape(rows, kv_heads, groups * steps, dim)
    scores = _soft_cap(torch.matmul(grouped, keys.transpose(-1, -2).to(q.dtype)) * scaling, softcap)
    mask = allowed[:, None, None].expand(rows, 1, groups, steps, length).reshape(rows, 1, groups * steps, length)
    scores = scores.masked_fill(~mask, float("-inf"))
    weights = torch.softmax(scores, dim=-1, dtype=torch.float32).to(q.dtype)
    out = torch.matmul(weights, values.to(q.dtype))  # (rows, kv_heads, groups * T, D)
    return out.reshape(rows, q_heads, steps, dim).transpose(1, 2).reshape(rows, steps, q_heads * dim)


def decode_attention(q: Any, k_pool: Any, v_pool: Any, table: Any, positions: Any, scaling: float,
                     window: int | None, softcap: float | None) -> Any:
    """One new token per row: ``q`` (rows, q_heads, 1, D) at ``positions`` (rows, 1) over positions
    ``0 .. position`` of each row, read through the first ``table.shape[1]`` blocks of its table
    (the new token's key and value already written). Returns (rows, 1, q_heads * D)."""
    import torch

    keys, values = gather(k_pool, table), gather(v_pool, table)
    slot = torch.arange(keys.shape[2], device=q.device)[None, :]
    allowed = slot <= positions
    if window is not None:
        allowed = allowed & (slot > positions - window)
    return attend(q, keys, values, allowed[:, None, :], scaling, softcap)


def prefill_attention(q: Any, k_pool: Any, v_pool: Any, table: Any, positions: Any, context: int, scaling: float,
                      window: int | None, softcap: float | None) -> Any:
    """A chunk of ``T`` tokens of one request: ``q`` (1, q_heads, T, D) at ``positions`` (T,) over
    the request's first ``context`` tokens (its blocks ``table``, (1, width); the chunk's keys
    already written). Returns (1, T, q_heads * D)."""
    import torch

    _, q_heads, steps, dim = q.shape
    blocks = -(-context // k_pool.shape[1])
    keys = gather(k_pool, table[:, :blocks])[:, :, :context].to(q.dtype)
    values = gather(v_pool, table[:, :blocks])[:, :, :context].to(q.dtype)
    kv_heads = keys.shape[1]
    groups = q_heads // kv_heads
    key_positions = torch.arange(context, device=q.device)[None, :]
    if softcap is not None:
        out = []
        tile = max(1, PREFILL_SCORE_TILE // max(1, q_heads * context))
        for start in range(0, steps, tile):
            rows = positions[start:start + tile, None]
            allowed = key_positions <= rows
            if window is not None:
                allowed = allowed & (key_positions > rows - window)
            out.append(attend(q[:, :, start:start + tile], keys, values, allowed[None], scaling, softcap))
        return torch.cat(out, dim=1)
    # K and V repeated per query head (as transformers' sdpa_attention_forward does without enable_gqa):
    # every fused SDPA kernel takes that shape, with a mask or causal.
    keys, values = keys.repeat_interleave(groups, dim=1), values.repeat_interleave(groups, dim=1)
    if window is None and steps == context:
        attended = torch.nn.functional.scaled_dot_product_attention(q, keys, values, is_causal=True, scale=scaling)
    else:
        allowed = key_positions <= positions[:, None]
        if window is not None:
            allowed = allowed & (key_positions > positions[:, None] - window)
        attended = torch.nn.functional.scaled_dot_product_attention(q, keys, values, attn_mask=allowed[None, None],
                                                                    scale=scaling)
    return attended.transpose(1, 2).reshape(1, steps, q_heads * dim)
