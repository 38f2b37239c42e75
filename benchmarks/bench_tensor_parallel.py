"""Tensor-parallel generation of an 8B-shaped model on two GPUs against one (issue 20).

    python benchmarks/bench_tensor_parallel.py             # Qwen3-8B-shaped, random bf16 weights, 2 GPUs vs 1
    python benchmarks/bench_tensor_parallel.py --tiny      # the tiny model on CPU ranks (gloo), in seconds

Builds the model from its config (no download), then runs this script as one process
(``intelrt.load(..., parallel="none")``) and as two ranks of ``intelrt launch --nproc 2``
(``parallel="tensor"``: transformers' tensor parallel plan). Each run: a warm-up, then greedy
generation of --new-tokens tokens for --batch prompts; prints tok/s and peak memory per GPU for
both, and whether the two generated the same tokens (bf16 reductions in another order may
differ after a few tokens on random weights).
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path

import multi_device

PROMPT = "Intel GPUs are"


def worker(args: argparse.Namespace) -> None:
    import torch

    import intelrt

    options = {"backend": "cpu"} if args.tiny else {}  # the dtype is the plan's: float32 on the CPU, bfloat16 on the GPU
    loaded = intelrt.load(args.model, parallel=args.parallel, **options)
    prompts = [PROMPT] * args.batch
    loaded.generate(prompts, max_new_tokens=4, min_new_tokens=4)  # warm-up
    if torch.cuda.is_available():
        torch.cuda.synchronize()
        torch.cuda.reset_peak_memory_stats()
    start = time.perf_counter()
    texts = loaded.generate(prompts, max_new_tokens=args.new_tokens, min_new_tokens=args.new_tokens)
    if torch.cuda.is_available():
        torch.cuda.synchronize()
    seconds = time.perf_counter() - start
    multi_device.write_report(Path(args.out), {
        "texts": texts, "seconds": seconds, "tok_s": args.batch * args.new_tokens / seconds,
        "peak_gib": multi_device.peak_memory_gib(), "path": loaded.last_generation.path,
        "parallelism": loaded.plan.decided.parallelism.to_dict()})


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--batch", type=int, default=1)
    parser.add_argument("--new-tokens", type=int, default=128)
    multi_device.add_common_arguments(parser, "--parallel")
    args = parser.parse_args()
    if args.worker:
        worker(args)
        return 0
    work = Path(args.workdir or tempfile.mkdtemp(prefix="intelrt-tp-"))
    model = multi_device.build_model(work / ("tiny" if args.tiny else "qwen3-8b"), None if args.tiny else "8b")
    rows = {}
    for label, ranks, parallel in (("1 process", 1, "none"), ("2 ranks, tensor parallel", 2, "tensor")):
        out = multi_device.fresh(work / f"out-{ranks}")
        extra = ["--tiny"] if args.tiny else []
        done = multi_device.run_ranks(__file__, ["--worker", "--model", str(model), "--out", str(out), "--parallel",
                                                 parallel, "--batch", str(args.batch), "--new-tokens",
                                                 str(args.new_tokens), *extra], ranks)
        if done.returncode != 0:
            print(f"{label} failed:\n{done.stderr[-4000:]}", file=sys.stderr)
            return 1
        rows[label] = multi_device.reports(out, ranks)
    print(f"\n{'run':28} {'tok/s':>10} {'peak GiB per GPU':>24} {'path':>10}")
    for label, ranks_ in rows.items():
        peaks = ", ".join("-" if r["peak_gib"] is None else f"{r['peak_gib']:.2f}" for r in ranks_)
        print(f"{label:28} {ranks_[0]['tok_s']:>10.1f} {peaks:>24} {ranks_[0]['path']:>10}")
    one, two = rows["1 process"][0], rows["2 ranks, tensor parallel"]
    print(f"\nsame text on both ranks: {two[0]['texts'] == two[1]['texts']}; "
          f"same text as one process: {two[0]['texts'] == one['texts']}")
    print(f"speed-up: {two[0]['tok_s'] / one['tok_s']:.2f}x")
    return 0


if __name__ == "__main__":
    sys.exit(main())
