"""The engine step's attention on a GPU: intelrt's one Triton kernel (``unified_attention``) against
the torch way it replaces, on one mixed step of real proportions — decoding rows at varied contexts
and prompt chunks continuing long contexts — for correctness (bf16 against a float32 reference) and
time, in one run.

    python benchmarks/check_step_attention.py --out results/step-attention     # a GPU (bf16, 8B heads)
    python benchmarks/check_step_attention.py --tiny --out /tmp/step-attention # the CPU, interpreter

The step: ``--rows`` decoding rows (contexts log-uniform in 64 … ``--context``) and ``--chunks``
prompt chunks of ``--chunk`` tokens, each after ``--context`` cached tokens, over a paged cache of
16-token blocks; Llama-3.1-8B's heads (32 query heads, 8 key/value heads of 128). The reference
gathers each request's context and attends it in float32 (``paged.PackedPrefill``'s per-segment
way, upcast); the torch way is the one steps took before the kernel (gathered contexts, SDPA per
pack of chunks, one batched decode attention). Prints the largest error and each way's time
(median of ``--repeats`` after a warm-up), and writes them to ``OUT/step_attention.json``.
"""

from __future__ import annotations

import argparse
import functools
import json
import math
import os
import random
import sys
import time
from pathlib import Path
from typing import Any

from bench_serve import H200_BANDWIDTH_TB_S, H200_PEAK_TFLOPS, terabytes_per_second


def layout(rows: int, chunks: int, chunk: int, context: int, block: int, seed: int) -> tuple[list[Any], int]:
    """(tokens, context after the step) per request and the blocks the cache needs: decoding rows
    first (one token each), then the chunks."""
    rng = random.Random(seed)
    requests = [(1, int(math.exp(rng.uniform(math.log(64), math.log(context))))) for _ in range(rows)]
    requests += [(chunk, context + chunk) for _ in range(chunks)]
    blocks = sum(-(-length // block) for _, length in requests)
    return requests, blocks + 1


def limit_ms(requests: list[Any], q_heads: int, kv_heads: int, dim: int, itemsize: int, bandwidth_tb_s: float,
             peak_tflops: float) -> float:
    """The step's attention at the device's limit: its key/value reads (each request's context once
    per key/value head) and query/output bytes at the memory bandwidth, or its two matrix products
    (scores and weighted values, causal within a chunk counted whole) at the matrix peak."""
    read = sum(length for _, length in requests) * kv_heads * dim * 2 * itemsize
    queries = sum(count for count, _ in requests) * q_heads * dim * 2 * itemsize  # in and out
    flops = sum(count * length for count, length in requests) * q_heads * dim * 4
    return max((read + queries) / (bandwidth_tb_s * 1e12), flops / (peak_tflops * 1e12)) * 1e3


SWEEP = {"single": [(rows, tile, warps, stages, early) for rows in (16,) for tile in (16, 32, 64)
                     for warps in (2, 4) for stages in (1, 3) for early in (False, True)],
         "several": [(rows, tile, warps, stages, early) for rows in (64, 128) for tile in (32, 64, 128)
                      for warps in (4, 8) for stages in (2, 3) for early in (False,)]}
"""Kernel configurations a ``--sweep`` times per kind of request: (rows per program, cache positions
per tile, warps, pipeline stages, values loaded beside the keys)."""


def sweep(args: Any, requests: list[Any], q: Any, k_pool: Any, v_pool: Any, cu_q: Any, lengths: Any, table: Any,
          tokens: int, scaling: float, expected: Any, timed: Any, out: Path) -> list[dict[str, Any]]:
    """Each kind of request alone (``SINGLE``: decoding rows, ``SEVERAL``: prompt chunks) under each
    configuration of :data:`SWEEP`, launched directly (no autotuning), with its error against the
    float32 reference on its own tokens and its share of its own limit; rows written as they come."""
    import torch
    import triton

    from intelrt.decoding import unified_attention as ua

    q_heads, kv_heads, dim = q.shape[1], k_pool.shape[2], q.shape[2]
    group = q_heads // kv_heads
    found: list[dict[str, Any]] = []
    for name, kind in (("single", ua.SINGLE), ("several", ua.SEVERAL)):
        mine = [r for r in requests if (r[0] == 1) == (kind == ua.SINGLE)]
        own_limit = limit_ms(mine, q_heads, kv_heads, dim, q.element_size(), args.bandwidth, args.peak_tflops)
        first = [0]
        for count, _ in requests:
            first.append(first[-1] + count)
        mine_tokens = torch.tensor([t for i, (count, _) in enumerate(requests) if (count == 1) == (kind == ua.SINGLE)
                                    for t in range(first[i], first[i] + count)], device=q.device)
        for rows, tile, warps, stages, early in SWEEP[name][:2] if args.tiny else SWEEP[name]:
            per_block = max(1, rows // group)
            owners = ua.query_blocks(cu_q, tokens, per_block)
            result = torch.zeros_like(q)

            launch = functools.partial(
                ua._unified_attention.fn[(owners.shape[0], kv_heads)], result, q, k_pool, v_pool, cu_q, lengths,
                table, owners, q, scaling, 0.0, 0, q.stride(0), q.stride(1), result.stride(0), result.stride(1),
                k_pool.stride(1), table.stride(0), table.shape[1] * k_pool.shape[1], G=group, BLOCK_Q=per_block,
                ROWS=max(16, triton.next_power_of_2(per_block * group)), D=dim, BS=k_pool.shape[1], SOFTCAP=False,
                SINKS=False, STOP_AT_CONTEXT=not args.tiny,  # the interpreter loops over the whole table
                SLOTS=table.shape[1] * k_pool.shape[1] if args.tiny else 0, PRECISION="ieee" if args.tiny else "tf32",
                ONLY=kind, EARLY_V=early, TILE=tile, num_warps=warps, num_stages=stages)
            row: dict[str, Any] = {"kind": name, "rows": rows, "tile": tile, "warps": warps, "stages": stages,
                                   "early_values": early}
            try:
                ms = timed(launch)
                error = float((result.reshape(tokens, -1).float()[mine_tokens] - expected[mine_tokens]).abs().max())
                row.update(ms=ms, limit_ms=own_limit, share_of_limit=own_limit / ms, max_abs_error=error)
            except Exception as exc:  # noqa: BLE001 - a configuration the device cannot run (shared memory)
                row["error"] = f"{type(exc).__name__}: {str(exc)[:200]}"
            found.append(row)
            print(json.dumps(row), flush=True)
            (out / "step_attention_sweep.json").write_text(json.dumps(found, indent=1))
    return found


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--out", required=True)
    parser.add_argument("--tiny", action="store_true", help="small, float32, on the CPU under Triton's interpreter")
    parser.add_argument("--rows", type=int, default=128)
    parser.add_argument("--chunks", type=int, default=2)
    parser.add_argument("--chunk", type=int, default=1024)
    parser.add_argument("--context", type=int, default=3000)
    parser.add_argument("--repeats", type=int, default=20)
    parser.add_argument("--bandwidth", type=terabytes_per_second, default=H200_BANDWIDTH_TB_S, metavar="TB_S",
                        help="memory bandwidth (an H200's)")
    parser.add_argument("--peak-tflops", type=float, default=H200_PEAK_TFLOPS, help="dense bf16 matrix peak (an H200's)")
    parser.add_argument("--sweep", action="store_true",
                        help="also time each kind of request (decoding rows, prompt chunks) alone under every "
                             "kernel configuration of SWEEP, each against its own limit")
    args = parser.parse_args(argv)
    if args.tiny:
        os.environ["TRITON_INTERPRET"] = "1"  # before Triton is imported
        args.rows, args.chunks, args.chunk, args.context, args.repeats = 3, 2, 8, 24, 1
    import torch

    from intelrt.decoding import paged
    from intelrt.decoding.compact import Segment
    from intelrt.decoding.unified_attention import (
        StepQueries,
        block_q,
        query_blocks,
        unified_attention,
    )

    device = torch.device("cpu" if args.tiny else "cuda")
    dtype = torch.float32 if args.tiny else torch.bfloat16
    q_heads, kv_heads, dim, block = (4, 2, 16, 4) if args.tiny else (32, 8, 128, 16)
    requests, blocks = layout(args.rows, args.chunks, args.chunk, args.context, block, 0)
    torch.manual_seed(0)
    k_pool = torch.randn(blocks, block, kv_heads, dim, device=device, dtype=dtype)
    v_pool = torch.randn(blocks, block, kv_heads, dim, device=device, dtype=dtype)
    ids = torch.randperm(blocks - 1)[:blocks - 1] + 1  # scattered blocks, as a busy cache holds them
    width = max(-(-length // block) for _, length in requests)
    table = torch.zeros((len(requests), width), dtype=torch.long)
    used = 0
    for row, (_, length) in enumerate(requests):
        need = -(-length // block)
        table[row, :need] = ids[used:used + need]
        used += need
    table = table.to(device)
    tokens = sum(t for t, _ in requests)
    q = torch.randn(tokens, q_heads, dim, device=device, dtype=dtype)
    starts = [0]
    for count, _ in requests:
        starts.append(starts[-1] + count)
    positions = torch.tensor([p for (count, length) in requests for p in range(length - count, length)], device=device)
    segments = [Segment(starts[i], starts[i + 1], table[i:i + 1], requests[i][1]) for i in range(len(requests))]
    cu_q = torch.tensor(starts, dtype=torch.int32, device=device)
    lengths = torch.tensor([length for _, length in requests], dtype=torch.int32, device=device)
    scaling = dim ** -0.5

    def kernel() -> Any:  # as an engine step runs it: decoding rows and prompt chunks in launches of their own
        return StepQueries(cu_q, lengths, table, tokens).attend(q, k_pool, v_pool, scaling)

    def one_launch() -> Any:
        per_block = block_q(q_heads // kv_heads, max(count for count, _ in requests))
        return unified_attention(q, k_pool, v_pool, cu_q, lengths, table, query_blocks(cu_q, tokens, per_block),
                                 per_block, scaling)

    def torch_way(packed: bool) -> Any:
        step = paged.PackedPrefill(segments, positions, block, device, dtype, packed=packed)
        step.varlen = None
        return step.attend(q.transpose(0, 1)[None], k_pool, v_pool, scaling, None, None)[0]

    expected = paged.PackedPrefill(segments, positions, block, device, torch.float32, packed=False).attend(
        q.float().transpose(0, 1)[None], k_pool.float(), v_pool.float(), scaling, None, None)[0]
    got = kernel().reshape(tokens, -1).float()
    error = float((got - expected).abs().max())
    results: dict[str, Any] = {"device": str(torch.cuda.get_device_name() if device.type == "cuda" else "cpu"),
                               "torch": torch.__version__, "rows": args.rows, "chunks": args.chunks,
                               "chunk": args.chunk, "context": args.context, "tokens": tokens,
                               "max_abs_error": error, "ok": error < (1e-4 if args.tiny else 3e-2)}

    def timed(fn: Any) -> float:
        fn()
        times = []
        for _ in range(args.repeats):
            if device.type == "cuda":
                torch.cuda.synchronize()
            began = time.perf_counter()
            fn()
            if device.type == "cuda":
                torch.cuda.synchronize()
            times.append(time.perf_counter() - began)
        return sorted(times)[len(times) // 2] * 1000

    results["kernel_ms"] = timed(kernel)
    results["limit_ms"] = limit_ms(requests, q_heads, kv_heads, dim, q.element_size(), args.bandwidth,
                                   args.peak_tflops)
    results["share_of_limit"] = results["limit_ms"] / results["kernel_ms"]
    results["one_launch_ms"] = timed(one_launch)
    results["one_launch_max_abs_error"] = float((one_launch().reshape(tokens, -1).float() - expected).abs().max())
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    (out / "step_attention.json").write_text(json.dumps(results, indent=2))
    if args.sweep:
        results["sweep"] = sweep(args, requests, q, k_pool, v_pool, cu_q, lengths, table, tokens, scaling, expected,
                                 timed, out)
    if not args.tiny:
        results["torch_packed_ms"] = timed(lambda: torch_way(True))
        if paged.varlen_paged_attention() is not None:  # FlashAttention over the paged cache, where torch has it
            def varlen_way() -> Any:
                step = paged.PackedPrefill(segments, positions, block, device, dtype, varlen=True)
                return step.attend(q.transpose(0, 1)[None], k_pool, v_pool, scaling, None, None)[0]

            varlen_ms = timed(varlen_way)
            if paged._VARLEN_REFUSED:  # it fell back to gathered blocks: not FlashAttention's time
                results["flash_varlen_refused"] = paged._VARLEN_REFUSED[0]
            else:
                results["flash_varlen_ms"] = varlen_ms
                results["flash_varlen_max_abs_error"] = float((varlen_way().float() - expected).abs().max())
    (out / "step_attention.json").write_text(json.dumps(results, indent=2))
    print(json.dumps(results, indent=2))
    print(f"unified attention: {results['kernel_ms']:.3f} ms, {results['share_of_limit']:.0%} of the device's limit "
          f"({results['limit_ms']:.3f} ms at {args.bandwidth:g} TB/s and {args.peak_tflops:g} TFLOP/s)")
    print(f"{'PASS' if results['ok'] else 'MISS'} unified attention within {'1e-4' if args.tiny else '3e-2'} of the "
          f"float32 reference (max abs error {error:.2e})")
    return 0 if results["ok"] else 1


if __name__ == "__main__":
    sys.exit(main())
