"""Developer probe: the server's decode engine alone under chat-like traffic, and where its device time goes.

    python benchmarks/profile_engine.py --model-dir /tmp/model --out results/engine   # Llama-3.1-8B shape
    python benchmarks/profile_engine.py --tiny --out /tmp/engine                        # the tiny model, CPU

``bench_serve.py`` measures ``intelrt serve`` through HTTP; this runs the same engine the server
builds (``serving.limits.limits_for`` → ``InflightBatch``, warmed up as the server warms it) with
no server around it: ``--concurrency`` requests of ``bench_serve``'s chat workload kept in flight,
a new one joining as one ends, every request to its ``max_tokens`` (no end-of-sequence token). Its
tok/s beside ``bench_serve``'s limit for the same requests says how much of a server cell's gap is
the engine's and how much the layer around it; the engine's own counters split its looks into the
host's time and the wait for the device, and the device time into steps with prompt chunks and
decode-only steps.

Then a second pass of traffic shaped the same (other prompts, seeded apart: the same ones again would
be prefilled from the prefix cache) runs ``--profiled-looks`` looks under ``torch.profiler``:
the device's kernels grouped (matrix products, attention, copies, the rest) with their time per
step, and the costliest kernels by name. Everything is written to ``OUT/engine.json`` as it comes.

``--flat both`` runs it twice, one process after the other, with the steps with prompt chunks compiled
(``DecodeTuning.compiled_flat``, the default) and uncompiled, and prints the ratio.
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
from collections import deque
from pathlib import Path
from typing import Any

import bench_serve

GROUPS = (("attention", ("attention", "flash", "fmha", "attn")),
          ("matrix", ("gemm", "cutlass", "xmma", "nvjet", "cublas", "matmul", "splitk", "aten::mm", "aten::addmm",
                      "aten::bmm", "aten::linear")),
          ("copy", ("memcpy", "memset", "copy_", "aten::copy", "aten::index", "aten::cat", "gather", "scatter")))
"""Kernel (or, on the CPU, operator) name fragments → group; a name matching none is ``other``."""


def group_of(name: str) -> str:
    lowered = name.lower()
    for group, fragments in GROUPS:
        if any(f in lowered for f in fragments):
            return group
    return "other"


def kernel_times(profile: Any, on_device: bool) -> dict[str, float]:
    """Microseconds per kernel name (on the CPU: per operator, its own time without its children)."""
    import torch

    times: dict[str, float] = {}
    if on_device:
        for event in profile.events():
            if event.device_type == torch.autograd.DeviceType.CUDA:
                times[event.name] = times.get(event.name, 0.0) + event.time_range.elapsed_us()
    else:
        for average in profile.key_averages():
            times[average.key] = times.get(average.key, 0.0) + average.self_cpu_time_total
    return times


def drive(batch: Any, work: list[tuple[list[int], int]], concurrency: int, looks: int | None = None
          ) -> tuple[list[bench_serve.Request], int]:
    """Keep ``concurrency`` of ``work`` in flight until all ended (or ``looks`` looks ran): the
    finished requests (prompt tokens, tokens) and the looks run."""
    from intelrt.decoding.sampling import DecodeRequest, SamplingParams

    waiting = deque(work)
    running: dict[int, list[int]] = {}  # handle -> [prompt tokens, tokens so far]
    finished: list[bench_serve.Request] = []
    count = 0
    while (waiting or running) and (looks is None or count < looks):
        joining: list[tuple[list[int], int]] = []
        while waiting and len(running) + len(joining) < concurrency:
            joining.append(waiting.popleft())
        if joining:
            handles = batch.add([DecodeRequest(tuple(ids), SamplingParams(max_new_tokens=new)) for ids, new in joining])
            for handle, (ids, _) in zip(handles, joining, strict=True):
                running[handle] = [len(ids), 0]
        progress = batch.step()
        count += 1
        if progress.failed:
            raise RuntimeError(f"the engine failed requests: {progress.failed}")
        for handle, sampled in progress.outputs.items():
            running[handle][1] += len(sampled)
        for handle in progress.finished:
            prompt, tokens = running.pop(handle)
            finished.append(bench_serve.Request(prompt_tokens=prompt, tokens=tokens))
    for handle in list(running):  # a window cut short: its requests leave the engine
        batch.retire(handle)
    return finished, count


def compare_flat(argv: list[str], out: Path) -> int:
    """``--flat both``: this probe run twice, one process after the other (the engine's KV cache is sized
    for its own step's activations, so the two cannot share one), the steps with chunks compiled then
    uncompiled, into ``OUT/compiled`` and ``OUT/uncompiled``; prints their ratio."""
    import subprocess
    import sys

    runs: dict[str, dict[str, Any]] = {}
    for mode in ("compiled", "uncompiled"):
        where = out / mode
        child = [*argv, "--flat", mode, "--out", str(where)]  # argparse keeps an option's last value
        code = subprocess.run([sys.executable, __file__, *child], check=False).returncode
        if code != 0:
            raise SystemExit(f"profile_engine --flat {mode} exited with {code}; its results so far: {where}")
        runs[mode] = json.loads((where / "engine.json").read_text())
    (out / "flat.json").write_text(json.dumps({mode: {k: run.get(k) for k in (
        "flat_compiled", "load_and_warm_up_s", "warm_up_compiles", "run")} for mode, run in runs.items()}, indent=1))
    compiled, uncompiled = runs["compiled"]["run"], runs["uncompiled"]["run"]

    def chunk_ms(run: dict[str, Any]) -> float:
        return float(run["engine"]["mixed_device_seconds"]) / max(float(run["engine"]["mixed_steps"]), 1.0) * 1e3

    print(f"profile_engine: steps with chunks compiled / uncompiled (two processes, the same traffic): "
          f"{compiled['tok_s']:,.0f} / {uncompiled['tok_s']:,.0f} tok/s = {compiled['tok_s'] / uncompiled['tok_s']:.2f}x; "
          f"steps with chunks {chunk_ms(compiled):.1f} / {chunk_ms(uncompiled):.1f} ms; load and warm-up "
          f"{runs['compiled']['load_and_warm_up_s']:.1f} / {runs['uncompiled']['load_and_warm_up_s']:.1f} s"
          + ("" if runs["compiled"]["flat_compiled"] else " — the steps with chunks compiled in neither run here "
             "(no device graphs or no inductor step), so this compares two uncompiled runs"), flush=True)
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--out", required=True)
    parser.add_argument("--model-dir", default=None, help="where the model is built (kept and reused if there)")
    parser.add_argument("--shape", default="llama-3.1-8b", choices=bench_serve.SHAPES)
    parser.add_argument("--tiny", action="store_true", help="the tiny model on the CPU, lengths scaled down")
    parser.add_argument("--layers", type=int, default=None,
                        help="build the shape with this many decoder layers (its width and lengths unchanged; the "
                        "limit counts the bytes of these layers): a start that compiles in a fraction of the time")
    parser.add_argument("--concurrency", type=int, default=128)
    parser.add_argument("--requests", type=int, default=256)
    parser.add_argument("--profiled-looks", type=int, default=60)
    parser.add_argument("--max-batch-tokens", type=int, default=None, help="the engine's step budget (default: the plan's)")
    parser.add_argument("--top", type=int, default=15)
    parser.add_argument("--peak-tflops", type=float, default=bench_serve.H200_PEAK_TFLOPS,
                        help="the device's bf16 matrix peak for the limit (default: an H200's, measured)")
    parser.add_argument("--bandwidth", type=bench_serve.terabytes_per_second, default=bench_serve.H200_BANDWIDTH_TB_S,
                        metavar="TB_S", help="the device's memory bandwidth in TB/s for the limit (default: an H200's, "
                        "measured)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--flat", choices=("compiled", "uncompiled", "both"), default="compiled",
                        help="the steps with prompt chunks compiled (DecodeTuning.compiled_flat, the default) or not; "
                        "both: one process of each, one after the other on the same traffic, and their ratio")
    args = parser.parse_args(argv)
    if args.flat == "both":
        import sys

        return compare_flat(sys.argv[1:] if argv is None else argv, Path(args.out))
    import tempfile

    import torch

    import intelrt
    from intelrt.decoding.inflight import InflightBatch
    from intelrt.decoding.runner import compiled_frames
    from intelrt.serving.limits import limits_for

    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    results: dict[str, Any] = {"shape": "tiny" if args.tiny else args.shape, "layers": args.layers,
                               "torch": torch.__version__}

    def save() -> None:
        (out / "engine.json").write_text(json.dumps(results, indent=1))

    shape = "tiny" if args.tiny else args.shape
    model_dir = Path(args.model_dir or tempfile.mkdtemp(prefix="profile-engine-"))
    if not (model_dir / "config.json").is_file():
        model_dir.mkdir(parents=True, exist_ok=True)
        bench_serve.build(model_dir, shape, args.layers)
    built = json.loads((model_dir / "config.json").read_text()).get("num_hidden_layers")
    if args.layers is not None and built != args.layers:
        raise SystemExit(f"{model_dir} holds a model of {built} layers, not --layers {args.layers}: give another "
                         "--model-dir")
    began = time.perf_counter()
    engine_options = {} if args.max_batch_tokens is None else {"max_batch_tokens": args.max_batch_tokens}
    loaded = intelrt.load(model_dir, workload="server", **engine_options)
    if args.flat == "uncompiled":
        from dataclasses import replace

        loaded.decode_tuning = replace(loaded.decode_tuning, compiled_flat=False)
    results["compiled_flat"] = loaded.decode_tuning.compiled_flat
    scale = 1 / 32 if args.tiny else 1.0  # bench_serve's
    loaded_at, frames = time.perf_counter(), compiled_frames()
    limits = limits_for(loaded, context_length=bench_serve.server_context(model_dir, scale))  # the memory profile
    sized_at = time.perf_counter()
    results.update(load_s=loaded_at - began, profile_s=sized_at - loaded_at, profile_compiles=compiled_frames() - frames)
    print(f"profile_engine: loaded in {results['load_s']:.1f} s, memory profile {results['profile_s']:.1f} s "
          f"({results['profile_compiles']} frames compiled)", flush=True)
    save()
    decoder = loaded.fast_decoder()
    if decoder is None or limits.engine is None:
        raise SystemExit(f"the server would not run the engine for this model: {limits.engine_blocker}")
    device = loaded.model.device
    on_device = device.type == "cuda"
    batch = InflightBatch(decoder, limits.engine, device, preallocate=True)
    batch.warm_up()
    results.update(device=str(device), load_and_warm_up_s=time.perf_counter() - began,
                   warm_up_s=time.perf_counter() - sized_at, warm_up_compiles=batch.stats.warm_up_compiles,
                   warm_up_captures=batch.stats.warm_up_captures, rows=limits.engine.rows,
                   step_tokens=batch.token_budget, flat_compiled=batch.runner.flat_compiled,
                   describe={k: str(v) for k, v in batch.describe().items()})
    save()
    depth = "" if args.layers is None else f" ({args.layers} layers)"
    print(f"profile_engine: {shape}{depth} on {device}, engine of {limits.engine.rows} rows, {batch.token_budget} tokens a "
          f"step; load and warm-up {results['load_and_warm_up_s']:.1f} s (warm-up {results['warm_up_s']:.1f} s: "
          f"{batch.stats.warm_up_compiles} frames compiled, {batch.stats.warm_up_captures} steps captured); "
          f"steps with chunks compiled: {batch.runner.flat_compiled}", flush=True)
    for note in decoder.notes:
        print(f"profile_engine: note: {note}", flush=True)

    vocab = int(loaded.model.config.get_text_config().vocab_size)
    def chat(seed: int) -> list[tuple[list[int], int]]:
        return [([int(w[1:]) for w in text.split()], new)
                for text, new in bench_serve.workload("chat", args.requests, vocab, seed, scale)]

    work = chat(args.seed)
    hardware = bench_serve.Hardware.of(model_dir, args.peak_tflops, args.bandwidth)
    fields = ("steps", "mixed_steps", "chunk_steps", "prefill_tokens", "looks", "look_seconds", "wait_seconds",
              "mixed_device_seconds", "decode_device_seconds", "compiles_after_warmup")

    def counters() -> dict[str, float]:
        return {name: float(getattr(batch.stats, name)) for name in fields}

    def sync() -> None:
        if on_device:
            torch.cuda.synchronize()

    def timed(traffic: list[tuple[list[int], int]]) -> tuple[list[bench_serve.Request], int, float, dict[str, float]]:
        """``traffic`` driven to its end: the finished requests, the looks, the seconds, the engine's counts."""
        before = counters()
        sync()
        start = time.perf_counter()
        done, looked = drive(batch, traffic, args.concurrency)
        sync()
        return done, looked, time.perf_counter() - start, {k: v - before[k] for k, v in counters().items()}

    # the traffic, unprofiled
    finished, looks, seconds, engine = timed(work)
    tokens = sum(r.tokens for r in finished)
    limit = hardware.limit(finished, args.concurrency)
    run = {"concurrency": args.concurrency, "finished": len(finished), "tokens": tokens, "seconds": seconds,
           "tok_s": tokens / seconds, "limit_tok_s": limit, "share": tokens / seconds / limit if limit else None,
           "engine": engine}
    results["run"] = run
    save()
    busy = engine["look_seconds"] - engine["wait_seconds"]
    print(f"profile_engine: {len(finished)} requests at {args.concurrency} in flight: {tokens / seconds:,.0f} tok/s in "
          f"{seconds:.1f} s" + (f", {run['share']:.0%} of the limit {limit:,.0f}" if limit else "")
          + f"; {engine['steps']:.0f} steps ({engine['mixed_steps']:.0f} with prompt chunks) in {looks} looks; "
          f"looks {engine['look_seconds']:.1f} s = host {busy:.1f} s + device wait {engine['wait_seconds']:.1f} s; "
          f"device: steps with chunks {engine['mixed_device_seconds']:.1f} s "
          f"({engine['mixed_device_seconds'] / max(engine['mixed_steps'], 1) * 1e3:.1f} ms each); "
          f"{engine['chunk_steps']:.0f} steps with chunks (rows or none) of "
          f"{engine['prefill_tokens'] / max(engine['chunk_steps'], 1):.0f} prompt tokens each (budget "
          f"{batch.token_budget}); decode-only "
          f"{engine['decode_device_seconds']:.1f} s "
          f"({engine['decode_device_seconds'] / max(engine['steps'] - engine['mixed_steps'], 1) * 1e3:.2f} ms each); "
          f"compiles after warm-up {engine['compiles_after_warmup']:.0f}", flush=True)

    # traffic of the same shape with other prompts (the same ones would hit the prefix cache), profiled
    activities = [torch.profiler.ProfilerActivity.CPU] + ([torch.profiler.ProfilerActivity.CUDA] if on_device else [])
    before = counters()
    with torch.profiler.profile(activities=activities) as profile:
        drive(batch, chat(args.seed + 1), args.concurrency, looks=args.profiled_looks)
        sync()
    window = {k: v - before[k] for k, v in counters().items()}
    times = kernel_times(profile, on_device)
    steps = max(window["steps"], 1.0)
    groups: dict[str, float] = {}
    for name, us in times.items():
        groups[group_of(name)] = groups.get(group_of(name), 0.0) + us
    total = sum(groups.values())
    results["profile"] = {
        "looks": window["looks"], "window": window, "unit": "device" if on_device else "cpu operators' own time",
        "ms_per_step": {g: us / steps / 1e3 for g, us in sorted(groups.items(), key=lambda kv: -kv[1])},
        "share": {g: us / total for g, us in groups.items()} if total else {},
        "top": [{"name": name[:160], "ms_per_step": us / steps / 1e3, "group": group_of(name)}
                for name, us in sorted(times.items(), key=lambda kv: -kv[1])[:args.top]]}
    save()
    print(f"profile_engine: {window['looks']:.0f} looks profiled, {window['steps']:.0f} steps "
          f"({window['mixed_steps']:.0f} with chunks); {'device' if on_device else 'CPU'} ms per step by group: "
          + ", ".join(f"{g} {ms:.2f} ({results['profile']['share'][g]:.0%})"
                      for g, ms in results["profile"]["ms_per_step"].items()), flush=True)
    for row in results["profile"]["top"]:
        print(f"  {row['ms_per_step']:8.3f} ms/step  {row['group']:<9} {row['name'][:110]}", flush=True)
    median = statistics.median(r.tokens for r in finished) if finished else 0
    print(f"profile_engine: results in {out / 'engine.json'} (median output {median} tokens)", flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
