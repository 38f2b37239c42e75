"""A list of prompts through ``Loaded.generate_ids`` against plain padded ``generate`` and the GPU's
limit (issue 38), in one process, on one model object.

    python benchmarks/bench_list.py --out results/list                    # Llama-3.1-8B shape, an H200
    python benchmarks/bench_list.py --tiny --out /tmp/list                # the tiny model on the CPU

The model is built from its config with random bf16 weights on the device (no download); intelrt
wraps that same object (``runtime.loading.adopt``, ``workload="batch"``). Every prompt is random
token ids; no end-of-sequence token, so every row generates exactly ``--new-tokens``.

Rows, written to ``OUT/list.json`` as they come (a run cut short keeps its rows):

* ``warm-up``: intelrt's first call (its compile and captures), and a call at each row count of
  the sweep, first and repeated: a first call at a batch size no call had before takes as long as
  a repeated one (nothing recompiles after warm-up);
* ``sweep``: for each prompt length (``--prompts``) and row count (``--rows``), intelrt's tok/s
  (median of ``--repeats`` calls) beside the *limit* — the prompts at the matrix peak
  (``--peak-tflops``, two FLOPs per parameter per token) plus ``--new-tokens`` decode steps each
  reading the weights and every row's KV cache at ``--bandwidth`` — and the share of it reached;
* ``plain``: plain padded ``generate`` (eager, transformers' default dynamic cache) at the rows of
  ``--plain-rows`` and prompt lengths ``--plain-prompts``, and intelrt's ratio to it;
* ``decode``: pure decode of ``--decode-rows`` rows (the tok/s of the tokens after the first, from
  calls of one and of ``--new-tokens`` new tokens).

Ends with PASS/MISS lines against issue 38's targets: >= 60 % of the limit at 64 rows and more,
>= 3x plain padded generate at 32 rows, pure decode of 128 rows >= 16,000 tok/s, and a first call at
a new batch size within 2 s of a repeated one.
"""

from __future__ import annotations

import argparse
import gc
import json
import statistics
import sys
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from bench_serve import H200_BANDWIDTH_TB_S, H200_PEAK_TFLOPS, terabytes_per_second

TARGET_SHARE, TARGET_PLAIN_RATIO, TARGET_DECODE_TOK_S, TARGET_FIRST_CALL_S = 0.60, 3.0, 16000.0, 2.0


@dataclass
class Row:
    kind: str
    rows: int
    prompt: int
    new: int
    seconds: float
    tok_s: float
    first_s: float | None = None
    limit_tok_s: float | None = None
    share: float | None = None
    plain_tok_s: float | None = None
    ratio: float | None = None
    steps: int | None = None
    note: str = ""


def sync(device: Any) -> None:
    import torch

    if device.type == "cuda":
        torch.cuda.synchronize()


def timed(device: Any, fn: Any) -> float:
    sync(device)
    began = time.perf_counter()
    fn()
    sync(device)
    return time.perf_counter() - began


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--out", required=True)
    parser.add_argument("--shape", default="Llama-3.1-8B", help="a shape of intelrt.cli.shapes")
    parser.add_argument("--tiny", action="store_true", help="the shape at a tiny size, on the CPU, small sweep")
    parser.add_argument("--rows", default="1,8,32,64,128,256")
    parser.add_argument("--prompts", default="32,512,2048")
    parser.add_argument("--new-tokens", type=int, default=128)
    parser.add_argument("--plain-rows", default="32,128")
    parser.add_argument("--plain-prompts", default="512")
    parser.add_argument("--decode-rows", type=int, default=128)
    parser.add_argument("--new-batch-sizes", default="48,200", help="row counts first seen after the sweep")
    parser.add_argument("--repeats", type=int, default=2)
    parser.add_argument("--compile", default="auto", help="intelrt's compile= (auto: the plan's; none: captured "
                        "steps of the uncompiled step, no compile time)")
    parser.add_argument("--peak-tflops", type=float, default=H200_PEAK_TFLOPS)
    parser.add_argument("--bandwidth", type=terabytes_per_second, default=H200_BANDWIDTH_TB_S, metavar="TB_S")
    args = parser.parse_args(argv)
    if args.tiny:
        args.rows, args.prompts, args.new_tokens, args.plain_rows = "1,4,8", "8,24", 8, "4"
        args.plain_prompts, args.decode_rows, args.new_batch_sizes, args.repeats = "8", 4, "3,6", 1
    import tempfile

    import torch
    from transformers import AutoTokenizer

    import intelrt
    from intelrt.cli.shapes import random_model, save_shape, shape, tiny_config
    from intelrt.runtime.loading import adopt, prepare

    device = torch.device("cpu" if args.tiny or not torch.cuda.is_available() else "cuda")
    config = tiny_config(shape(args.shape), vocab_size=384) if args.tiny else shape(args.shape)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    results: dict[str, Any] = {"shape": args.shape + (" (tiny)" if args.tiny else ""), "device": str(device),
                               "torch": torch.__version__, "compile": args.compile, "rows": []}
    table: list[Row] = []

    def save() -> None:
        results["rows"] = [asdict(r) for r in table]
        results["verdict"] = verdict(table)
        (out / "list.json").write_text(json.dumps(results, indent=2))

    def add(row: Row) -> None:
        table.append(row)
        save()
        print(f"bench_list: {row.kind:<8} rows {row.rows:>4} prompt {row.prompt:>5} new {row.new:>4}: "
              f"{row.tok_s:>9,.0f} tok/s in {row.seconds:.2f} s"
              + (f", first call {row.first_s:.2f} s" if row.first_s is not None else "")
              + (f", {row.share:.0%} of the limit {row.limit_tok_s:,.0f}" if row.share is not None else "")
              + (f", {row.ratio:.2f}x plain ({row.plain_tok_s:,.0f})" if row.ratio is not None else "")
              + (f", {row.steps} steps" if row.steps is not None else "") + (f"  {row.note}" if row.note else ""),
              flush=True)

    workdir = Path(tempfile.mkdtemp(prefix="bench-list-"))
    save_shape(workdir, config, weights=False)
    began = time.perf_counter()
    plan = intelrt.plan(workdir, backend=device.type, workload="batch", compile=args.compile)
    prepare(plan)
    dtype = torch.float32 if args.tiny else torch.bfloat16
    model = random_model(config, dtype=dtype, device=str(device))
    loaded = adopt(model, AutoTokenizer.from_pretrained(workdir), plan)
    results["load_s"] = time.perf_counter() - began
    results["plan_decode"] = plan.decided.decode.to_dict() if plan.decided.decode is not None else None
    vocab = int(config["vocab_size"]) if not args.tiny else 384
    parameters = sum(p.numel() for p in model.parameters())
    embedding = model.get_input_embeddings().weight
    read = parameters - (0 if model.get_output_embeddings().weight is embedding else embedding.numel())
    text = model.config.get_text_config()
    heads = text.num_attention_heads
    kv_bytes = (2 * text.num_hidden_layers * (getattr(text, "num_key_value_heads", None) or heads)
                * (getattr(text, "head_dim", None) or text.hidden_size // heads) * dtype.itemsize)
    flops, bandwidth = args.peak_tflops * 1e12, args.bandwidth * 1e12
    generator = torch.Generator().manual_seed(0)

    def prompts(rows: int, length: int) -> list[list[int]]:
        return torch.randint(2, vocab, (rows, length), generator=generator).tolist()

    def limit(rows: int, length: int, new: int) -> float:
        prefill = rows * length * 2 * read / flops
        step = (read * dtype.itemsize + rows * (length + new / 2) * kv_bytes) / bandwidth
        return rows * new / (prefill + new * step)

    def ours(ids: list[list[int]], new: int) -> Any:
        return loaded.generate_ids(ids, max_new_tokens=new, eos_token_id=None)

    # warm-up: the first call, then a call at each row count (first and repeated)
    first = timed(device, lambda: ours(prompts(1, 32), args.new_tokens))
    results["first_call_s"] = first
    add(Row("warm-up", 1, 32, args.new_tokens, first, args.new_tokens / first, first_s=first,
            note="load + the first call: compiles and captures"))
    row_counts = [int(r) for r in args.rows.split(",")]
    lengths = [int(p) for p in args.prompts.split(",")]
    for length in lengths:
        for rows in row_counts:
            ids = prompts(rows, length)
            first_s = timed(device, lambda ids=ids: ours(ids, args.new_tokens))
            times = [timed(device, lambda ids=ids: ours(ids, args.new_tokens)) for _ in range(args.repeats)]
            seconds = statistics.median(times)
            report = loaded.last_generation
            tok_s = rows * args.new_tokens / seconds
            best = limit(rows, length, args.new_tokens)
            add(Row("sweep", rows, length, args.new_tokens, seconds, tok_s, first_s=first_s, limit_tok_s=best,
                    share=tok_s / best, steps=getattr(report, "steps", None)))
    for rows in [int(r) for r in args.new_batch_sizes.split(",") if r]:
        ids = prompts(rows, lengths[0])
        first_s = timed(device, lambda ids=ids: ours(ids, args.new_tokens))
        again = timed(device, lambda ids=ids: ours(ids, args.new_tokens))
        add(Row("new-size", rows, lengths[0], args.new_tokens, again, rows * args.new_tokens / again,
                first_s=first_s, note=f"first call {first_s - again:+.2f} s against the repeated one"))
    # pure decode: calls of 1 and of new_tokens new tokens; the difference is the decode steps
    decode_ids = prompts(args.decode_rows, 32)
    ours(decode_ids, args.new_tokens)
    one = statistics.median(timed(device, lambda: ours(decode_ids, 1)) for _ in range(args.repeats + 1))
    full = statistics.median(timed(device, lambda: ours(decode_ids, args.new_tokens))
                             for _ in range(args.repeats + 1))
    decode = args.decode_rows * (args.new_tokens - 1) / max(full - one, 1e-9)
    add(Row("decode", args.decode_rows, 32, args.new_tokens, full - one, decode))
    # plain padded generate on the same model (eager, its default cache)
    for length in [int(p) for p in args.plain_prompts.split(",")]:
        for rows in [int(r) for r in args.plain_rows.split(",")]:
            padded = torch.tensor(prompts(rows, length), device=device)

            def plain(padded: Any = padded) -> None:
                with torch.inference_mode():
                    model.generate(input_ids=padded, attention_mask=torch.ones_like(padded),
                                   max_new_tokens=args.new_tokens, min_new_tokens=args.new_tokens, do_sample=False,
                                   eos_token_id=None, pad_token_id=1)

            plain()
            seconds = timed(device, plain)
            plain_tok_s = rows * args.new_tokens / seconds
            ours_row = next((r for r in table if r.kind == "sweep" and (r.rows, r.prompt) == (rows, length)), None)
            add(Row("plain", rows, length, args.new_tokens, seconds, plain_tok_s,
                    ratio=ours_row.tok_s / plain_tok_s if ours_row else None, plain_tok_s=plain_tok_s))
            del padded
            gc.collect()
    save()
    for line in verdict(table):
        print(line)
    return 0


def verdict(table: list[Row]) -> list[str]:
    """PASS/MISS lines for issue 38's list targets over the rows measured."""
    lines = []
    for row in (r for r in table if r.kind == "sweep" and r.rows >= 64 and r.share is not None):
        lines.append(f"{'PASS' if row.share >= TARGET_SHARE else 'MISS'} {row.rows} rows x {row.prompt} prompt: "
                     f"{row.share:.0%} of the limit (target >= {TARGET_SHARE:.0%})")
    for row in (r for r in table if r.kind == "plain" and r.rows == 32 and r.ratio is not None):
        lines.append(f"{'PASS' if row.ratio >= TARGET_PLAIN_RATIO else 'MISS'} 32 rows x {row.prompt} prompt: "
                     f"{row.ratio:.2f}x plain padded generate (target >= {TARGET_PLAIN_RATIO:g}x)")
    for row in (r for r in table if r.kind == "decode" and r.rows == 128):
        lines.append(f"{'PASS' if row.tok_s >= TARGET_DECODE_TOK_S else 'MISS'} pure decode of 128 rows: "
                     f"{row.tok_s:,.0f} tok/s (target >= {TARGET_DECODE_TOK_S:,.0f})")
    for row in (r for r in table if r.kind in ("sweep", "new-size") and r.first_s is not None):
        slower = row.first_s - row.seconds
        if row.kind == "new-size" or slower > TARGET_FIRST_CALL_S:
            lines.append(f"{'PASS' if slower <= TARGET_FIRST_CALL_S else 'MISS'} first call at {row.rows} rows x "
                         f"{row.prompt}: {slower:+.2f} s against a repeated one (target <= {TARGET_FIRST_CALL_S:g} s)")
    return lines


if __name__ == "__main__":
    sys.exit(main())
