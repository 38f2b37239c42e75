"""Time to the first answer: a fresh process that loads a model and generates once (issue 18).

``python -m intelrt.cli.first_answer MODE MODEL`` is that process; ``first_answer_rows`` starts it
(and ``intelrt run`` for the one-shot row) with cold caches, then again with the caches the first
run left, and times each from the outside: interpreter start, imports, loading, compiling and
generating — what a user waits for. Modes:

* ``plain-eager``: ``from_pretrained`` + tokenizer, ``model.generate``;
* ``plain-static``: the same with ``cache_implementation="static"`` (transformers compiles the
  forward on a GPU by itself);
* ``intelrt``: ``intelrt.load`` + ``generate_ids``, with ``--workload`` / ``--warmup``.

The child prints one JSON line: its phases, the new tokens, the path intelrt took and inductor's
FX-graph cache counters (hits and misses: a warm run finds every compiled graph).
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import subprocess
import sys
import tempfile
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

log = logging.getLogger(__name__)

MODES = ("plain-eager", "plain-static", "intelrt")
CACHE_VARIABLES = ("TORCHINDUCTOR_CACHE_DIR", "TRITON_CACHE_DIR", "INTELRT_COMPILE_CACHE")
"""Where torch, Triton and intelrt keep compiled code: fresh (empty) folders make a run cold."""


def child(argv: Sequence[str] | None = None) -> dict[str, Any]:
    """Load and generate once, as ``MODE`` says; the measurements as a dict."""
    parser = argparse.ArgumentParser(prog="python -m intelrt.cli.first_answer")
    parser.add_argument("mode", choices=MODES)
    parser.add_argument("model")
    parser.add_argument("--device", default=None)
    parser.add_argument("--new-tokens", type=int, default=64)
    parser.add_argument("--prompt-tokens", type=int, default=32)
    parser.add_argument("--workload", default="auto")
    parser.add_argument("--warmup", default="auto")
    args = parser.parse_args(argv)
    started = time.perf_counter()
    import torch

    from .bench import bench_backend

    backend = bench_backend(args.device)  # in the import phase: the same cost for every mode
    device = backend.device_type
    imported = time.perf_counter()
    prompt = torch.randint(2, 384, (args.prompt_tokens,), generator=torch.Generator().manual_seed(0)).tolist()
    settings = {"max_new_tokens": args.new_tokens, "do_sample": False, "eos_token_id": None, "pad_token_id": 1}
    report: dict[str, Any] = {}
    if args.mode == "intelrt":
        import intelrt

        loaded = intelrt.load(args.model, backend=backend.name, workload=args.workload, warmup=args.warmup)
        ready = time.perf_counter()
        tokens = loaded.generate_ids(prompt, **settings)
        report = loaded.last_generation.to_dict() if loaded.last_generation else {}
        report["plan"] = loaded.plan.decisions["decode"].reason
    else:
        from transformers import AutoModelForCausalLM, AutoTokenizer

        dtype = torch.float32 if backend.computes_on_host else torch.bfloat16
        model = AutoModelForCausalLM.from_pretrained(args.model, dtype=dtype, device_map=device).eval()
        AutoTokenizer.from_pretrained(args.model)
        ready = time.perf_counter()
        extra = {"cache_implementation": "static"} if args.mode == "plain-static" else {}
        ids = torch.tensor([prompt], device=model.device)
        with torch.inference_mode():
            out = model.generate(input_ids=ids, attention_mask=torch.ones_like(ids), **settings, **extra)
        tokens = out[0, ids.shape[1]:].tolist()
    backend.synchronize()
    done = time.perf_counter()
    from torch._dynamo.utils import counters

    inductor = counters["inductor"]
    return {"mode": args.mode, "device": device, "import_s": imported - started, "load_s": ready - imported,
            "generate_s": done - ready, "tokens": tokens, "report": report,
            "fxgraph_cache_hit": int(inductor["fxgraph_cache_hit"]),
            "fxgraph_cache_miss": int(inductor["fxgraph_cache_miss"])}


@dataclass
class Answer:
    """One fresh process's time to its first answer."""

    name: str
    cache: str
    """``cold`` (empty compile caches) or ``warm`` (those the cold run left)."""
    seconds: float
    """Wall time of the whole process, from start to exit."""
    detail: dict[str, Any]


def run_fresh(command: list[str], caches: Path, timeout: float) -> tuple[float, dict[str, Any]]:
    """Run ``command`` in a fresh process whose compile caches live under ``caches``; its wall time
    and the JSON it printed (``{}`` for a command that prints none)."""
    env = {**os.environ, **{name: str(caches / name.lower()) for name in CACHE_VARIABLES}}
    start = time.perf_counter()
    done = subprocess.run(command, env=env, capture_output=True, text=True, timeout=timeout, check=False)
    seconds = time.perf_counter() - start
    if done.returncode != 0:
        raise RuntimeError(f"{' '.join(command[:4])} … failed ({done.returncode}): {done.stderr[-1500:]}")
    return seconds, _json_output(done.stdout)


def _json_output(stdout: str) -> dict[str, Any]:
    """What a command printed as JSON: the whole output (``intelrt run --json``), else its last
    line that is a JSON object (this module's child, after any library's own output)."""
    try:
        data = json.loads(stdout)
    except json.JSONDecodeError:
        lines = [line for line in stdout.splitlines() if line.startswith("{")]
        data = json.loads(lines[-1]) if lines else {}
    return data if isinstance(data, dict) else {}


def first_answer_rows(model: Path, device: str, *, new_tokens: int = 64, prompt_tokens: int = 32,
                      timeout: float = 900.0, modes: Sequence[str] = ("plain-eager", "plain-static", "intelrt",
                                                                     "intelrt run")) -> list[Answer]:
    """Each mode cold (fresh compile caches) and then warm (the caches its cold run left)."""
    if os.environ.get("PYTHONDONTWRITEBYTECODE"):
        log.warning("PYTHONDONTWRITEBYTECODE is set: every fresh process compiles the Python source of torch, "
                    "transformers and intelrt anew, which an installed environment does once, so every row "
                    "includes that time; unset it to time what a user's installation does")
    rows: list[Answer] = []
    for mode in modes:
        caches = Path(tempfile.mkdtemp(prefix="intelrt-first-answer-"))
        if mode == "intelrt run":
            command = [sys.executable, "-m", "intelrt.cli", "run", str(model), "--backend", device, "--max-new-tokens",
                       str(new_tokens), "--json"]
        else:
            command = [sys.executable, "-m", "intelrt.cli.first_answer", mode, str(model), "--device", device,
                       "--new-tokens", str(new_tokens), "--prompt-tokens", str(prompt_tokens)]
        for cache in ("cold", "warm"):
            seconds, detail = run_fresh(command, caches, timeout)
            rows.append(Answer(mode, cache, seconds, detail))
    return rows


if __name__ == "__main__":
    print(json.dumps(child()))
