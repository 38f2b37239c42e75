"""Developer probe: what compiling a server's engine steps costs, on the CPU, at a real model's depth.

    python benchmarks/profile_compile.py --layers 32 --out /tmp/compile           # inductor's cache empty
    python benchmarks/profile_compile.py --layers 32 --out /tmp/compile --warm    # the cache the run before left

An 8B server's start on an H100 is mostly compiling (``docs/performance.md``, "Where an 8B server's
start goes"). Dynamo's tracing, AOT autograd and inductor work op by op over every layer, so that
time grows with the model's depth, not its width. This runs the same engine warm-up on the CPU with
the tiny model's width and ``--layers`` layers: a memory profile on a two-block engine, as a server's
start runs it, then the warm-up of the real engine. The steps with prompt chunks are compiled too
(``DecodeTuning.compiled_flat``). It prints each phase's time, the frames compiled and where the
compile time went (``torch._dynamo``'s compile metrics), cold or with inductor's cache warm.

The plan chooses the Triton attention kernels on the CPU only under Triton's interpreter, so the
script sets ``TRITON_INTERPRET=1`` before anything imports Triton. A stand-in capturer replays each
step instead of recording a device graph, which a CPU has no runtime for. Inductor's cache is
``OUT/inductor-cache`` (``TORCHINDUCTOR_CACHE_DIR``), emptied first unless ``--warm``.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
import time
from dataclasses import replace
from pathlib import Path
from typing import Any

METRICS = ("_compile.compile_inner", "bytecode_tracing", "create_aot_dispatcher_function", "fx_codegen_and_compile")
"""``torch._dynamo.utils.compilation_time_metrics`` keys summed: all of a frame's compile, dynamo's
tracing, AOT autograd (with inductor inside it), inductor's lowering and code generation (absent on a
cache hit)."""


def replaying_capturer(step: Any, warmup: int = 2) -> Any:
    """The CPU's stand-in for a device graph: the step run ``warmup`` times, then replayed by calling it."""
    for _ in range(warmup):
        step()
    return step


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--layers", type=int, default=32, help="decoder layers of the tiny model (Llama-3.1-8B: 32)")
    parser.add_argument("--rows", type=int, default=4)
    parser.add_argument("--max-batch-tokens", type=int, default=64, help="the step's token budget (its flat sizes)")
    parser.add_argument("--warm", action="store_true", help="keep inductor's cache from the run before")
    parser.add_argument("--out", required=True)
    args = parser.parse_args(argv)
    out = Path(args.out)
    cache = out / "inductor-cache"
    if not args.warm:
        shutil.rmtree(cache, ignore_errors=True)
    out.mkdir(parents=True, exist_ok=True)
    if "torch" in sys.modules:
        raise SystemExit("profile_compile: torch was imported before the script could set its environment")
    os.environ["TRITON_INTERPRET"] = "1"
    os.environ["TORCHINDUCTOR_CACHE_DIR"] = str(cache)
    os.environ.setdefault("HF_HUB_OFFLINE", "1")

    import torch
    from torch._dynamo.utils import compilation_time_metrics, counters

    import intelrt
    from intelrt.decoding.engine import FastDecoder
    from intelrt.decoding.inflight import InflightBatch
    from intelrt.decoding.memory import EngineSize, MemoryBudget, size_engine
    from intelrt.decoding.runner import compiled_frames
    from intelrt.decoding.tuning import DecodeTuning
    from intelrt.tiny import build_causal_lm

    model_dir = out / f"tiny-{args.layers}-layers"
    if not (model_dir / "config.json").is_file():
        model_dir.mkdir(parents=True, exist_ok=True)
        build_causal_lm(model_dir, layers=args.layers)
    loaded = intelrt.load(model_dir)
    planned = loaded.plan.decided.decode
    if planned is None or not planned.attention_kernel:
        raise SystemExit(f"profile_compile: the plan has no decode step with the Triton attention here ({planned})")
    choice = replace(planned, graphs="cuda", warmup=None, compile="inductor")
    tuning = DecodeTuning(block_size=4, max_batch_tokens=args.max_batch_tokens, attention_splits=2)
    decoder = FastDecoder(loaded.model, choice, replaying_capturer, tuning, backend=loaded.plan.backend)
    decoder.prepare()
    shape = decoder.kv_shape()
    context = 4 * args.max_batch_tokens
    size = size_engine(shape, MemoryBudget(64 * context * shape.bytes_per_token, "the probe's budget"), tuning,
                       rows=args.rows, context=context)
    results: dict[str, Any] = {"layers": args.layers, "warm": args.warm, "torch": torch.__version__}

    began, frames = time.perf_counter(), compiled_frames()
    probe = InflightBatch(decoder, EngineSize(size.rows, size.context, size.block_size, 2, size.max_batch_tokens,
                                              size.bytes_per_token), loaded.model.device, preallocate=True)
    probe.profile()  # as a server's memory profile: the widest decode and flat steps compile here
    del probe
    results.update(profile_s=time.perf_counter() - began, profile_compiles=compiled_frames() - frames)
    batch = InflightBatch(decoder, size, loaded.model.device, preallocate=True)
    batch.warm_up()
    stats = batch.stats
    results.update(warm_up_s=stats.warm_up_seconds, warm_up_compiles=stats.warm_up_compiles,
                   warm_up_captures=stats.warm_up_captures, flat_compiled=batch.runner.flat_compiled,
                   notes=list(decoder.notes),
                   compile_s={key: sum(compilation_time_metrics.get(key, [])) for key in METRICS},
                   frames_s=[round(s, 2) for s in compilation_time_metrics.get("_compile.compile_inner", [])],
                   inductor_cache={k: v for k, v in counters["inductor"].items() if k.startswith("fxgraph_cache")})
    (out / "compile.json").write_text(json.dumps(results, indent=1))
    spent = results["compile_s"]
    print(f"profile_compile: {args.layers} layers, inductor's cache {'warm' if args.warm else 'empty'} "
          f"(torch {torch.__version__}): memory profile {results['profile_s']:.1f} s "
          f"({results['profile_compiles']} frames compiled), warm-up {results['warm_up_s']:.1f} s "
          f"({results['warm_up_compiles']} frames, {results['warm_up_captures']} steps captured); steps with chunks "
          f"compiled: {results['flat_compiled']}", flush=True)
    print(f"profile_compile: compiling {spent['_compile.compile_inner']:.1f} s in {len(results['frames_s'])} frames "
          f"{results['frames_s']}: dynamo's tracing {spent['bytecode_tracing']:.1f} s, AOT autograd and inductor "
          f"{spent['create_aot_dispatcher_function']:.1f} s (inductor's code generation "
          f"{spent['fx_codegen_and_compile']:.1f} s); inductor's cache {results['inductor_cache']}", flush=True)
    for note in decoder.notes:
        print(f"profile_compile: note: {note}", flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
