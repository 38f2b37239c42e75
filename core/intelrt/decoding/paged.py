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
  (a soft-capped layer, a layer with attention sinks and latent attention, which SDPA cannot
  express, are computed in tiles of queries instead).

Two layers' caches differ from the rest: attention sinks (GPT-OSS) join each softmax with one
logit per query head (``sinks``); multi-head latent attention (DeepSeek-V2/V3, ``latent.py``) stores
one shared head of ``[latent, rotated key]`` per token as the keys and nothing as the values, its
values being the keys' first ``latent_values`` features (``PagedCache(value_dim=0)``).
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from typing import Any

from .blocks import BlockPool

log = logging.getLogger(__name__)

PREFILL_SCORE_TILE = 1 << 22
"""A soft-capped layer's prefill computes at most this many scores (query x key x head) at once."""
PACK_KEYS = 16384
"""A packed prefill attends at most this many gathered keys at once (more chunks are attended in
several packs): its mask and gathered keys stay near what one chunk of a long prompt needs."""


class PagedCache:
    """Key and value blocks of every layer on ``device``, with their :class:`BlockPool`.

    ``head_dim`` numbers per head and token in the keys, ``value_dim`` in the values (``None``: as
    many; ``0``: latent attention, whose values are part of its keys and are not stored)."""

    def __init__(self, layers: int, kv_heads: int, head_dim: int, dtype: Any, device: Any, blocks: int,
                 block_size: int, prefix_caching: bool = True, value_dim: int | None = None) -> None:
        import torch

        from . import cache_write  # noqa: F401 - registers intelrt::write_cache, which write() calls when compiled

        value_dim = head_dim if value_dim is None else value_dim
        self.keys = [torch.zeros((blocks, block_size, kv_heads, head_dim), dtype=dtype, device=device)
                     for _ in range(layers)]
        self.values = [torch.zeros((blocks, block_size, kv_heads, value_dim), dtype=dtype, device=device)
                       for _ in range(layers)]
        self.pool = BlockPool(blocks, block_size, prefix_caching)
        self.block_size, self.kv_heads, self.head_dim, self.value_dim = block_size, kv_heads, head_dim, value_dim
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
    """Store ``states`` (tokens, heads, dim) at flat ``slots`` (tokens,) of ``pool``; in a step torch
    compiles, through ``intelrt::write_cache`` (``cache_write.py``: so that the compiler writes the
    pool in place instead of copying it whole)."""
    import torch

    from .cache_write import store, write_cache

    (write_cache if torch.compiler.is_compiling() else store)(pool, slots, states)


def gather(pool: Any, table: Any) -> Any:
    """The context of each row of ``table`` (rows, width): (rows, heads, width * block_size, dim)."""
    rows, width = table.shape
    context = pool[table.reshape(-1)].view(rows, width * pool.shape[1], pool.shape[2], pool.shape[3])
    return context.transpose(1, 2)


def _soft_cap(x: Any, cap: float | None) -> Any:
    import torch

    return x if cap is None else torch.tanh(x / cap) * cap


def attend(q: Any, keys: Any, values: Any, allowed: Any, scaling: float, softcap: float | None = None,
           sinks: Any = None) -> Any:
    """Grouped-query attention of ``q`` (rows, q_heads, T, D) over ``keys`` (rows, kv_heads, L, D)
    and ``values`` (rows, kv_heads, L, Dv), ``allowed`` (rows, T, L) bool: each key/value head serves
    its group of query heads directly, with no expanded K or V. Returns (rows, T, q_heads * Dv).
    ``softcap``: the scores are soft-capped before the mask (Gemma-2). ``sinks`` (q_heads,): one
    logit per query head that joins the softmax and is dropped after it, the softmax in the scores'
    dtype after subtracting the row's largest logit (GPT-OSS's ``eager_attention_forward``).
    Materialises the scores: for decode steps (T = 1) and tiles of a prefill SDPA cannot express."""
    import torch

    rows, q_heads, steps, dim = q.shape
    kv_heads, length = keys.shape[1], keys.shape[2]
    groups = q_heads // kv_heads
    grouped = q.reshape(rows, kv_heads, groups * steps, dim)
    scores = _soft_cap(torch.matmul(grouped, keys.transpose(-1, -2).to(q.dtype)) * scaling, softcap)
    mask = allowed[:, None, None].expand(rows, 1, groups, steps, length).reshape(rows, 1, groups * steps, length)
    scores = scores.masked_fill(~mask, float("-inf"))
    if sinks is None:
        weights = torch.softmax(scores, dim=-1, dtype=torch.float32).to(q.dtype)
    else:
        sink = sinks.to(scores.dtype).view(1, kv_heads, groups, 1, 1).expand(rows, kv_heads, groups, steps, 1)
        combined = torch.cat([scores, sink.reshape(rows, kv_heads, groups * steps, 1)], dim=-1)
        combined = combined - combined.max(dim=-1, keepdim=True).values
        weights = torch.softmax(combined, dim=-1, dtype=combined.dtype)[..., :-1].to(q.dtype)
    out = torch.matmul(weights, values.to(q.dtype))  # (rows, kv_heads, groups * T, Dv)
    value_dim = values.shape[-1]
    return out.reshape(rows, q_heads, steps, value_dim).transpose(1, 2).reshape(rows, steps, q_heads * value_dim)


def _contexts(k_pool: Any, v_pool: Any, table: Any, latent_values: int | None) -> tuple[Any, Any]:
    """Each row's keys and values gathered through ``table`` (rows, heads, width * block_size, ·);
    with ``latent_values``, the values are the keys' first that many features (nothing gathered twice)."""
    keys = gather(k_pool, table)
    return keys, (gather(v_pool, table) if latent_values is None else keys[..., :latent_values])


def decode_attention(q: Any, k_pool: Any, v_pool: Any, table: Any, positions: Any, scaling: float,
                     window: int | None, softcap: float | None, sinks: Any = None,
                     latent_values: int | None = None) -> Any:
    """One new token per row: ``q`` (rows, q_heads, 1, D) at ``positions`` (rows, 1) over positions
    ``0 .. position`` of each row, read through the first ``table.shape[1]`` blocks of its table
    (the new token's key and value already written). Returns (rows, 1, q_heads * Dv).
    ``sinks``, ``latent_values``: as ``attend`` and the module's docstring say."""
    import torch

    keys, values = _contexts(k_pool, v_pool, table, latent_values)
    slot = torch.arange(keys.shape[2], device=q.device)[None, :]
    allowed = slot <= positions
    if window is not None:
        allowed = allowed & (slot > positions - window)
    return attend(q, keys, values, allowed[:, None, :], scaling, softcap, sinks)


def materialised(softcap: float | None, sinks: Any, latent_values: int | None) -> bool:
    """A prefill attention SDPA cannot express: soft-capped scores, attention sinks, or latent
    attention's one shared head whose values are part of its keys (expanded per query head for SDPA,
    the cache would be copied once per head)."""
    return softcap is not None or sinks is not None or latent_values is not None


def prefill_attention(q: Any, k_pool: Any, v_pool: Any, table: Any, positions: Any, context: int, scaling: float,
                      window: int | None, softcap: float | None, sinks: Any = None,
                      latent_values: int | None = None) -> Any:
    """A chunk of ``T`` tokens of one request: ``q`` (1, q_heads, T, D) at ``positions`` (T,) over
    the request's first ``context`` tokens (its blocks ``table``, (1, width); the chunk's keys
    already written). Returns (1, T, q_heads * Dv). ``sinks``, ``latent_values``: as ``attend`` and
    the module's docstring say."""
    import torch

    _, q_heads, steps, dim = q.shape
    blocks = -(-context // k_pool.shape[1])
    keys, values = _contexts(k_pool, v_pool, table[:, :blocks], latent_values)
    keys, values = keys[:, :, :context].to(q.dtype), values[:, :, :context].to(q.dtype)
    kv_heads = keys.shape[1]
    groups = q_heads // kv_heads
    key_positions = torch.arange(context, device=q.device)[None, :]
    if materialised(softcap, sinks, latent_values):
        out = []
        tile = max(1, PREFILL_SCORE_TILE // max(1, q_heads * context))
        for start in range(0, steps, tile):
            rows = positions[start:start + tile, None]
            allowed = key_positions <= rows
            if window is not None:
                allowed = allowed & (key_positions > rows - window)
            out.append(attend(q[:, :, start:start + tile], keys, values, allowed[None], scaling, softcap, sinks))
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


_VARLEN_REFUSED: list[str] = []
"""Why this process's ``varlen_attn`` refused paged keys once (it is not asked again)."""


def leading_single_tokens(segments: Sequence[Any]) -> int:
    """How many segments at the start hold one token each (a mixed step's decoding rows)."""
    count = 0
    for seg in segments:
        if seg.end - seg.start != 1:
            break
        count += 1
    return count


def singles_table(segments: Sequence[Any], block_size: int) -> Any:
    """One block table (rows, blocks) of one-token ``segments``, as wide as the longest context needs."""
    import torch

    blocks = max(-(-seg.context // block_size) for seg in segments)
    return torch.cat([seg.table[:, :blocks] for seg in segments])


def varlen_paged_attention() -> Any:
    """``torch.nn.attention.varlen.varlen_attn`` when this torch has it with paged keys and values
    (``block_table``: FlashAttention reads each request's blocks itself, nothing gathered) and it
    has not refused them in this process, else ``None``."""
    import inspect

    if _VARLEN_REFUSED:
        return None

    try:
        from torch.nn.attention.varlen import varlen_attn
    except ImportError:
        return None
    return varlen_attn if "block_table" in inspect.signature(varlen_attn).parameters else None


class PackedPrefill:
    """The attention of one packed prefill — several requests' prompt chunks end to end — planned
    once per pass and applied per layer.

    ``segments`` (start, end, table, context) as ``compact.Segment``; ``positions`` (tokens,) the
    chunks' positions. Three ways, the first the device allows:

    * ``varlen``: FlashAttention's variable-length kernel over the paged cache
      (``torch.nn.attention.varlen.varlen_attn`` with ``block_table``, CUDA, half precision): one
      call per layer for every chunk, each query seeing its request's blocks up to its position
      (causal, aligned to the context's end), nothing gathered — vLLM's prefill path
      (``flash_attn_varlen_func`` with a block table);
    * ``packed``: the chunks' contexts gathered once per layer into one key/value sequence per
      *pack* (chunks whose contexts hold at most ``pack_keys`` keys together), and one
      ``scaled_dot_product_attention`` per pack with a mask that lets each query see its own
      request's keys up to its position (a fused kernel, no score matrix materialised);
    * ``each``: one ``prefill_attention`` per chunk (the CPU, whose SDPA gains nothing from packing;
      and the layers SDPA cannot express: ``materialised``).

    ``varlen`` and ``packed`` say what the device allows (``Backend.varlen_attention``, and
    ``Backend.computes_on_host`` for the CPU, which does not pack).
    """

    def __init__(self, segments: Any, positions: Any, block_size: int, device: Any, dtype: Any,
                 packed: bool = True, pack_keys: int = PACK_KEYS, unified: bool = False,
                 tables: Any = None, varlen: bool = False) -> None:
        import torch

        self.segments, self.positions, self.pack_keys = segments, positions, pack_keys
        self.unified: Any = None
        """``unified_attention.StepQueries`` of the ``unified`` way."""
        if unified:
            self._plan_unified(tables, device)
        self.varlen = varlen_paged_attention() if (self.unified is None and varlen
                                                   and dtype in (torch.float16, torch.bfloat16)) else None
        self.packed = packed and len(segments) > 1
        self.packs: list[tuple[int, int, Any, Any, Any]] = []
        self._masks: dict[tuple[int, int | None], Any] = {}
        if self.varlen is not None:
            self.cu_seq_q = torch.tensor([0, *[seg.end for seg in segments]], dtype=torch.int32).to(device)
            self.seqused_k = torch.tensor([seg.context for seg in segments], dtype=torch.int32).to(device)
            width = max(-(-seg.context // block_size) for seg in segments)
            self.block_table = torch.cat([seg.table[:, :width] for seg in segments]).to(torch.int32)
            self.max_q = max(seg.end - seg.start for seg in segments)
            self.max_k = max(seg.context for seg in segments)
        if self.packed and self.unified is None:
            self._plan_packed(block_size, device)

    def _plan_unified(self, tables: Any, device: Any) -> None:
        """The ``unified`` way's step metadata, made once for every layer: where each request's
        tokens start, its context and its blocks (``unified_attention.StepQueries``)."""
        import torch

        from .unified_attention import StepQueries

        segments = self.segments
        if tables is None:
            tables = torch.cat([seg.table for seg in segments])
        starts = torch.tensor([0, *[seg.end for seg in segments]], dtype=torch.int32).to(device, non_blocking=True)
        lengths = torch.tensor([seg.context for seg in segments], dtype=torch.int32).to(device, non_blocking=True)
        counts = {seg.end - seg.start == 1 for seg in segments}
        self.unified = StepQueries(starts, lengths, tables, segments[-1].end, mixed=len(counts) > 1,
                                   single=counts == {True})

    def _plan_packed(self, block_size: int, device: Any) -> None:
        """The ``packed`` way's packs: consecutive chunks whose contexts together hold at most
        ``pack_keys`` keys (a chunk of a longer context is a pack of its own), each with its
        gathered contexts' slots, the positions of those keys and which query sees which key's
        request."""
        import torch

        self.packed = True
        group: list[Any] = []
        for seg in [*self.segments, None]:
            if group and (seg is None or sum(g.context for g in group) + seg.context > self.pack_keys):
                slots, key_positions, key_owner, query_owner = [], [], [], []
                for index, member in enumerate(group):
                    blocks = -(-member.context // block_size)
                    context = torch.arange(member.context, device=device)
                    table = member.table[0, :blocks].to(device)
                    slots.append(table[context // block_size] * block_size + context % block_size)
                    key_positions.append(context)
                    key_owner.append(torch.full((member.context,), index, device=device))
                    query_owner.append(torch.full((member.end - member.start,), index, device=device))
                same = torch.cat(query_owner)[:, None] == torch.cat(key_owner)[None, :]
                self.packs.append((group[0].start, group[-1].end, torch.cat(slots), torch.cat(key_positions), same))
                group = []
            if seg is not None:
                group.append(seg)

    def _mask(self, pack: int, window: int | None) -> Any:
        mask = self._masks.get((pack, window))
        if mask is None:
            start, end, _, key_positions, same = self.packs[pack]
            query = self.positions[start:end, None]
            mask = same & (key_positions[None, :] <= query)
            if window is not None:
                mask = mask & (key_positions[None, :] > query - window)
            self._masks[pack, window] = mask
        return mask

    def attend(self, q: Any, k_pool: Any, v_pool: Any, scaling: float, window: int | None,
               softcap: float | None, sinks: Any = None, latent_values: int | None = None) -> Any:
        """Attention of ``q`` (1, q_heads, tokens, D), the chunks' keys and values already written
        to the pools; (1, tokens, q_heads * Dv). ``sinks``, ``latent_values``: as ``attend`` and the
        module's docstring say."""
        import torch

        _, q_heads, tokens, dim = q.shape
        fused = not materialised(softcap, sinks, latent_values)
        if self.unified is not None and latent_values is None:
            out = self.unified.attend(q[0].transpose(0, 1), k_pool, v_pool, scaling, window or 0, softcap or 0.0, sinks)
            return out.reshape(1, tokens, q_heads * dim)
        if self.varlen is not None and window is None and fused:
            try:
                out = self.varlen(q[0].transpose(0, 1), k_pool, v_pool, self.cu_seq_q, None, self.max_q,
                                  self.max_k, scale=scaling, window_size=(-1, 0), enable_gqa=True,
                                  seqused_k=self.seqused_k, block_table=self.block_table)
                return out.reshape(1, tokens, q_heads * dim)
            except RuntimeError as exc:  # e.g. a block size its kernel does not take: gathered instead
                if "out of memory" in str(exc).lower():
                    raise
                _VARLEN_REFUSED.append(f"{type(exc).__name__}: {str(exc)[:200]}")
                log.warning("intelrt: varlen_attn refused the paged cache (%s); prompts are attended through "
                            "gathered blocks from now on", _VARLEN_REFUSED[0])
                self.varlen = None
                if not self.packed:
                    self._plan_packed(k_pool.shape[1], q.device)
        if self.packed and fused:
            if not self.packs:
                self._plan_packed(k_pool.shape[1], q.device)
            out = []
            for index, (start, end, slots, _, _) in enumerate(self.packs):
                keys = flat(k_pool).index_select(0, slots).to(q.dtype)  # (keys, kv_heads, D)
                values = flat(v_pool).index_select(0, slots).to(q.dtype)
                groups = q_heads // keys.shape[1]
                keys = keys.transpose(0, 1).repeat_interleave(groups, dim=0)[None]
                values = values.transpose(0, 1).repeat_interleave(groups, dim=0)[None]
                out.append(torch.nn.functional.scaled_dot_product_attention(
                    q[:, :, start:end], keys, values, attn_mask=self._mask(index, window)[None, None], scale=scaling))
            attended = out[0] if len(out) == 1 else torch.cat(out, dim=2)
            return attended.transpose(1, 2).reshape(1, tokens, q_heads * dim)
        parts = []
        singles = leading_single_tokens(self.segments)
        if singles > 1:  # decoding rows of a mixed step: one batched decode attention for all of them
            parts.append(self._attend_singles(q, singles, k_pool, v_pool, scaling, window, softcap, sinks,
                                              latent_values))
        parts += [prefill_attention(q[:, :, seg.start:seg.end], k_pool, v_pool, seg.table,
                                    self.positions[seg.start:seg.end], seg.context, scaling, window, softcap, sinks,
                                    latent_values)
                  for seg in self.segments[singles if singles > 1 else 0:]]
        return parts[0] if len(parts) == 1 else torch.cat(parts, dim=1)

    def _attend_singles(self, q: Any, count: int, k_pool: Any, v_pool: Any, scaling: float, window: int | None,
                        softcap: float | None, sinks: Any, latent_values: int | None) -> Any:
        """The first ``count`` one-token segments as one :func:`decode_attention` (1, count, q_heads * Dv)."""
        table = singles_table(self.segments[:count], k_pool.shape[1])
        queries = q[0, :, :count].transpose(0, 1)[:, :, None]  # (count, q_heads, 1, D)
        out = decode_attention(queries, k_pool, v_pool, table, self.positions[:count, None], scaling, window, softcap,
                               sinks, latent_values)
        return out.reshape(1, count, -1)
