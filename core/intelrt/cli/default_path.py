"""One fresh process on intelrt's default path, for ``intelrt bench --shape NAME --default-path``.

``python -m intelrt.cli.default_path CONFIG.json MODEL_DIR --device cuda`` builds the shape of
``CONFIG.json`` with random weights on the device, plans it as ``intelrt.load`` does by default
(``workload="auto"``: on CUDA an adaptive warm-up, the compiled step built by a compile worker
process while the captured one decodes), times the first call of ``--new-tokens`` tokens (what a fresh process
gets first), waits for the background compile to end, runs one call (the swap and its capture),
then times ``--repeats`` calls (the steady state), and prints one JSON line. The parent runs it with
empty compile caches (``first_answer.run_fresh``).
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path
from typing import Any


def measure(argv: list[str] | None = None) -> dict[str, Any]:
    """The default path's first call and steady state, as a dict."""
    parser = argparse.ArgumentParser(prog="python -m intelrt.cli.default_path")
    parser.add_argument("config", help="the shape's config as JSON (intelrt.cli.shapes)")
    parser.add_argument("model", help="a directory with the shape's config.json and tokenizer")
    parser.add_argument("--device", default=None)
    parser.add_argument("--prompt-tokens", type=int, default=32)
    parser.add_argument("--new-tokens", type=int, default=512)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--wait", type=float, default=900.0, help="seconds to wait for the background compile")
    args = parser.parse_args(argv)
    from transformers import AutoTokenizer

    import intelrt

    from ..runtime.loading import adopt, prepare
    from ..runtime.pretrained_kwargs import from_pretrained_kwargs
    from .bench import bench_backend, timed, timed_median
    from .bench_shapes import decode_bytes, prompt_of
    from .shapes import random_model

    backend = bench_backend(args.device)
    device = backend.device_type
    config = json.loads(Path(args.config).read_text(encoding="utf-8"))
    plan = intelrt.plan(args.model, backend=backend.name)  # the defaults: workload="auto"
    prepare(plan)
    kwargs = from_pretrained_kwargs(plan)
    model = random_model(config, dtype=kwargs.get("dtype"), device=device,
                         attn_implementation=kwargs.get("attn_implementation"))
    loaded = adopt(model, AutoTokenizer.from_pretrained(args.model), plan)
    prompt = prompt_of(args.prompt_tokens)[0]
    settings = {"max_new_tokens": args.new_tokens, "do_sample": False, "pad_token_id": 1, "eos_token_id": None}

    def call() -> Any:
        return loaded.generate_ids(prompt, **settings)

    backend.reset_peak_memory(None)
    first, first_s = timed(backend, call)
    first_report = loaded.last_generation.to_dict() if loaded.last_generation else {}
    decoder = loaded.fast_decoder()
    started = time.perf_counter()
    wait = getattr(decoder, "wait_for_compile", None)  # only the background-compiling decoder has one
    finished = wait(args.wait) if wait is not None else True
    waited = time.perf_counter() - started
    timed(backend, call)  # the swap (if the compile finished) and the compiled step's capture
    steady, seconds, calls = timed_median(backend, call, args.repeats)
    steady_report = loaded.last_generation.to_dict() if loaded.last_generation else {}
    swaps = [{"shape": list(s.shape), "token": s.token, "compile_s": s.compile_seconds}
             for s in getattr(decoder, "swaps", [])]
    return {"device": device, "decode": plan.decisions["decode"].reason, "new_tokens": args.new_tokens,
            "first_s": first_s, "first_tok_s": args.new_tokens / first_s, "first_report": first_report,
            "compile_finished": finished, "waited_s": waited, "swaps": swaps,
            "steady_s": seconds, "steady_tok_s": args.new_tokens / seconds, "steady_calls": calls,
            "steady_report": steady_report, "same_tokens": first == steady, "read_bytes": decode_bytes(model),
            "peak_gib": peak / 2**30 if (peak := backend.memory_in_use(None, peak=True, cached=False)) is not None
            else None}


def main(argv: list[str] | None = None) -> int:
    print(json.dumps(measure(argv), default=str))
    return 0


if __name__ == "__main__":  # pragma: no cover - run as a child process
    sys.exit(main())
