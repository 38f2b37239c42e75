"""FSDP2 training of a model whose training state does not fit one GPU's memory cap (issue 20).

    python benchmarks/bench_fsdp_memory.py                 # Qwen3-1.7B-shaped, bf16, 2 GPUs capped at 12 GiB each
    python benchmarks/bench_fsdp_memory.py --tiny          # the tiny model on CPU ranks (gloo), in seconds

Builds the model from its config (no download). Every process caps its GPU with
``torch.cuda.set_per_process_memory_fraction(cap / total)`` before loading. Full fine-tuning with
AdamW keeps about 4 x the bf16 weights (weights, gradients, two moments: ~13.6 GiB for 1.7B) plus
activations, so one process under a 12 GiB cap runs out of memory; two ranks of ``intelrt launch
--nproc 2`` with ``sharding="fsdp"`` (PyTorch FSDP2, about half the state each) train. Prints
for both: whether it ran or ran out of memory, peak memory per GPU, losses and time; the sharded
run's saved model is loaded back with plain ``from_pretrained`` (the full state gathered on rank 0).
On the CPU (``--tiny``) there is no cap: both runs train, and the losses must agree.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path

import multi_device


def worker(args: argparse.Namespace) -> None:
    import os

    import torch

    import intelrt
    from intelrt.tiny import corpus_text

    if torch.cuda.is_available():
        device = int(os.environ.get("LOCAL_RANK", "0"))
        total = torch.cuda.get_device_properties(device).total_memory
        torch.cuda.set_per_process_memory_fraction(min(1.0, args.cap_gib * 2**30 / total), device)
    options = {"backend": "cpu"} if args.tiny else {}  # the dtype is the plan's: float32 on the CPU, bfloat16 on the GPU
    report: dict[str, object] = {"sharding": args.sharding}
    start = time.perf_counter()
    try:
        loaded = intelrt.load(args.model, sharding=args.sharding, **options)
        result = loaded.train(corpus_text().splitlines() * 8, output_dir=Path(args.out) / "model",
                              sharding=args.sharding, max_steps=args.steps, per_device_train_batch_size=args.batch,
                              block_size=args.block_size, learning_rate=1e-5, save_strategy="no", seed=0)
        report.update(ran=True, losses=[loss for _, loss in result.losses], world_size=result.world_size)
    except torch.OutOfMemoryError as exc:
        report.update(ran=False, error=f"out of memory: {str(exc).splitlines()[0]}")
    report.update(seconds=time.perf_counter() - start, peak_gib=multi_device.peak_memory_gib())
    multi_device.write_report(Path(args.out), report)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--shape", default="1.7b", choices=sorted(multi_device.SHAPES))
    parser.add_argument("--cap-gib", type=float, default=12.0, help="memory cap per GPU (GiB)")
    parser.add_argument("--steps", type=int, default=5)
    parser.add_argument("--batch", type=int, default=1, help="per rank; one process takes 2 x this")
    parser.add_argument("--block-size", type=int, default=512)
    multi_device.add_common_arguments(parser, "--sharding")
    args = parser.parse_args()
    if args.worker:
        worker(args)
        return 0
    work = Path(args.workdir or tempfile.mkdtemp(prefix="intelrt-fsdp-"))
    model = multi_device.build_model(work / ("tiny" if args.tiny else f"qwen3-{args.shape}"),
                                     None if args.tiny else args.shape)
    rows = {}
    for label, ranks, sharding, batch in (("1 process", 1, "none", 2 * args.batch),
                                          ("2 ranks, FSDP2", 2, "fsdp", args.batch)):
        out = multi_device.fresh(work / f"out-{ranks}")
        done = multi_device.run_ranks(__file__, [
            "--worker", "--model", str(model), "--out", str(out), "--sharding", sharding, "--cap-gib",
            str(args.cap_gib), "--steps", str(args.steps), "--batch", str(batch), "--block-size",
            str(args.block_size), *(["--tiny"] if args.tiny else [])], ranks)
        try:
            rows[label] = multi_device.reports(out, ranks)
        except FileNotFoundError:
            print(f"{label} failed:\n{done.stderr[-4000:]}", file=sys.stderr)
            return 1
    cap = "no cap (CPU)" if args.tiny else f"{args.cap_gib:g} GiB cap per GPU"
    print(f"\n{cap}\n{'run':18} {'trained':>8} {'peak GiB per GPU':>20} {'seconds':>8}  losses")
    for label, ranks_ in rows.items():
        peaks = ", ".join("-" if r["peak_gib"] is None else f"{r['peak_gib']:.2f}" for r in ranks_)
        first = ranks_[0]
        losses = " ".join(f"{x:.4f}" for x in first.get("losses", [])) or first.get("error", "")
        print(f"{label:18} {str(first['ran']):>8} {peaks:>20} {first['seconds']:>8.1f}  {losses}")
    sharded = rows["2 ranks, FSDP2"][0]
    if not sharded["ran"]:
        return 1
    from transformers import AutoModelForCausalLM

    saved = AutoModelForCausalLM.from_pretrained(work / "out-2" / "model")
    print(f"\nthe sharded run's model loads with plain from_pretrained: "
          f"{sum(p.numel() for p in saved.parameters()):,} parameters")
    return 0


if __name__ == "__main__":
    sys.exit(main())
