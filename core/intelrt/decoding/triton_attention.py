"""One Triton kernel for a decode step's attention block (one new token per row) over the paged cache.

Given the fused q/k/v projection output of one layer, a program per (row, key/value head, split
of the row's context): applies the per-head q/k RMSNorm (Qwen3, Gemma-3) and the rotary embedding,
writes the new key and value into the layer's cache at the slot the row's block table gives for
the new position (``paged.py``: blocks of ``block_size`` slots; vLLM's paged attention reads its
cache the same way, ``vllm/v1/attention/ops/triton_decode_attention.py``), and attends the head's
group of query heads over its part of the context, each position's key and value read through the
block table (a sliding-window layer: of its window) with an online softmax,
soft-capping the scores where the model does (Gemma-2). The last of a head's programs to finish
(an atomic arrival counter tells it) merges the splits' states into the output, so a layer's
attention is one kernel launch. transformers' modeling code runs this as about six
kernels per layer (norms, rotary, cache writes, two matmuls, softmax) plus an expansion of K/V
to every query head. Given weights to ``prefetch``, extra programs ask the L2 cache for them
(``prefetch_mode``): the attention of a few rows reads about 1 MB and waits on memory latency,
leaving the memory bus idle for microseconds; meanwhile the weights the next kernels read
(``DecodeTuning.prefetch_weights``) come into L2, where those kernels find them
(docs/performance.md).

Which models use it: ``CompactModel.attention_kernel_fits``; which devices: the plan's decode
decision (``attention_kernel``). Its tuning (splits, merge, prefetch) comes from ``DecodeTuning``. Registered as the custom op ``intelrt::decode_attention`` (``torch.library.custom_op``):
``torch.compile`` calls it as one opaque kernel (its fake below gives the output's shape), and a
device graph records its launch. Importing this module imports torch
and triton.
"""

from __future__ import annotations

import os

import torch
import triton
import triton.language as tl

MIN_DOT_ROWS = 16
"""A query group is padded to this many rows: tensor-core dots need at least 16."""
CONFIGS = [triton.Config({"BLOCK": block}, num_warps=warps) for block in (16, 32, 64, 128, 256) for warps in (4, 8)]
"""Cache slots per loop iteration and warps per program, tuned at the first call per shape."""
INTERPRETER_BLOCK = 64
"""Cache slots per loop iteration under the interpreter (fewer, larger steps run faster there)."""
MAX_SPLITS = 16
MIN_TUNED_BLOCK = 64
"""Autotuning considers blocks of at least this many slots (or a split's whole share of the cache,
when smaller): it runs at the first call, with the cache nearly empty, but the choice serves
every later step as the cache fills."""
PROGRAMMATIC_LAUNCH_MIN_CAPABILITY = (9, 0)
"""Programmatic dependent launch (the kernel starts while the one before it drains, and waits on
the device for its data: ``griddepcontrol``) needs a Hopper or newer GPU."""
PREFETCH_MIN_CAPABILITY = (9, 0)
"""The prefetch uses Hopper's bulk L2 prefetch (``cp.async.bulk.prefetch.L2``, one instruction
per ``PREFETCH_CHUNK`` bytes): older GPUs run the kernel without it."""
PREFETCH_L2_SHARE = 0.6
"""Weights are prefetched only when all of them fit in this share of the GPU's L2 cache (measured:
31.5 MB of an H200's 60 MB); a larger set would evict itself before it is read, and a part of it
alone did not pay."""
PREFETCH_CHUNK = 16384
PREFETCH_PROGRAMS = 16
"""Extra programs that issue the ``early`` prefetches."""
MAX_PREFETCH = 4


@triton.jit
def _normed(x, x_rot, w_ptr, rot, d, eps, offset, D: tl.constexpr, HAS_NORM: tl.constexpr):  # type: ignore[no-untyped-def]
    """RMSNorm of the rows of ``x`` (and the same rows rotated by half, ``x_rot``), with weight
    ``w + offset`` (Gemma stores its norm weights as an offset from 1)."""
    if HAS_NORM:
        scale = tl.rsqrt(tl.sum(x * x, axis=-1, keep_dims=True) / D + eps)
        x = x * scale * (tl.load(w_ptr + d).to(tl.float32) + offset)
        x_rot = x_rot * scale * (tl.load(w_ptr + rot).to(tl.float32) + offset)
    return x, x_rot


@triton.jit
def _soft_capped(scores, softcap, SOFTCAP: tl.constexpr):  # type: ignore[no-untyped-def]
    """``softcap * tanh(scores / softcap)`` (Gemma-2's attention logits), written with ``exp`` so the
    interpreter runs it too; ``scores`` unchanged without ``SOFTCAP``."""
    if SOFTCAP:
        t = tl.exp(-2.0 * tl.abs(scores) / softcap)
        scores = tl.where(scores < 0, -softcap, softcap) * (1.0 - t) / (1.0 + t)
    return scores


@triton.jit
def _softmax_update(scores, best, total, acc, value_ptrs, inside, PRECISION: tl.constexpr):  # type: ignore[no-untyped-def]
    """One tile of the online softmax: the running maximum ``best``, denominator ``total`` and weighted
    values ``acc`` of each row updated with ``scores`` (``-inf`` where masked) and the tile's values
    read at ``value_ptrs`` (rows ``inside``); returns the three."""
    return _softmax_values_update(scores, best, total, acc, tl.load(value_ptrs, mask=inside[:, None], other=0.0),
                                  PRECISION, False)


@triton.jit
def _softmax_values_update(scores, best, total, acc, values, PRECISION: tl.constexpr,  # type: ignore[no-untyped-def]
                           BASE2: tl.constexpr = False):
    """:func:`_softmax_update` with the tile's values already loaded (a kernel that loads them beside
    the keys, so that both loads are in flight together); ``BASE2``: ``scores`` and ``best`` are in
    base-2 units (scaled by log2(e) beforehand), so each weight is one ``exp2``."""
    new_best = tl.maximum(best, tl.max(scores, axis=1))
    if BASE2:
        alpha = tl.exp2(best - new_best)
        weights = tl.exp2(scores - new_best[:, None])
    else:
        alpha = tl.exp(best - new_best)
        weights = tl.exp(scores - new_best[:, None])
    total = total * alpha + tl.sum(weights, axis=1)
    acc = acc * alpha[:, None] + tl.dot(weights.to(values.dtype), values, input_precision=PRECISION)
    return new_best, total, acc


@triton.jit
def _prefetch_l2(ptr, nbytes, worker, workers, LANES: tl.constexpr, CHUNK: tl.constexpr):  # type: ignore[no-untyped-def]
    """Ask the L2 cache to fetch this worker's share of bytes ``0 .. nbytes`` of ``ptr``, in
    ``CHUNK``-byte bulk prefetches: fire and forget (nothing waits for the data), so the program
    ends at once."""
    base = ptr.to(tl.pointer_type(tl.int8))
    lane = tl.arange(0, LANES)
    chunks = tl.cdiv(nbytes, CHUNK)
    for first in range(0, chunks, workers * LANES):
        chunk = first + lane * workers + worker
        offset = chunk.to(tl.int64) * CHUNK
        size = tl.where(chunk < chunks, tl.minimum(nbytes - offset, CHUNK), 0).to(tl.int32)
        tl.inline_asm_elementwise(
            "{ .reg .pred p; setp.gt.s32 p, $2, 0; @p cp.async.bulk.prefetch.L2.global [$1], $2; mov.u32 $0, 0; }",
            "=r,l,r", [base + offset, size], dtype=tl.int32, is_pure=False, pack=1)


@triton.jit
def _prefetch_all(pf0, pf1, pf2, pf3, n0, n1, n2, n3, worker, workers, NPF: tl.constexpr,  # type: ignore[no-untyped-def]
                  CHUNK: tl.constexpr):
    """This worker's share of the ``NPF`` (<= 4) tensors to prefetch, in order."""
    if NPF > 0:
        _prefetch_l2(pf0, n0, worker, workers, 256, CHUNK)
    if NPF > 1:
        _prefetch_l2(pf1, n1, worker, workers, 256, CHUNK)
    if NPF > 2:
        _prefetch_l2(pf2, n2, worker, workers, 256, CHUNK)
    if NPF > 3:
        _prefetch_l2(pf3, n3, worker, workers, 256, CHUNK)


@triton.jit
def _attend_block(q, best, total, acc, start, lo, hi, k_cache_ptr, v_cache_ptr, head, table_ptr,  # type: ignore[no-untyped-def]
                  max_context, stride_slot, d, softcap, BLOCK: tl.constexpr, BS: tl.constexpr,
                  PRECISION: tl.constexpr, SOFTCAP: tl.constexpr):
    """Online-softmax update with the row's positions ``start .. start + BLOCK`` inside ``lo .. hi``
    (``q``: the group's query heads, padded to 16 rows for the tensor-core dots), each position's
    key and value read from the cache slot its block table gives (block ``table[j // BS]``)."""
    j = start + tl.arange(0, BLOCK)
    inside = (j >= lo) & (j < hi)
    block = tl.load(table_ptr + j // BS, mask=inside & (j < max_context), other=0)
    slot = (block * BS + j % BS).to(tl.int64)
    offsets = slot[:, None] * stride_slot + head + d[None, :]
    keys = tl.load(k_cache_ptr + offsets, mask=inside[:, None], other=0.0)
    scores = _soft_capped(tl.dot(q, tl.trans(keys), input_precision=PRECISION), softcap, SOFTCAP)
    scores = tl.where(inside[None, :], scores, float("-inf"))
    return _softmax_update(scores, best, total, acc, v_cache_ptr + offsets, inside, PRECISION)


def _blocks_for_a_full_cache(configs: list[triton.Config], named_args: dict[str, object],
                             **kwargs: object) -> list[triton.Config]:
    slots = int(named_args["max_context"])  # type: ignore[call-overload]
    share = triton.next_power_of_2(triton.cdiv(slots, int(kwargs["SPLITS"])))  # type: ignore[call-overload]
    return [c for c in configs if c.kwargs["BLOCK"] >= min(MIN_TUNED_BLOCK, share)]


# cache_results: the tuning's choice is kept in Triton's cache directory, so a later process on the
# same GPU reuses it instead of compiling and timing every configuration again.
@triton.autotune(configs=CONFIGS, key=["HKV", "D", "GP", "SPLITS", "max_context", "BS"],
                 prune_configs_by={"early_config_prune": _blocks_for_a_full_cache}, cache_results=True)
@triton.jit
def _decode_attention_split(qkv_ptr, q_norm_ptr, k_norm_ptr, cos_ptr, sin_ptr, k_cache_ptr, v_cache_ptr,  # type: ignore[no-untyped-def]
                            position_ptr, slot_ptr, table_ptr, arrivals_ptr, best_ptr, total_ptr, acc_ptr, out_ptr, eps,
                            scaling, window, softcap, norm_offset, max_context,
                            stride_qkv, stride_slot, stride_table, stride_out,
                            pf0, pf1, pf2, pf3, n0, n1, n2, n3, HQ: tl.constexpr,
                            HKV: tl.constexpr, G: tl.constexpr, GP: tl.constexpr, GS: tl.constexpr, D: tl.constexpr,
                            SPLITS: tl.constexpr, BLOCK: tl.constexpr, HAS_NORM: tl.constexpr,
                            STOP_AT_SLOT: tl.constexpr, SLOTS: tl.constexpr, PRECISION: tl.constexpr,
                            MERGE: tl.constexpr, NPF: tl.constexpr, PF_LATE: tl.constexpr, PF_CHUNK: tl.constexpr,
                            SOFTCAP: tl.constexpr, PDL: tl.constexpr, BS: tl.constexpr):
    """One (row, key/value head, split of the row's context): partial softmax state of the head's group
    (with one split, the group's attention output itself; with ``MERGE``, the last split to
    finish also merges them all). Programs past the last split (``split >= SPLITS``) only
    prefetch the ``NPF`` tensors ``pf0 ..`` (``n0 ..`` bytes) into L2; with ``PF_LATE``, the
    attention programs do, after their loads. The row's new token is at ``position`` (its key and
    value are written to flat cache slot ``slot``), its context the positions before it, each
    read through the row's block table (``BS`` slots per block). ``window`` > 0: only the last ``window``
    positions up to the new one are attended (a sliding-window layer); ``SOFTCAP``: scores are
    soft-capped.
    ``PDL`` (launched as a programmatic dependent launch): the prefetch programs run at once (they
    read only weights), the attention programs wait for the kernel before to finish (it wrote
    q/k/v), then let the next kernel launch (it waits, on the device, for this one to finish)."""
    pid = tl.program_id(0)
    split = tl.program_id(1)
    if NPF > 0 and not PF_LATE:
        if split >= SPLITS:
            _prefetch_all(pf0, pf1, pf2, pf3, n0, n1, n2, n3, (split - SPLITS) * tl.num_programs(0) + pid,
                          (tl.num_programs(1) - SPLITS) * tl.num_programs(0), NPF, PF_CHUNK)
            return
    if PDL:
        tl.extra.cuda.gdc_wait()
        tl.extra.cuda.gdc_launch_dependents()
    b = pid // HKV
    h = pid % HKV
    d = tl.arange(0, D)
    half = D // 2
    rot = tl.where(d < half, d + half, d - half)
    sign = tl.where(d < half, -1.0, 1.0)
    cos = tl.load(cos_ptr + b * D + d).to(tl.float32)
    sin = tl.load(sin_ptr + b * D + d).to(tl.float32)
    position = tl.load(position_ptr + b)
    table = table_ptr + b * stride_table
    row = qkv_ptr + b * stride_qkv
    cache_dtype = k_cache_ptr.dtype.element_ty
    head = h * D

    # The new key and value: norm, rotary (split 0 writes them into the cache at the new position's slot).
    k = tl.load(row + (HQ + h) * D + d).to(tl.float32)
    k_rot = tl.load(row + (HQ + h) * D + rot).to(tl.float32)
    k, k_rot = _normed(k, k_rot, k_norm_ptr, rot, d, eps, norm_offset, D, HAS_NORM)
    k = (k * cos + sign * k_rot * sin).to(cache_dtype)
    v = tl.load(row + (HQ + HKV + h) * D + d).to(cache_dtype)
    first = split == 0
    new_slot = tl.load(slot_ptr + b).to(tl.int64)
    tl.store(k_cache_ptr + new_slot * stride_slot + head + d, k, mask=(d < D) & first)
    tl.store(v_cache_ptr + new_slot * stride_slot + head + d, v, mask=(d < D) & first)

    # This head's group of query heads (padded to GP rows).
    g = tl.arange(0, GP)
    live = g < G
    q_offsets = (h * G + g)[:, None] * D
    q = tl.load(row + q_offsets + d[None, :], mask=live[:, None], other=0.0).to(tl.float32)
    q_rot = tl.load(row + q_offsets + rot[None, :], mask=live[:, None], other=0.0).to(tl.float32)
    q, q_rot = _normed(q, q_rot, q_norm_ptr, rot[None, :], d[None, :], eps, norm_offset, D, HAS_NORM)
    q = ((q * cos[None, :] + sign[None, :] * q_rot * sin[None, :]) * scaling).to(cache_dtype)

    # Split 0 starts from the new slot (always visible); the others from nothing (a finite floor
    # keeps an empty split's state NaN-free).
    own = _soft_capped(tl.sum(q.to(tl.float32) * k.to(tl.float32)[None, :], axis=1), softcap, SOFTCAP)
    best = tl.where(first, own, -1.0e30)
    total = tl.where(first, 1.0, 0.0) + tl.zeros((GP,), tl.float32)
    acc = tl.where(first, 1.0, 0.0) * (tl.zeros((GP, D), tl.float32) + v.to(tl.float32)[None, :])
    # The positions before the new one that this layer sees: all of them, or a sliding window's.
    start_slot = tl.where(window > 0, tl.maximum(position - window + 1, 0), 0)
    chunk = tl.cdiv(tl.cdiv(position - start_slot, SPLITS), BLOCK) * BLOCK
    lo = start_slot + split * chunk
    hi = tl.minimum(lo + chunk, position)
    # Compiled kernels loop over their chunk. Triton's interpreter (TRITON_INTERPRET=1, the CPU
    # tests) cannot loop to a bound read from memory, so there the whole table is walked, masked.
    if STOP_AT_SLOT:
        for start in range(lo, hi, BLOCK):
            best, total, acc = _attend_block(q, best, total, acc, start, lo, hi, k_cache_ptr, v_cache_ptr, head, table,
                                             max_context, stride_slot, d, softcap, BLOCK, BS, PRECISION, SOFTCAP)
    else:
        for start in tl.static_range(0, SLOTS, BLOCK):
            best, total, acc = _attend_block(q, best, total, acc, start, lo, hi, k_cache_ptr, v_cache_ptr, head, table,
                                             max_context, stride_slot, d, softcap, BLOCK, BS, PRECISION, SOFTCAP)
    if NPF > 0 and PF_LATE:
        _prefetch_all(pf0, pf1, pf2, pf3, n0, n1, n2, n3, split * tl.num_programs(0) + pid,
                      SPLITS * tl.num_programs(0), NPF, PF_CHUNK)

    if SPLITS == 1:  # the whole cache in this program: its state is the output
        out = acc / total[:, None]
        tl.store(out_ptr + b * stride_out + q_offsets + d[None, :], out.to(out_ptr.dtype.element_ty),
                 mask=live[:, None])
        return
    # Keep the first GS (>= G) rows of the state for the merge.
    state = (pid * SPLITS + split) * GS
    kept = g < GS
    tl.store(best_ptr + state + g, best, mask=kept)
    tl.store(total_ptr + state + g, total, mask=kept)
    tl.store(acc_ptr + (state + g)[:, None] * D + d[None, :], acc, mask=kept[:, None])
    if MERGE:
        # Every thread's stores precede the release of the arrival; the last to arrive acquires
        # them all, merges, and leaves the counter at zero for the next layer's kernel.
        tl.debug_barrier()
        arrived = tl.atomic_add(arrivals_ptr + pid, 1, sem="acq_rel")
        if arrived == SPLITS - 1:
            _merge(best_ptr, total_ptr, acc_ptr, out_ptr, stride_out, pid, HKV, G, GS, D, SPLITS)
            tl.atomic_xchg(arrivals_ptr + pid, 0)


@triton.jit
def _merge(best_ptr, total_ptr, acc_ptr, out_ptr, stride_out, pid, HKV: tl.constexpr,  # type: ignore[no-untyped-def]
           G: tl.constexpr, GS: tl.constexpr, D: tl.constexpr, SPLITS: tl.constexpr):
    """Merge the splits' softmax states of (row, key/value head) ``pid`` into the group's output
    (loads bypass the SM's L1 cache: other programs wrote the states)."""
    b = pid // HKV
    h = pid % HKV
    splits = tl.arange(0, SPLITS)
    gs = tl.arange(0, GS)
    d = tl.arange(0, D)
    state = (pid * SPLITS + splits)[:, None] * GS + gs[None, :]  # (SPLITS, GS)
    best = tl.load(best_ptr + state, cache_modifier=".cg")
    overall = tl.max(best, axis=0)
    scale = tl.exp(best - overall[None, :])
    total = tl.sum(tl.load(total_ptr + state, cache_modifier=".cg") * scale, axis=0)
    acc = tl.load(acc_ptr + state[:, :, None] * D + d[None, None, :], cache_modifier=".cg")
    out = tl.sum(acc * scale[:, :, None], axis=0) / total[:, None]
    tl.store(out_ptr + b * stride_out + (h * G + gs)[:, None] * D + d[None, :], out.to(out_ptr.dtype.element_ty),
             mask=(gs < G)[:, None])


@triton.jit
def _decode_attention_combine(best_ptr, total_ptr, acc_ptr, out_ptr, stride_out,  # type: ignore[no-untyped-def]
                              HKV: tl.constexpr, G: tl.constexpr, GS: tl.constexpr, D: tl.constexpr,
                              SPLITS: tl.constexpr):
    """One (row, key/value head): merge the splits' states (when ``merge_in_kernel`` is off)."""
    _merge(best_ptr, total_ptr, acc_ptr, out_ptr, stride_out, tl.program_id(0), HKV, G, GS, D, SPLITS)


@torch.library.custom_op("intelrt::decode_attention", mutates_args={"k_cache", "v_cache", "arrivals"})
def decode_attention(qkv: torch.Tensor, q_norm: torch.Tensor | None, k_norm: torch.Tensor | None,
                     cos: torch.Tensor, sin: torch.Tensor, k_cache: torch.Tensor, v_cache: torch.Tensor,
                     positions: torch.Tensor, slots: torch.Tensor, table: torch.Tensor, arrivals: torch.Tensor,
                     prefetch: list[torch.Tensor],
                     q_heads: int, eps: float, scaling: float, split_target: int = 64, merge_in_kernel: bool = True,
                     prefetch_mode: str = "early", window: int = 0, softcap: float = 0.0,
                     norm_offset: float = 0.0, programmatic: bool = False) -> torch.Tensor:
    """Attention output (rows, q_heads * head_dim) of one new token per row.

    ``qkv``: (rows, (q_heads + 2 * kv_heads) * head_dim), the fused projection output;
    ``q_norm``/``k_norm``: per-head RMSNorm weights (head_dim,) or ``None``; ``cos``/``sin``:
    (rows, head_dim); ``k_cache``/``v_cache``: the paged cache's blocks (blocks, block_size,
    kv_heads, head_dim); ``positions``: (rows,) the new token's position in each row, whose key and
    value are written to flat cache slot ``slots`` (rows,); ``table``: (rows, width) each row's
    block ids, through which positions ``0 .. position - 1`` are read and attended with the new
    one; ``arrivals``: int32 zeros, at least rows * kv_heads of them (left at zero);
    ``prefetch``: tensors the next kernels read, brought into L2 meanwhile (``prefetch_mode``
    ``early``: by extra programs as the kernel starts; ``late``: by the attention programs after
    their own loads; ``off``: the caller's word on a GPU older than Hopper, ``launch_features``),
    only read, never changed; ignored under the interpreter, past ``MAX_PREFETCH`` tensors, and
    altogether when they would not fit ``PREFETCH_L2_SHARE`` of L2. ``split_target``: about this many programs share the cache
    (flash-decoding); ``merge_in_kernel``: the last split of a head merges the splits' states
    (else a second kernel does). ``window`` > 0: a sliding-window layer, which attends to the
    last ``window`` slots up to and including the new one; ``softcap`` > 0: scores become
    ``softcap * tanh(score / softcap)`` before the mask; ``norm_offset``: the q/k norms' weights are
    ``weight + norm_offset`` (1 for Gemma). ``programmatic``: launch the kernel as a programmatic
    dependent launch (the caller's word, where the GPU has it: ``launch_features``): it starts while
    the kernel before it drains, and waits on the device for that kernel's output.
    """
    rows = qkv.shape[0]
    block_size, kv_heads, head_dim = k_cache.shape[1], k_cache.shape[2], k_cache.shape[3]
    max_context = table.shape[1] * block_size
    groups = q_heads // kv_heads
    heads = rows * kv_heads
    splits = max(1, min(MAX_SPLITS, triton.next_power_of_2(max(1, split_target // heads))))
    kept = triton.next_power_of_2(groups)
    out = qkv.new_empty((rows, q_heads * head_dim))
    state = (heads, splits, kept) if splits > 1 else (1, 1, 1)  # one split writes `out` directly
    best = torch.empty(state, dtype=torch.float32, device=qkv.device)
    total = torch.empty_like(best)
    acc = torch.empty((*state, head_dim if splits > 1 else 1), dtype=torch.float32, device=qkv.device)
    has_norm = q_norm is not None and k_norm is not None
    interpreted = os.environ.get("TRITON_INTERPRET") == "1"
    # The interpreter has no device to time configs on: it runs the plain kernel with one of them.
    split_kernel = _decode_attention_split.fn if interpreted else _decode_attention_split
    tuned = {"BLOCK": INTERPRETER_BLOCK} if interpreted else {}
    merge = merge_in_kernel and splits > 1
    fetched = [] if interpreted or prefetch_mode == "off" else [
        t for t in prefetch if t.is_contiguous() and (t.numel() * t.element_size()) % 16 == 0][:MAX_PREFETCH]
    if fetched and sum(t.numel() * t.element_size() for t in fetched) > _prefetch_budget(qkv.device):
        fetched = []
    late = prefetch_mode == "late"
    pdl = programmatic and not interpreted
    launch = {"launch_pdl": True} if pdl else {}
    extra = 0 if late or not fetched else triton.cdiv(PREFETCH_PROGRAMS, heads)
    pointers = [*fetched, *[qkv] * (MAX_PREFETCH - len(fetched))]
    sizes = [t.numel() * t.element_size() for t in fetched] + [0] * (MAX_PREFETCH - len(fetched))
    split_kernel[(heads, splits + extra)](
        qkv, q_norm if has_norm else qkv, k_norm if has_norm else qkv, cos, sin, k_cache, v_cache, positions,
        slots, table, arrivals, best, total, acc, out, eps, scaling, window, softcap, norm_offset, max_context,
        qkv.stride(0), k_cache.stride(1), table.stride(0), out.stride(0), *pointers, *sizes, HQ=q_heads, HKV=kv_heads,
        G=groups, GP=max(MIN_DOT_ROWS, kept), GS=kept, D=head_dim, SPLITS=splits, HAS_NORM=has_norm,
        STOP_AT_SLOT=not interpreted, SLOTS=max_context if interpreted else 0, BS=block_size,
        PRECISION="ieee" if k_cache.dtype == torch.float32 else "tf32", MERGE=merge, NPF=len(fetched),
        PF_LATE=late, PF_CHUNK=PREFETCH_CHUNK, SOFTCAP=softcap > 0, PDL=pdl, **tuned, **launch)
    if splits > 1 and not merge:
        _decode_attention_combine[(heads,)](best, total, acc, out, out.stride(0), HKV=kv_heads, G=groups,
                                            GS=kept, D=head_dim, SPLITS=splits)
    return out


def launch_features(capability: tuple[int, int] | None, programmatic: bool, prefetch_mode: str) -> tuple[bool, str]:
    """(``programmatic``, ``prefetch_mode``) as a GPU of compute ``capability`` runs them (the backend's
    ``Backend.capability``; ``None``: a device without them): programmatic dependent launch from
    ``PROGRAMMATIC_LAUNCH_MIN_CAPABILITY``, the bulk L2 prefetch from ``PREFETCH_MIN_CAPABILITY``."""
    return (programmatic and capability is not None and capability >= PROGRAMMATIC_LAUNCH_MIN_CAPABILITY,
            prefetch_mode if capability is not None and capability >= PREFETCH_MIN_CAPABILITY else "off")


def _prefetch_budget(device: torch.device) -> int:
    """Bytes the kernel may prefetch on ``device``: ``PREFETCH_L2_SHARE`` of its L2 cache (asked only
    where ``launch_features`` left the prefetch on: a GPU with the bulk L2 prefetch)."""
    properties = torch.get_device_module(device).get_device_properties(device)
    return int(getattr(properties, "L2_cache_size", 0) * PREFETCH_L2_SHARE)


@decode_attention.register_fake
def _decode_attention_shape(qkv: torch.Tensor, q_norm: torch.Tensor | None, k_norm: torch.Tensor | None,
                            cos: torch.Tensor, sin: torch.Tensor, k_cache: torch.Tensor, v_cache: torch.Tensor,
                            positions: torch.Tensor, slots: torch.Tensor, table: torch.Tensor,
                            arrivals: torch.Tensor, prefetch: list[torch.Tensor], q_heads: int, eps: float,
                            scaling: float,
                            split_target: int = 64, merge_in_kernel: bool = True,
                            prefetch_mode: str = "early", window: int = 0, softcap: float = 0.0,
                            norm_offset: float = 0.0, programmatic: bool = False) -> torch.Tensor:
    return qkv.new_empty((qkv.shape[0], q_heads * k_cache.shape[3]))
