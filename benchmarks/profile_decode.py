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
from pathlib import Path

VARIANTS = {
    "default": {},
    "freezing": {"freezing": True},
    "freezing+eager-attn": {"freezing": True, "_attention": "eager"},
    "freezing+cdt": {"freezing": True, "coordinate_descent_tuning": True},
    "freezing+cdt+autotune": {"freezing": True, "coordinate_descent_tuning": True, "max_autotune_gemm": True},
}


def main() -> None:
    import torch

    import intelrt
    from intelrt.decoding.benchmark import build_model
    from intelrt.decoding.engine import FastDecoder
    from intelrt.decoding.options import DecodeOptions
    from intelrt.plugins import get_host

    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--tiny", action="store_true")
    parser.add_argument("--variants", default="default,freezing,freezing+eager-attn,freezing+cdt,freezing+cdt+autotune")
    parser.add_argument("--budget", type=float, default=420.0, help="seconds; later variants are skipped")
    args = parser.parse_args()
    start = time.perf_counter()
    workdir = Path(tempfile.mkdtemp(prefix="intelrt-probe-"))
    device = "cuda" if torch.cuda.is_available() else "cpu"
    build_model(workdir, tiny=args.tiny, device=device)
    loaded = intelrt.load(workdir, backend=device)
    model = loaded.model
    kind = (loaded.plan.value("decode") or {}).get("graphs")
    capturer = get_host().call_first("intelrt_decode_graph", backend=loaded.plan.backend, kind=kind)[0] if kind else None
    ids = torch.randint(2, 384, (1, 32), generator=torch.Generator().manual_seed(0)).to(model.device)
    mask = torch.ones_like(ids)
    options = DecodeOptions(256, False, 1.0, 0, 1.0, (), 1)
    reference = None
    for name in args.variants.split(","):
        if time.perf_counter() - start > args.budget:
            print(f"{name}: skipped (budget)")
            continue
        torch._dynamo.reset()
        settings = dict(VARIANTS[name])
        model.set_attn_implementation(settings.pop("_attention", "sdpa"))
        decoder = FastDecoder(model, graphs=kind, compile_backend="inductor", capturer=capturer,
                              compile_options=settings)
        t0 = time.perf_counter()
        tokens, report = decoder.decode(ids, mask, options)
        warm = time.perf_counter() - t0
        if device != "cpu":
            torch.cuda.synchronize()
        t0 = time.perf_counter()
        tokens, report = decoder.decode(ids, mask, options)
        if device != "cpu":
            torch.cuda.synchronize()
        seconds = time.perf_counter() - t0
        same = "reference" if reference is None else (
            "identical" if torch.equal(tokens, reference) else
            f"differs from token {int((tokens != reference).int().argmax())}")
        reference = tokens if reference is None else reference
        print(f"{name}: warm-up {warm:.1f} s, {256 / seconds:,.0f} tok/s ({seconds * 1000 / 256:.3f} ms/token), "
              f"graphs={report.graphs} compiled={report.compiled} notes={report.notes} tokens {same}", flush=True)
        session = next(reversed(decoder._sessions.values()))
        if session.replay is None or device == "cpu":
            continue
        from torch.profiler import ProfilerActivity, profile

        with profile(activities=[ProfilerActivity.CUDA]) as prof:
            for _ in range(20):
                session.replay()
            torch.cuda.synchronize()
        rows = [e for e in prof.key_averages() if getattr(e, "device_type", None) is not None
                and "CUDA" in str(e.device_type)]
        total = sum(getattr(e, "self_device_time_total", 0) for e in rows) / 20
        count = sum(e.count for e in rows) / 20
        print(f"  per step: {count:.0f} kernels, {total / 1000:.3f} ms device time")
        for e in sorted(rows, key=lambda e: -getattr(e, "self_device_time_total", 0))[:12]:
            print(f"    {getattr(e, 'self_device_time_total', 0) / 20:8.1f} us  x{e.count / 20:5.1f}  {e.key[:110]}")
        del decoder, session


if __name__ == "__main__":
    main()
