"""The first minutes of a fresh process (issue 39): tokens per window over the first ``--seconds``
of a process that loads a model and generates back to back, for plain ``generate``, plain static
cache + compile and intelrt's default path, with cold and warm compile caches.

    python benchmarks/bench_first_minute.py --shape Granite-3.1-2B --out results/first-minute   # an H200
    python benchmarks/bench_first_minute.py --tiny --out /tmp/first-minute                    # the CPU, ~1 min
    python benchmarks/bench_first_minute.py --chart results/first-minute/*.json --out docs/data

Each run is a fresh process (``--child``), timed from its start (interpreter, imports, building the
model, compiling): the model is built from the shape's config with random weights on the device (no
download); every call generates ``--new-tokens`` (128) tokens after a ``--prompt-tokens`` (32) prompt
of random ids, greedy, no end-of-sequence token; the first call streams (its first token's time is
kept), later calls count their tokens when they return. Runs, in order:

* ``plain``: ``model.generate`` as transformers does by default (dynamic cache, eager);
* ``plain-compiled:cold`` (and ``:warm`` with ``--runs``): ``model.generate(cache_implementation=
  "static")``, which transformers compiles by itself on a GPU (with ``--compile``, a ``CompileConfig``
  of that backend; on the CPU with its switch for every device);
* ``intelrt:cold`` then ``intelrt:warm``: ``runtime.loading.adopt`` of the same model object with
  the plan ``intelrt.load`` makes by default (``workload="auto"``), so ``Loaded.generate_ids``; with
  ``--compile`` (``--tiny``: the CPU, whose default compiles nothing) the plan names that compiler,
  which plans the same adaptive step (the compile worker, the swap).

``cold``: empty torch, Triton and intelrt compile caches (``TORCHINDUCTOR_CACHE_DIR``,
``TRITON_CACHE_DIR``, ``INTELRT_COMPILE_CACHE`` in folders of their own); ``warm``: the caches the cold
run of the same kind left. ``OUT/<shape>.json`` is rewritten as the calls come (a run cut short keeps
what it measured) and ends with the issue's rules, each PASS or MISS: intelrt's first token no later
than plain's + 1 s; in every window from plain's first token at least plain's tokens; by 60 s at
least plain static + compile's tokens, and from then on at least 1.5x its rate; warm, the first call
already compiled. ``--chart`` draws the runs' tokens per window (a PNG with matplotlib where it is
installed, and a Markdown table) for docs/performance.md.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

DEFAULT_RUNS = ("plain", "plain-compiled:cold", "intelrt:cold", "intelrt:warm@40")
"""The runs, in order; the warm run is judged by its first call, so 40 s of it do (each shape's
command stays under 9 minutes on an H200)."""
CACHE_VARIABLES = ("TORCHINDUCTOR_CACHE_DIR", "TRITON_CACHE_DIR", "INTELRT_COMPILE_CACHE")
"""Where torch, Triton and intelrt keep compiled code (as ``intelrt.cli.first_answer`` empties them)."""
STARTED = "FIRST_MINUTE_STARTED"
"""The wall-clock time (``time.time()``) at which the parent started a run's process."""
GRACE = 20.0
"""Seconds past ``--seconds`` a run may take to end its last call and exit before it is stopped."""


# -- one run: a fresh process -------------------------------------------------------------------------

class FirstTokens:
    """A streamer (transformers' ``put``/``end``) keeping when each new token came."""

    def __init__(self, started: float) -> None:
        self.started, self.puts = started, 0
        self.times: list[float] = []

    def put(self, value: Any) -> None:
        self.puts += 1
        if self.puts > 1:  # the first put is the prompt
            self.times += [time.time() - self.started] * int(value.numel())

    def end(self) -> None:
        pass


def emit(event: dict[str, Any]) -> None:
    print(json.dumps(event), flush=True)


def child(args: argparse.Namespace) -> int:
    started = float(os.environ[STARTED])
    import torch
    from transformers import AutoTokenizer

    from intelrt.cli.shapes import random_model

    kind = args.child.split(":")[0]
    config = json.loads(Path(args.config).read_text(encoding="utf-8"))
    device = args.device
    dtype = torch.float32 if device == "cpu" else torch.bfloat16
    prompt = torch.randint(2, min(384, int(config["vocab_size"])), (args.prompt_tokens,),
                           generator=torch.Generator().manual_seed(0)).tolist()
    settings: dict[str, Any] = {"max_new_tokens": args.new_tokens, "do_sample": False, "eos_token_id": None,
                                "pad_token_id": 1}
    loaded: Any = None
    if kind == "intelrt":
        import intelrt
        from intelrt.runtime.loading import adopt, prepare
        from intelrt.runtime.pretrained_kwargs import from_pretrained_kwargs

        plan = intelrt.plan(args.model, backend=device, **({"compile": args.compile} if args.compile else {}))
        prepare(plan)
        kwargs = from_pretrained_kwargs(plan)
        model = random_model(config, dtype=kwargs.get("dtype") or dtype, device=device,
                             attn_implementation=kwargs.get("attn_implementation"))
        loaded = adopt(model, AutoTokenizer.from_pretrained(args.model), plan)
        decode = plan.decisions["decode"]
        emit({"event": "ready", "at": time.time() - started, "plan": decode.reason,
              "warmup": getattr(decode.value, "warmup", None)})

        def call(streamer: Any) -> tuple[int, dict[str, Any]]:
            tokens = loaded.generate_ids(prompt, streamer=streamer, **settings)
            report = loaded.last_generation
            return len(tokens), {"warmup": report.warmup, "notes": report.notes} if report else {}
    else:
        model = random_model(config, dtype=dtype, device=device)
        if kind == "plain-compiled":
            from transformers import CompileConfig

            settings["cache_implementation"] = "static"  # transformers compiles its forward by itself on a GPU
            if args.compile:
                compile_config = CompileConfig(backend=args.compile, mode="default")
                if device == "cpu":
                    # its switch for every device ("useful for testing purposes", says its comment)
                    compile_config._compile_all_devices = True  # type: ignore[assignment]
                settings["compile_config"] = compile_config
        ids = torch.tensor([prompt], device=device)
        emit({"event": "ready", "at": time.time() - started})

        def call(streamer: Any) -> tuple[int, dict[str, Any]]:
            with torch.inference_mode():
                out = model.generate(input_ids=ids, attention_mask=torch.ones_like(ids), streamer=streamer,
                                     **settings)
            return int(out.shape[1] - ids.shape[1]), {}

    calls = 0
    while time.time() - started < args.seconds:
        streamer = FirstTokens(started) if calls == 0 else None
        began = time.time() - started
        count, extra = call(streamer)
        ended = time.time() - started
        event = {"event": "call", "start": round(began, 3), "end": round(ended, 3), "tokens": count, **extra}
        if streamer is not None:
            event["token_times"] = [round(t, 3) for t in streamer.times]
        emit(event)
        calls += 1
    end: dict[str, Any] = {"event": "end", "at": time.time() - started}
    decoder = getattr(getattr(loaded, "_generator", None), "_decoder", None) if loaded is not None else None
    if decoder is not None:
        end["swaps"] = [{"shape": list(s.shape), "token": s.token, "compile_s": round(s.compile_seconds, 1)}
                        for s in getattr(decoder, "swaps", [])]
        end["decoder_notes"] = list(decoder.notes)
    from torch._dynamo.utils import counters

    end["inductor"] = {k: int(v) for k, v in counters["inductor"].items() if k.startswith("fxgraph")}
    emit(end)
    return 0


# -- the parent: runs, windows, rules ----------------------------------------------------------------

def windows(run: dict[str, Any], seconds: float, window: float) -> list[int]:
    """Tokens per window from the process start: the streamed first call's tokens when they came,
    a later call's when it returned."""
    counts = [0] * int(seconds // window)
    for call in run.get("calls", []):
        times = call.get("token_times") or [call["end"]] * call["tokens"]
        for at in times:
            index = int(at // window)
            if index < len(counts):
                counts[index] += 1
    return counts


def first_token(run: dict[str, Any]) -> float | None:
    calls = run.get("calls", [])
    if not calls:
        return None
    times = calls[0].get("token_times")
    return times[0] if times else calls[0]["end"]


def rules(runs: dict[str, dict[str, Any]], seconds: float, window: float) -> list[dict[str, Any]]:
    """The issue's rules over the runs measured so far (a rule whose runs are missing is left out)."""
    found: list[dict[str, Any]] = []
    plain, compiled = runs.get("plain"), runs.get("plain-compiled:cold")
    cold, warm = runs.get("intelrt:cold"), runs.get("intelrt:warm")
    if plain and cold:
        ours, theirs = first_token(cold), first_token(plain)
        if ours is not None and theirs is not None:
            found.append({"rule": "first token no later than plain generate's + 1 s", "ok": ours <= theirs + 1.0,
                          "intelrt_s": round(ours, 2), "plain_s": round(theirs, 2)})
            a, b = windows(cold, seconds, window), windows(plain, seconds, window)
            start = int(theirs // window)
            short = [i * window for i in range(start, len(a)) if a[i] < b[i]]
            found.append({"rule": "every window from plain's first token: at least plain generate's tokens",
                          "ok": not short, "windows_short_s": short})
    if compiled and cold:
        a, b = windows(cold, seconds, window), windows(compiled, seconds, window)
        minute = int(60 // window)
        if len(a) >= minute:
            found.append({"rule": "by 60 s at least plain static cache + compile's tokens",
                          "ok": sum(a[:minute]) >= sum(b[:minute]), "intelrt": sum(a[:minute]),
                          "plain_compiled": sum(b[:minute])})
        later_a, later_b = sum(a[minute:]), sum(b[minute:])
        if later_b:
            found.append({"rule": "after 60 s at least 1.5x plain static cache + compile's rate",
                          "ok": later_a >= 1.5 * later_b, "ratio": round(later_a / later_b, 2)})
    if warm and cold and warm.get("calls"):
        first = warm["calls"][0]
        steady = [c for c in cold.get("calls", [])[-5:] if c.get("warmup") == "compiled"]
        rate = first["tokens"] / max(1e-9, first["end"] - first["token_times"][0]) if first.get("token_times") else 0.0
        best = max((c["tokens"] / max(1e-9, c["end"] - c["start"]) for c in steady), default=None)
        found.append({"rule": "warm cache: the first call already runs compiled", "ok": first.get("warmup") == "compiled",
                      "first_call_tok_s": round(rate, 1), "cold_steady_tok_s": None if best is None else round(best, 1)})
    return found


def measure(args: argparse.Namespace) -> dict[str, Any]:
    import torch

    from intelrt.cli.shapes import save_shape, shape, tiny_config

    device = "cpu" if args.tiny or not torch.cuda.is_available() else "cuda"
    config = tiny_config(shape(args.shape), vocab_size=384) if args.tiny else shape(args.shape)
    name = args.shape + (" (tiny)" if args.tiny else "")
    out = Path(args.out)
    slug = name.replace(" ", "-").replace("(", "").replace(")", "")
    work = out / f"{slug}-work"
    shutil.rmtree(work, ignore_errors=True)
    save_shape(work / "model", config, weights=False)
    config_file = work / "config.json"
    config_file.write_text(json.dumps(config), encoding="utf-8")
    results: dict[str, Any] = {"shape": name, "device": device, "seconds": args.seconds, "window": args.window,
                               "prompt_tokens": args.prompt_tokens, "new_tokens": args.new_tokens,
                               "torch": torch.__version__, "gpu": torch.cuda.get_device_name() if device == "cuda" else None,
                               "runs": {}, "rules": []}
    target = out / f"{slug}.json"

    def save() -> None:
        results["rules"] = rules(results["runs"], args.seconds, args.window)
        for run in results["runs"].values():
            run["windows"] = windows(run, run["seconds"], args.window)
        temporary = target.with_suffix(".tmp")
        temporary.write_text(json.dumps(results, indent=1), encoding="utf-8")
        os.replace(temporary, target)

    for entry in args.runs.split(","):
        spec, _, length = entry.partition("@")
        seconds = float(length) if length else args.seconds
        kind, _, cache = spec.partition(":")
        caches = work / "caches" / kind
        if cache == "cold":
            shutil.rmtree(caches, ignore_errors=True)
        env = {**os.environ, **{var: str(caches / var.lower()) for var in CACHE_VARIABLES},
               STARTED: repr(time.time())}
        command = [sys.executable, __file__, "--child", spec, "--model", str(work / "model"), "--config",
                   str(config_file), "--device", device, "--seconds", str(seconds), "--prompt-tokens",
                   str(args.prompt_tokens), "--new-tokens", str(args.new_tokens),
                   *(["--compile", args.compile] if args.compile else [])]
        run: dict[str, Any] = {"calls": [], "errors": "", "seconds": seconds}
        results["runs"][spec] = run
        print(f"[first-minute] {name}: {spec} …", file=sys.stderr, flush=True)
        process = subprocess.Popen(command, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                                   start_new_session=True)
        stderr: list[str] = []
        reader = threading.Thread(target=stderr.extend, args=(process.stderr or [],), daemon=True)
        reader.start()
        stop = threading.Timer(seconds + GRACE, _stop, (process,))
        stop.start()
        for line in process.stdout or []:
            if not line.startswith("{"):
                continue
            event = json.loads(line)
            kind_of = event.pop("event")
            if kind_of == "call":
                run["calls"].append(event)
            else:
                run[kind_of] = event
            save()
        process.wait()
        stop.cancel()
        reader.join(5)
        run["returncode"] = process.returncode
        if process.returncode != 0:
            run["errors"] = "".join(stderr)[-3000:]
        save()
        calls = run["calls"]
        print(f"[first-minute] {spec}: {len(calls)} calls, {sum(c['tokens'] for c in calls)} tokens, first token at "
              f"{first_token(run)} s", file=sys.stderr, flush=True)
    for rule in results["rules"]:
        print(f"{'PASS' if rule['ok'] else 'MISS'} {rule['rule']}: "
              + ", ".join(f"{k}={v}" for k, v in rule.items() if k not in ("rule", "ok")))
    print(f"wrote {target}")
    return results


def _stop(process: subprocess.Popen[str]) -> None:
    try:
        os.killpg(process.pid, signal.SIGKILL)
    except OSError:
        pass


# -- the chart ---------------------------------------------------------------------------------------

def text_chart(results: dict[str, Any]) -> str:
    """The runs' tokens per window as a Markdown table (a row per window, a column per run), with
    each run's total by 60 s and overall."""
    runs = results["runs"]
    window = results["window"]
    names = list(runs)
    longest = max((len(r.get("windows", [])) for r in runs.values()), default=0)
    lines = [f"{results['shape']} on {results.get('gpu') or results['device']} (torch {results.get('torch')}): "
             f"tokens per {window:g} s window from the process's start (prompt {results['prompt_tokens']}, "
             f"{results['new_tokens']} new tokens per call)", "",
             "| from | " + " | ".join(names) + " |", "| --- |" + " --- |" * len(names)]

    def cell(run: str, index: int) -> str:
        counts = runs[run].get("windows", [])
        return str(counts[index]) if index < len(counts) else ""

    for index in range(longest):
        lines.append(f"| {index * window:g} s | " + " | ".join(cell(r, index) for r in names) + " |")
    minute = int(60 // window)
    lines.append("| by 60 s | " + " | ".join(str(sum(runs[r].get("windows", [])[:minute])) for r in names) + " |")
    lines.append("| in all | " + " | ".join(str(sum(runs[r].get("windows", []))) for r in names) + " |")
    return "\n".join(lines)


def chart(files: list[str], out: Path) -> None:
    out.mkdir(parents=True, exist_ok=True)
    for file in files:
        results = json.loads(Path(file).read_text(encoding="utf-8"))
        stem = Path(file).stem
        (out / f"{stem}.md").write_text(text_chart(results) + "\n", encoding="utf-8")
        try:
            import matplotlib

            matplotlib.use("Agg")
            import matplotlib.pyplot as plt
        except ImportError:
            print(f"matplotlib is not installed: wrote {out / stem}.md only")
            continue
        figure, axis = plt.subplots(figsize=(8, 4))
        window = results["window"]
        for run, data in results["runs"].items():
            counts = data.get("windows", [])
            axis.step([i * window for i in range(len(counts))], [c / window for c in counts], where="post", label=run)
        axis.set_xlabel("seconds since the process started")
        axis.set_ylabel("tokens per second (5 s windows)")
        axis.set_title(f"{results['shape']}, first {results['seconds']:g} s of a fresh process")
        axis.legend()
        figure.tight_layout()
        figure.savefig(out / f"{stem}.png", dpi=120)
        print(f"wrote {out / stem}.png and .md")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--shape", default="Granite-3.1-2B")
    parser.add_argument("--tiny", action="store_true", help="the shape at a tiny size on the CPU, short runs")
    parser.add_argument("--out", default="results/first-minute")
    parser.add_argument("--seconds", type=float, default=None, help="each run's length (default 120; --tiny 15)")
    parser.add_argument("--window", type=float, default=5.0)
    parser.add_argument("--runs", default=None,
                        help="runs in order, each KIND[:cold|warm][@SECONDS] (default length: --seconds; default "
                             f"runs: {','.join(DEFAULT_RUNS)}, with --tiny each of --seconds)")
    parser.add_argument("--prompt-tokens", type=int, default=32)
    parser.add_argument("--new-tokens", type=int, default=128)
    parser.add_argument("--compile", default=None,
                        help="the compiler both compiled paths use (default: each one's own; --tiny: eager, dynamo's "
                             "trace without code generation, so the CPU run takes about a minute)")
    parser.add_argument("--chart", nargs="+", default=None, help="draw these result files into --out")
    parser.add_argument("--child", default=None, help=argparse.SUPPRESS)
    parser.add_argument("--model", default=None, help=argparse.SUPPRESS)
    parser.add_argument("--config", default=None, help=argparse.SUPPRESS)
    parser.add_argument("--device", default=None, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.seconds is None:
        args.seconds = 15.0 if args.tiny else 120.0
    if args.runs is None:
        args.runs = ",".join(run.split("@")[0] if args.tiny else run for run in DEFAULT_RUNS)
    if args.tiny and args.compile is None:
        args.compile = "eager"
    if args.child:
        return child(args)
    if args.chart:
        chart(args.chart, Path(args.out))
        return 0
    Path(args.out).mkdir(parents=True, exist_ok=True)
    measure(args)
    return 0


if __name__ == "__main__":
    sys.exit(main())
