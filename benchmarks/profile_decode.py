"""Developer probe: where a graph-replayed decode step spends its time, per inductor setting.

    python benchmarks/profile_decode.py [--tiny] [--variants default,freezing,...]

For each variant it compiles and captures the batch-1 step on the Qwen3-0.6B-shaped model,
times 256 new tokens, then profiles 20 graph replays: kernels per step, device time per step and
the most expensive kernels. Used to choose the cuda backend's decode settings (docs/performance.md).
"""

from __future__ import annotations

import argparse
import tempfile
import time
from functools import partial
from pathlib import Path
from typing import Any

VARIANTS: dict[str, dict[str, object]] = {
    # the model's own forward
    "default": {},
    "freezing": {"freezing": True},
    "freezing+eager-attn": {"freezing": True, "_attention": "eager"},
    "freezing+cdt": {"freezing": True, "coordinate_descent_tuning": True},
    "freezing+cdt+autotune": {"freezing": True, "coordinate_descent_tuning": True, "max_autotune_gemm": True},
    # intelrt's compact step (decoding/compact.py); "mm": projections as matmuls, not multiply-and-sum
    "compact": {"_step": "compact"},
    "compact+cdt": {"_step": "compact", "coordinate_descent_tuning": True},
    "compact+cdt+mm": {"_step": "compact", "coordinate_descent_tuning": True, "_gemv_rows": 0},
    "compact+freezing+cdt": {"_step": "compact", "freezing": True, "coordinate_descent_tuning": True},
    "compact+cdt+split64": {"_step": "compact", "coordinate_descent_tuning": True, "_split_target": 64},
    "compact+cdt+onesplit": {"_step": "compact", "coordinate_descent_tuning": True, "_split_target": 1},
    "compact+cdt+unfused": {"_step": "compact", "coordinate_descent_tuning": True, "_fused": False},
    "compact+cdt+mm+unfused": {"_step": "compact", "coordinate_descent_tuning": True, "_gemv_rows": 0,
                               "_fused": False},
    "compact+cdt+nofold": {"_step": "compact", "coordinate_descent_tuning": True, "_fold": False},
    "compact+cdt+combine": {"_step": "compact", "coordinate_descent_tuning": True, "_merge": False},
    "compact+cdt+nopf": {"_step": "compact", "coordinate_descent_tuning": True, "_prefetch": "off"},
    "compact+cdt+pflate": {"_step": "compact", "coordinate_descent_tuning": True, "_prefetch": "late"},
    "compact+cdt+pfqkv": {"_step": "compact", "coordinate_descent_tuning": True, "_pf_weights": ("next_qkv",)},
    "compact+cdt+pfdownqkv": {"_step": "compact", "coordinate_descent_tuning": True,
                              "_pf_weights": ("down_proj", "next_qkv")},
    "compact+cdt+pflayer": {"_step": "compact", "coordinate_descent_tuning": True,
                            "_pf_weights": ("o_proj", "gate_up", "down_proj")},
    "compact+cdt+eagerrecord": {"_step": "compact", "coordinate_descent_tuning": True, "_record": False},
    "compact+cdt+nopdl": {"_step": "compact", "coordinate_descent_tuning": True, "_pdl": False},
}
"""``_step``: the decode decision's step; ``_fused``: its ``attention_kernel`` (the one-kernel
decode attention, decoding/triton_attention.py, where available); the other ``_`` knobs are
``DecodeTuning`` fields (``TUNING``); the rest are inductor settings. Unnamed knobs take their
defaults."""
TUNING = {"_gemv_rows": "gemv_max_rows", "_fold": "fold_norms",
          "_pf_weights": "prefetch_weights", "_record": "compiled_record", "_split_target": "attention_splits",
          "_merge": "merge_in_kernel", "_prefetch": "prefetch", "_pdl": "programmatic_launch"}


def main() -> None:
    import torch

    import intelrt
    from intelrt.backends.decode_rules import triton_installed
    from intelrt.cli.bench import build_model, timed_median
    from intelrt.decoding.engine import FastDecoder
    from intelrt.decoding.keywords import DecodeOptions
    from intelrt.decoding.tuning import DecodeTuning
    from intelrt.host.manager import get_host
    from intelrt.plugin import DecodeChoice

    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--tiny", action="store_true")
    parser.add_argument("--top", type=int, default=12, help="kernels listed per variant")
    parser.add_argument("--variants", default="compact+cdt,compact+cdt+mm")
    parser.add_argument("--calls", type=int, default=5, help="timed 256-token calls per variant (median shown)")
    parser.add_argument("--budget", type=float, default=420.0, help="seconds; later variants are skipped")
    args = parser.parse_args()
    import logging

    logging.basicConfig(level=logging.WARNING)
    logging.getLogger("intelrt.decoding.engine").setLevel(logging.DEBUG)  # full tracebacks of fallbacks
    start = time.perf_counter()
    workdir = Path(tempfile.mkdtemp(prefix="intelrt-probe-"))
    device = "cuda" if torch.cuda.is_available() else "cpu"
    build_model(workdir, tiny=args.tiny, device=device)
    loaded = intelrt.load(workdir, backend=device)
    model = loaded.model
    kind = loaded.plan.decided.decode.graphs if loaded.plan.decided.decode else None
    capturer = get_host().graph_capturer(loaded.plan.backend, kind) if kind else None
    ids = torch.randint(2, 384, (1, 32), generator=torch.Generator().manual_seed(0)).to(model.device)
    mask = torch.ones_like(ids)
    options = DecodeOptions(256, False, 1.0, 0, 1.0, (), 1)
    check_fused_attention(model, ids, loaded.plan.backend)
    reference = None
    for name in args.variants.split(","):
        if time.perf_counter() - start > args.budget:
            print(f"{name}: skipped (budget)")
            continue
        torch._dynamo.reset()
        settings = dict(VARIANTS[name])
        model.set_attn_implementation(str(settings.pop("_attention", "sdpa")))
        step = str(settings.pop("_step", "model"))
        fused = bool(settings.pop("_fused", True)) and device == "cuda" and triton_installed()
        tuning = DecodeTuning(**{field: settings.pop(knob) for knob, field in TUNING.items()  # type: ignore[arg-type]
                                 if knob in settings})
        choice = DecodeChoice("fast", cache="static", graphs=kind, compile="inductor", step=step,
                              compile_options=settings, attention_kernel=fused and step == "compact")  # type: ignore[arg-type]
        decoder = FastDecoder(model, choice, capturer, tuning, backend=loaded.plan.backend)
        t0 = time.perf_counter()
        tokens, report = decoder.decode(ids, mask, options)
        warm = time.perf_counter() - t0
        if device != "cpu":
            torch.cuda.synchronize()
        (tokens, report), seconds, calls = timed_median(device, partial(decoder.decode, ids, mask, options),
                                                        args.calls)
        same = "reference" if reference is None else (
            "identical" if torch.equal(tokens, reference) else
            f"differs from token {int((tokens != reference).int().argmax())}")
        reference = tokens if reference is None else reference
        print(f"{name}: warm-up {warm:.1f} s, {256 / seconds:,.0f} tok/s ({seconds * 1000 / 256:.3f} ms/token), "
              f"graphs={report.graphs} compiled={report.compiled} step={report.step} "
              f"fused={report.attention_kernel} "
              f"notes={report.notes} tokens {same}; calls {min(calls) * 1000:.1f}-{max(calls) * 1000:.1f} ms", flush=True)
        batch = decoder._offline  # the engine's batch of the last call, its one-row step captured
        replays = list(batch.runner._replays.values()) if batch is not None else []
        if not replays or device == "cpu":
            continue
        replay_step = replays[-1]
        # Replays of an idle batch: every row writes to the null block, the step's cost is the same.
        torch.cuda.synchronize()
        t0 = time.perf_counter()
        for _ in range(20):
            replay_step()
        torch.cuda.synchronize()
        replay = (time.perf_counter() - t0) / 20
        from torch.profiler import ProfilerActivity, profile

        with profile(activities=[ProfilerActivity.CUDA]) as prof:
            for _ in range(20):
                replay_step()
            torch.cuda.synchronize()
        rows = [e for e in prof.key_averages() if getattr(e, "device_type", None) is not None
                and "CUDA" in str(e.device_type)]
        total = sum(getattr(e, "self_device_time_total", 0) for e in rows) / 20
        count = sum(e.count for e in rows) / 20
        print(f"  per step: {count:.0f} kernels, {total / 1000:.3f} ms device time")
        for e in sorted(rows, key=lambda e: -getattr(e, "self_device_time_total", 0))[:args.top]:
            print(f"    {getattr(e, 'self_device_time_total', 0) / 20:8.1f} us  x{e.count / 20:5.1f}  {e.key[:110]}")
        prompt_only = DecodeOptions(1, False, 1.0, 0, 1.0, (), 1)  # the prompt's pass and first token
        prompt_seconds = []
        for _ in range(5):
            torch.cuda.synchronize()
            t0 = time.perf_counter()
            decoder.decode(ids, mask, prompt_only)
            torch.cuda.synchronize()
            prompt_seconds.append(time.perf_counter() - t0)
        print(f"  replayed step: {replay * 1000:.3f} ms wall; prompt pass + first token: "
              f"{min(prompt_seconds) * 1000:.2f} ms (fastest of 5)", flush=True)
        del decoder, batch, replays, replay_step


def check_fused_attention(model: object, ids: object, backend: Any) -> None:
    """Logits of one decode step with the one-kernel attention against the torch-ops attention, on
    this model and device (prints the largest difference relative to the largest logit)."""
    import torch

    from intelrt.decoding.compact import CompactModel

    compact = CompactModel(model, backend=backend)
    device = ids.device  # type: ignore[attr-defined]
    if device.type != "cuda" or not compact.attention_kernel_fits():
        print("fused attention: not available here")
        return
    with torch.inference_mode():
        cache = compact.new_cache(16, 16, device)
        prompt = ids.shape[1]  # type: ignore[attr-defined]
        table = torch.arange(1, 9, device=device)[None]  # blocks 1 .. 8: 128 slots
        positions = torch.arange(prompt, device=device)[None]
        from intelrt.decoding.compact import Segment

        first = compact.prefill(ids, positions, positions[0] + 16, [Segment(0, prompt, table, prompt)], cache.keys,
                                cache.values).argmax(-1)
        step = (first[:, None], positions[:, -1:] + 1, torch.tensor([16 + prompt], device=device), table)
        plain = compact.decode(*step, [k.clone() for k in cache.keys], [v.clone() for v in cache.values])
        fused = compact.decode(*step, cache.keys, cache.values, fused_attention=True)
    error = float((fused.float() - plain.float()).abs().max() / plain.float().abs().max())
    print(f"fused attention: {model.dtype} relative max logit difference {error:.2e}, "  # type: ignore[attr-defined]
          f"argmax {'equal' if torch.equal(fused.argmax(-1), plain.argmax(-1)) else 'differs'}")


if __name__ == "__main__":
    main()
