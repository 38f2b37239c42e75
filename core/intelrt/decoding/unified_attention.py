"""One Triton kernel for the attention of an engine step: queries of any length against the paged cache.

A step's tokens are flat: each decoding row's one new token, then prompt chunks of any length
(``runner``: one forward over them all). Per layer, after the step's keys and values are written
to the cache, this kernel attends every query over its own request's context, read through the
request's block table (``paged.py``: blocks of ``block_size`` slots). The design is vLLM's
device-neutral ``triton_unified_attention`` (``vllm/attention/ops/triton_unified_attention.py``,
``kernel_unified_attention_2d``; vLLM runs it on NVIDIA, AMD and Intel GPUs), written here for
intelrt's cache layout:

* a program per (block of ``BLOCK_Q`` query tokens of one request, key/value head): its rows are
  the block's tokens times the head's group of query heads (grouped-query attention reads each
  key and value once for the group, nothing expanded);
* requests are found by *query block*: request ``s`` owns blocks from ``cu_q[s] // BLOCK_Q + s``
  on (at least as many as its tokens need, so the grid — ``tokens // BLOCK_Q + requests`` — is
  fixed by the step's size, not by its contents; programs past a request's tokens return). The
  block → request map is computed once per step (:func:`query_blocks`), not per layer;
* query token ``i`` of a request whose chunk has ``q`` tokens and whose context (cache after the
  chunk's keys are written) has ``n`` is at position ``n - q + i`` and sees positions up to its
  own (causal, aligned to the context's end), or the last ``window`` of them (a sliding-window
  layer); online softmax over tiles of ``TILE`` positions; soft-capped scores (Gemma-2) and one
  sink logit per query head joining the softmax (GPT-OSS) where the layer has them.

Registered as the custom op ``intelrt::unified_attention`` (``torch.library.custom_op``), so a
compiled step calls it as one opaque kernel and a device graph records its launch. Importing this
module imports torch and triton.
"""

from __future__ import annotations

import os
from typing import Any

import torch
import triton
import triton.language as tl

from intelrt.decoding.triton_attention import _soft_capped, _softmax_values_update

MIN_DOT_ROWS = 16
"""A program's rows (tokens x grouped heads) are at least this many: tensor-core dots need 16."""
PREFILL_ROWS = 128
"""A program's rows for the requests that bring several tokens (prompt chunks): more query tokens
share each key tile read."""
TILE = 64
"""Cache positions per loop iteration under the interpreter (autotuned on a device: ``CONFIGS``)."""
ALL, SINGLE, SEVERAL = 0, 1, 2
"""Which requests one launch attends: all, those with one token in the step (decoding rows: few rows
per program, as their keys are read once whatever the rows), or those with several (prompt chunks:
``PREFILL_ROWS`` rows per program). A step with both launches twice, each program of the other kind
returning at once, so that neither kind runs in the other's shape."""


def block_q(group: int, longest_query: int) -> int:
    """Query tokens per program: ``PREFILL_ROWS`` rows shared by the group's heads when a request
    brings more than one token, else as few rows as a tensor-core dot takes."""
    rows = PREFILL_ROWS if longest_query > 1 else MIN_DOT_ROWS
    return max(1, max(rows, triton.next_power_of_2(group)) // group)


def query_blocks(cu_q: torch.Tensor, tokens: int, per_block: int) -> torch.Tensor:
    """For each program's query block (``tokens // per_block + requests`` of them), the request it
    belongs to (the last ``s`` with ``cu_q[s] // per_block + s <= block``): device work only."""
    requests = cu_q.shape[0] - 1
    starts = torch.div(cu_q[:-1], per_block, rounding_mode="floor") + torch.arange(requests, device=cu_q.device,
                                                                                     dtype=cu_q.dtype)
    blocks = torch.arange(tokens // per_block + requests, device=cu_q.device, dtype=cu_q.dtype)
    return (torch.searchsorted(starts, blocks, right=True) - 1).to(torch.int32)


LOG2E: tl.constexpr = tl.constexpr(1.4426950408889634)
"""log2(e): scores are kept in base-2 units, so each softmax weight is one ``exp2``."""


@triton.jit
def _attend_tile(q, best, total, acc, start, oldest, newest, position, k_cache_ptr, v_cache_ptr, table,  # type: ignore[no-untyped-def]
                 kv_head, stride_slot, max_context, scaling, softcap, window, d, D: tl.constexpr,
                 TILE: tl.constexpr, BS: tl.constexpr, SOFTCAP: tl.constexpr, PRECISION: tl.constexpr,
                 EARLY_V: tl.constexpr, MASKED: tl.constexpr, WINDOW: tl.constexpr):
    """Online-softmax update of the program's rows with cache positions ``start .. start + TILE``,
    each position's key and value read from the slot its block table gives (``EARLY_V``: the values
    loaded beside the keys, before the scores). ``MASKED``: only the positions in ``oldest ..
    newest`` and each row's causal (and, with ``WINDOW``, window) limits count; without it the
    caller knows every row sees the whole tile (a tile before the block's first query), and nothing
    is masked."""
    j = start + tl.arange(0, TILE)
    if MASKED:
        inside = (j < newest) & (j >= oldest) & (j < max_context)
        slot = (tl.load(table + j // BS, mask=inside, other=0) * BS + j % BS).to(tl.int64)
        offsets = slot[:, None] * stride_slot + kv_head * D + d[None, :]
        keys = tl.load(k_cache_ptr + offsets, mask=inside[:, None], other=0.0)
        if EARLY_V:
            values = tl.load(v_cache_ptr + offsets, mask=inside[:, None], other=0.0)
    else:
        slot = (tl.load(table + j // BS) * BS + j % BS).to(tl.int64)
        offsets = slot[:, None] * stride_slot + kv_head * D + d[None, :]
        keys = tl.load(k_cache_ptr + offsets)
        if EARLY_V:
            values = tl.load(v_cache_ptr + offsets)
    scores = tl.dot(q, tl.trans(keys), input_precision=PRECISION)
    if SOFTCAP:
        scores = _soft_capped(scores * scaling, softcap, SOFTCAP) * LOG2E
    else:
        scores = scores * (scaling * LOG2E)
    if MASKED:
        seen = inside[None, :] & (j[None, :] <= position[:, None])
        if WINDOW:
            seen = seen & (j[None, :] > position[:, None] - window)
        scores = tl.where(seen, scores, float("-inf"))
    if not EARLY_V:
        if MASKED:
            values = tl.load(v_cache_ptr + offsets, mask=inside[:, None], other=0.0)
        else:
            values = tl.load(v_cache_ptr + offsets)
    return _softmax_values_update(scores, best, total, acc, values, PRECISION, True)


CONFIGS = [triton.Config({"TILE": tile}, num_warps=warps, num_stages=stages)
           for tile in (32, 64, 128) for warps in (2, 4, 8) for stages in (1, 2, 3)]
"""Cache positions per loop iteration, warps and pipeline stages, tuned at the first call per shape
(an engine tunes them first on a step shaped like a busy server's: :func:`tune`) and kept in
Triton's cache for later processes; :func:`_configs_for_rows` keeps those worth timing."""


def _configs_for_rows(configs: list[triton.Config], named_args: dict[str, object],
                      **kwargs: object) -> list[triton.Config]:
    """The configurations worth timing for a program of ``ROWS`` rows: decoding rows (few rows, the
    cache read dominates) small tiles and few warps; prompt chunks (``PREFILL_ROWS``, the matrix
    products dominate) larger tiles, more warps, pipelined loads."""
    if int(kwargs["ROWS"]) <= 4 * MIN_DOT_ROWS:  # type: ignore[call-overload]
        return [c for c in configs if c.kwargs["TILE"] <= 64 and c.num_warps <= 4 and c.num_stages != 2]
    return [c for c in configs if c.num_warps >= 4 and c.num_stages >= 2 and (c.kwargs["TILE"] < 128 or c.num_warps == 8)]


@triton.autotune(configs=CONFIGS, key=["G", "BLOCK_Q", "ROWS", "D", "BS", "SOFTCAP", "SINKS", "WINDOW"],
                 prune_configs_by={"early_config_prune": _configs_for_rows}, cache_results=True)
@triton.jit
def _unified_attention(out_ptr, q_ptr, k_cache_ptr, v_cache_ptr, cu_q_ptr, lengths_ptr, table_ptr, owner_ptr,  # type: ignore[no-untyped-def]
                       sinks_ptr, scaling, softcap, window, stride_q_token, stride_q_head, stride_out_token,
                       stride_out_head, stride_slot, stride_table, max_context,
                       G: tl.constexpr, BLOCK_Q: tl.constexpr, ROWS: tl.constexpr, D: tl.constexpr,
                       TILE: tl.constexpr, BS: tl.constexpr, SOFTCAP: tl.constexpr, SINKS: tl.constexpr,
                       STOP_AT_CONTEXT: tl.constexpr, SLOTS: tl.constexpr, PRECISION: tl.constexpr,
                       ONLY: tl.constexpr, EARLY_V: tl.constexpr = False, WINDOW: tl.constexpr = False):
    """Query block ``program_id(0)`` (of request ``owner[block]``) x key/value head ``program_id(1)``;
    ``ONLY``: ``SINGLE`` or ``SEVERAL`` leaves the other kind of request to another launch;
    ``WINDOW``: a sliding-window layer (``window`` > 0)."""
    block = tl.program_id(0)
    kv_head = tl.program_id(1)
    seq = tl.load(owner_ptr + block)
    q_start = tl.load(cu_q_ptr + seq)
    q_len = tl.load(cu_q_ptr + seq + 1) - q_start
    local = block - (q_start // BLOCK_Q + seq)
    if local * BLOCK_Q >= q_len:
        return
    if ONLY == 1 and q_len != 1:
        return
    if ONLY == 2 and q_len == 1:
        return
    length = tl.load(lengths_ptr + seq)
    before = length - q_len  # positions cached before this chunk
    m = tl.arange(0, ROWS)
    token = local * BLOCK_Q + m // G
    head = kv_head * G + m % G
    live = (m < BLOCK_Q * G) & (token < q_len)
    position = before + token
    d = tl.arange(0, D)
    q = tl.load(q_ptr + (q_start + token)[:, None] * stride_q_token + head[:, None] * stride_q_head + d[None, :],
                mask=live[:, None], other=0.0)
    best = tl.full((ROWS,), -1.0e30, tl.float32)
    total = tl.zeros((ROWS,), tl.float32)
    acc = tl.zeros((ROWS, D), tl.float32)
    first = before + local * BLOCK_Q  # the block's first query position: every row sees 0 .. first
    newest = before + tl.minimum(local * BLOCK_Q + BLOCK_Q, q_len)  # one past the block's last query position
    oldest = tl.where(window > 0, tl.maximum(first - window + 1, 0), 0)
    # Without a window, the tiles wholly at or before `first` are seen by every row: no mask there.
    if WINDOW:
        seen_by_all = first * 0
    else:
        seen_by_all = ((first + 1) // TILE) * TILE
    table = table_ptr + seq * stride_table
    if STOP_AT_CONTEXT:
        for start in range(0, seen_by_all, TILE):
            best, total, acc = _attend_tile(q, best, total, acc, start, oldest, newest, position, k_cache_ptr,
                                            v_cache_ptr, table, kv_head, stride_slot, max_context, scaling, softcap,
                                            window, d, D, TILE, BS, SOFTCAP, PRECISION, EARLY_V, False, WINDOW)
        for start in range(tl.maximum((oldest // TILE) * TILE, seen_by_all), newest, TILE):
            best, total, acc = _attend_tile(q, best, total, acc, start, oldest, newest, position, k_cache_ptr,
                                            v_cache_ptr, table, kv_head, stride_slot, max_context, scaling, softcap,
                                            window, d, D, TILE, BS, SOFTCAP, PRECISION, EARLY_V, True, WINDOW)
    else:  # Triton's interpreter cannot loop to a bound read from memory: the whole table, each tile as above
        for start in tl.static_range(0, SLOTS, TILE):
            if start < seen_by_all:
                best, total, acc = _attend_tile(q, best, total, acc, start, oldest, newest, position, k_cache_ptr,
                                                v_cache_ptr, table, kv_head, stride_slot, max_context, scaling,
                                                softcap, window, d, D, TILE, BS, SOFTCAP, PRECISION, EARLY_V, False,
                                                WINDOW)
            else:
                best, total, acc = _attend_tile(q, best, total, acc, start, oldest, newest, position, k_cache_ptr,
                                                v_cache_ptr, table, kv_head, stride_slot, max_context, scaling,
                                                softcap, window, d, D, TILE, BS, SOFTCAP, PRECISION, EARLY_V, True,
                                                WINDOW)
    if SINKS:  # GPT-OSS: one logit per query head joins the softmax, and no value with it
        sink = tl.load(sinks_ptr + head, mask=live, other=0.0).to(tl.float32) * LOG2E
        new_best = tl.maximum(best, sink)
        alpha = tl.exp2(best - new_best)
        total = total * alpha + tl.exp2(sink - new_best)
        acc = acc * alpha[:, None]
    out = acc / tl.maximum(total, 1.0e-30)[:, None]
    tl.store(out_ptr + (q_start + token)[:, None] * stride_out_token + head[:, None] * stride_out_head + d[None, :],
             out.to(out_ptr.dtype.element_ty), mask=live[:, None])


@torch.library.custom_op("intelrt::unified_attention", mutates_args={"out"})
def unified_attention_into(out: torch.Tensor, q: torch.Tensor, k_cache: torch.Tensor, v_cache: torch.Tensor,
                           cu_q: torch.Tensor, lengths: torch.Tensor, table: torch.Tensor, owners: torch.Tensor,
                           per_block: int, scaling: float, window: int = 0, softcap: float = 0.0,
                           sinks: torch.Tensor | None = None, only: int = ALL) -> None:
    """Write into ``out`` (tokens, q_heads, head_dim) the attention of a step's flat queries (of the
    requests ``only`` says: ``ALL``, ``SINGLE`` or ``SEVERAL``).

    ``q``: (tokens, q_heads, head_dim), rotated; ``k_cache``/``v_cache``: (blocks, block_size,
    kv_heads, head_dim), the step's own keys and values already written; ``cu_q``: (requests + 1,)
    int32, where each request's tokens start in ``q`` (tokens past ``cu_q[-1]`` are padding, left
    as they are in ``out``); ``lengths``: (requests,) int32, each request's context after this step
    (its cached positions plus its tokens here); ``table``: (requests, width) block ids; ``owners``
    and ``per_block``: :func:`query_blocks` of ``cu_q`` with ``per_block`` (:func:`block_q`) tokens
    per program; ``window`` > 0: a sliding-window layer (the last ``window`` positions up to each
    query's own); ``softcap`` > 0: soft-capped scores; ``sinks`` (q_heads,): GPT-OSS's sink logits."""
    _, q_heads, head_dim = q.shape
    block_size, kv_heads = k_cache.shape[1], k_cache.shape[2]
    group = q_heads // kv_heads
    interpreted = os.environ.get("TRITON_INTERPRET") == "1"
    max_context = table.shape[1] * block_size
    rows = max(MIN_DOT_ROWS, triton.next_power_of_2(per_block * group))
    # The interpreter has no device to time configs on: it runs the plain kernel with one of them.
    kernel = _unified_attention.fn if interpreted else _unified_attention
    tuned = {"TILE": TILE} if interpreted else {}
    kernel[(owners.shape[0], kv_heads)](
        out, q, k_cache, v_cache, cu_q, lengths, table, owners, sinks if sinks is not None else q, scaling,
        softcap, window, q.stride(0), q.stride(1), out.stride(0), out.stride(1), k_cache.stride(1),
        table.stride(0), max_context, G=group, BLOCK_Q=per_block, ROWS=rows, D=head_dim, BS=block_size,
        SOFTCAP=softcap > 0, SINKS=sinks is not None, STOP_AT_CONTEXT=not interpreted,
        SLOTS=max_context if interpreted else 0, PRECISION="ieee" if q.dtype == torch.float32 else "tf32",
        ONLY=only, WINDOW=window > 0, **tuned)


@unified_attention_into.register_fake
def _unified_attention_shape(out: torch.Tensor, q: torch.Tensor, k_cache: torch.Tensor, v_cache: torch.Tensor,
                             cu_q: torch.Tensor, lengths: torch.Tensor, table: torch.Tensor, owners: torch.Tensor,
                             per_block: int, scaling: float, window: int = 0, softcap: float = 0.0,
                             sinks: torch.Tensor | None = None, only: int = ALL) -> None:
    return None


TUNING_CONTEXT = 4096
"""The longest context of the step :func:`tune` times configurations on (decoding rows spread from 64
tokens up to it, a long prompt's next chunk after it, beside a new prompt): a busy chat server's."""
TUNING_ROWS = 128
"""At most this many decoding rows in that step (its keys and values are allocated for it: about
0.5 GB for an 8B model's heads)."""
_TUNED: set[tuple[Any, ...]] = set()
"""The kinds of layer :func:`tune` has tuned in this process."""


def tuning_step(block_size: int, kv_heads: int, head_dim: int, q_heads: int, tokens: int, rows: int, context: int,
                dtype: torch.dtype, device: torch.device) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, StepQueries]:
    """Queries, key and value pools, and requests of a step shaped like a busy server's: ``rows``
    decoding rows (at most half of the ``tokens``, at most :data:`TUNING_ROWS`) at contexts spread
    geometrically from 64 tokens to ``context`` (at most :data:`TUNING_CONTEXT`), then the remaining
    tokens as two prompt chunks, a whole new prompt and the next chunk of a long one (after that
    context). The pools are its own (random, as large as the step needs; block 0 unused, as the null
    block is), each request's blocks scattered over them, so the reads are a full cache's, not an
    engine's few warm-up blocks."""
    longest = max(1, min(context, TUNING_CONTEXT))
    shortest = min(64, longest)
    rows = max(1, min(rows, tokens // 2, TUNING_ROWS))
    spread = [max(1, round(shortest * (longest / shortest) ** (i / max(rows - 1, 1)))) for i in range(rows)]
    fresh = max(1, (tokens - rows) // 2)
    later = max(1, tokens - rows - fresh)
    requests = [(1, length) for length in spread] + [(fresh, fresh), (later, longest + later)]
    needs = [-(-length // block_size) for _, length in requests]
    blocks = sum(needs) + 1
    order = torch.randperm(blocks - 1) + 1
    table = torch.zeros((len(requests), max(needs)), dtype=torch.long)
    used = 0
    for row, need in enumerate(needs):
        table[row, :need] = order[used:used + need]
        used += need
    counts = torch.tensor([count for count, _ in requests], dtype=torch.int32)
    cu_q = torch.cat([torch.zeros(1, dtype=torch.int32), counts.cumsum(0, dtype=torch.int32)])
    lengths = torch.tensor([length for _, length in requests], dtype=torch.int32)
    q = torch.randn((int(cu_q[-1]), q_heads, head_dim), dtype=dtype, device=device)
    k_pool = torch.randn((blocks, block_size, kv_heads, head_dim), dtype=dtype, device=device)
    v_pool = torch.randn_like(k_pool)
    return q, k_pool, v_pool, StepQueries(cu_q.to(device), lengths.to(device), table.to(device), q.shape[0])


def tune(k_cache: torch.Tensor, q_heads: int, tokens: int, rows: int, context: int, window: int = 0,
         softcap: float = 0.0, sinks: torch.Tensor | None = None) -> None:
    """Have the autotuner choose both launches' configurations (decoding rows, prompt chunks) for a
    layer of this kind (``k_cache``'s block size, heads, size and dtype; ``q_heads``; a window, a
    soft-cap, sinks) on :func:`tuning_step`, before any other call chooses them on whatever it
    happened to run (an engine's memory profile and warm-up attend dummies over a few blocks, and
    every later step, captured, keeps the choice). Once per kind in a process; a configuration
    already tuned for the kernel's key (Triton's cache) is kept; under the interpreter (no device to
    time on) nothing runs."""
    _, block_size, kv_heads, head_dim = k_cache.shape
    kind = (block_size, kv_heads, head_dim, k_cache.dtype, q_heads, window > 0, softcap > 0, sinks is not None)
    if os.environ.get("TRITON_INTERPRET") == "1" or kind in _TUNED:
        return
    q, k_pool, v_pool, queries = tuning_step(block_size, kv_heads, head_dim, q_heads, tokens, rows, context,
                                             k_cache.dtype, k_cache.device)
    queries.attend(q, k_pool, v_pool, head_dim ** -0.5, window, softcap, sinks)
    _TUNED.add(kind)


class StepQueries:
    """Where a step's flat queries come from, as the kernel reads it: made once per step (device work
    only, so a captured step makes it too) and used by every layer.

    ``cu_q``/``lengths``/``table``: as :func:`unified_attention_into` takes them; ``tokens``: the
    step's (padded) token count; ``mixed``: the step may hold both kinds of request (decoding rows
    and prompt chunks), which then launch apart (``SINGLE``, ``SEVERAL``), else one launch of
    ``single`` (every request one token: ``True``) or of several."""

    def __init__(self, cu_q: torch.Tensor, lengths: torch.Tensor, table: torch.Tensor, tokens: int, *,
                 mixed: bool = True, single: bool = False) -> None:
        self.cu_q, self.lengths, self.table, self.tokens = cu_q, lengths, table, tokens
        self.kinds = (SINGLE, SEVERAL) if mixed else (SINGLE,) if single else (SEVERAL,)
        self._owners: dict[tuple[int, int], tuple[int, torch.Tensor]] = {}

    def owners(self, group: int, kind: int) -> tuple[int, torch.Tensor]:
        """(tokens per program, each program's request) for ``kind`` with ``group`` query heads per
        key/value head."""
        found = self._owners.get((group, kind))
        if found is None:
            per_block = block_q(group, 1 if kind == SINGLE else 2)
            found = self._owners[group, kind] = (per_block, query_blocks(self.cu_q, self.tokens, per_block))
        return found

    def attend(self, q: torch.Tensor, k_cache: torch.Tensor, v_cache: torch.Tensor, scaling: float,
               window: int = 0, softcap: float = 0.0, sinks: torch.Tensor | None = None) -> torch.Tensor:
        """The attention (tokens, q_heads, head_dim) of ``q`` (tokens, q_heads, head_dim)."""
        out = torch.zeros_like(q)  # tokens past cu_q[-1] (a padded step) stay finite
        group = q.shape[1] // k_cache.shape[2]
        for kind in self.kinds:
            per_block, owners = self.owners(group, kind)
            only = kind if len(self.kinds) > 1 else ALL
            unified_attention_into(out, q, k_cache, v_cache, self.cu_q, self.lengths, self.table, owners, per_block,
                                   scaling, window, softcap, sinks, only)
        return out


def unified_attention(q: torch.Tensor, k_cache: torch.Tensor, v_cache: torch.Tensor, cu_q: torch.Tensor,
                      lengths: torch.Tensor, table: torch.Tensor, owners: torch.Tensor, per_block: int,
                      scaling: float, window: int = 0, softcap: float = 0.0,
                      sinks: torch.Tensor | None = None) -> torch.Tensor:
    """:func:`unified_attention_into` a new output, every request in one launch."""
    out = torch.zeros_like(q)
    unified_attention_into(out, q, k_cache, v_cache, cu_q, lengths, table, owners, per_block, scaling, window,
                           softcap, sinks)
    return out


def fits(head_dim: int, value_dim: int | None = None) -> bool:
    """The kernel serves a layer of this head size: a power of two >= 16, values the keys' size."""
    return head_dim >= 16 and head_dim & (head_dim - 1) == 0 and value_dim in (None, head_dim)


__all__: list[Any] = ["StepQueries", "block_q", "fits", "query_blocks", "tune", "tuning_step", "unified_attention",
                     "unified_attention_into"]
