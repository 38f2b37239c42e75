"""Quantized decode through intelrt against bf16 and against plain transformers (issues 29, 42).

    python benchmarks/bench_quantization.py --out DIR                   # Llama-3.1-8B shape, cuda: the must-show
    python benchmarks/bench_quantization.py --out DIR --shape 2b        # Llama-3.2-1B shape (<= 2B)
    python benchmarks/bench_quantization.py --out DIR --tiny            # the same code path on the CPU, seconds

For bf16 and torchao int4 / int8 weight-only and float8 (row-wise dynamic) — the quantization each
is what ``intelrt.quantization.decide`` plans for the device, and plain transformers gets the very
``TorchAoConfig`` intelrt builds (``quantization.builders``) — at 1 and 64 rows (``--rows``), per row:

- intelrt: ``intelrt.load(quantization=...)`` then ``generate_ids`` as the plan decodes it (the
  compact step: q/k/v and gate/up fused by rows, torchao's kernels), rows up to ``--compile-rows``
  with ``warmup="compiled"`` (the few-row step's fused multiply-and-sum is a compile), larger ones
  ``warmup="static"`` (graph-captured: their projections are the layouts' own matmul kernels either
  way); tokens per second (a timed call after the first), the first call's seconds (its compile
  and capture), peak device memory of the timed call;
- plain transformers: ``model.generate`` (eager, its default cache) on the same loaded model;
- weights' memory: the bytes the model's tensors hold (a torchao tensor counts its inner tensors);
- fidelity: next-token distributions teacher-forced over ``--fidelity-rows`` x 64 positions of
  random prompts against the bf16 model's (top-1 agreement, mean KL), through intelrt's compact
  step (as the compiled few-row step computes its projections) and through the model's own forward
  — torchao's reference, whose numbers bound intelrt's (``Fidelity.within``).

Per method the static load runs first (transformers, fidelity, the many-row runs), then one compiled
load per method (its first call compiles: about a minute and a half at 8B); the JSON in ``--out`` is
rewritten after every row, and past ``--budget-s`` seconds no row starts (the rest is recorded as
not run). On CUDA at the 8B shape the run ends with PASS/MISS lines against issue 42's targets.
Random weights: the model is built on the device (no download); its logits are near-tied, so
fidelity here is a lower bound of what trained weights give.
"""

from __future__ import annotations

import argparse
import gc
import json
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

SHAPES = {"8b": "Llama-3.1-8B", "2b": "Llama-3.2-1B"}
METHODS = ("bf16", "int4", "fp8", "int8")
REQUEST = {"bf16": None, "int4": "int4", "int8": "int8", "fp8": "fp8"}
PROMPT_TOKENS = 32
FIDELITY_TOKENS = 64
TARGETS = {"int4_vs_bf16": 2.5, "int4_vs_transformers": 1.5, "int4_weights": 0.3, "fp8_vs_bf16_1": 1.4,
           "fp8_vs_bf16_64": 1.1}
"""Issue 42's must-show at the 8B shape on the H200."""


def _sync(device: str) -> None:
    import torch

    if device != "cpu":
        torch.accelerator.synchronize()


def _reset_peak(device: str) -> None:
    import torch

    if device != "cpu":
        torch.accelerator.reset_peak_memory_stats()


def _peak(device: str) -> int | None:
    import torch

    return int(torch.accelerator.max_memory_allocated()) if device != "cpu" else None


def _stored_bytes(tensor: Any) -> int:
    """Bytes a tensor holds; a torchao tensor subclass counts its inner tensors (qdata, scales)."""
    if hasattr(tensor, "__tensor_flatten__"):
        names, _ = tensor.__tensor_flatten__()
        return sum(_stored_bytes(getattr(tensor, n)) for n in names if getattr(tensor, n) is not None)
    return int(tensor.numel() * tensor.element_size())


def weights_bytes(model: Any) -> int:
    """The bytes of the model's parameters and buffers, each tensor once (a tied head counts once)."""
    seen: set[int] = set()
    total = 0
    for tensor in [*model.parameters(), *model.buffers()]:
        if id(tensor) not in seen:
            seen.add(id(tensor))
            total += _stored_bytes(tensor)
    return total


def step_bytes(model: Any) -> int:
    """The stored bytes one batch-1 decode step reads: every weight once, except an untied input
    embedding (one row of it)."""
    embedding = model.get_input_embeddings().weight
    head = model.get_output_embeddings()
    untied = head is None or head.weight is not embedding
    return weights_bytes(model) - (_stored_bytes(embedding) if untied else 0)


def layers_bytes(model: Any) -> int:
    """The bytes of the decoder layers alone (the projections; no embedding, LM head or final norm)."""
    layers = getattr(getattr(model, "model", None), "layers", None)
    return sum(weights_bytes(layer) for layer in layers) if layers is not None else 0


def build(name: str, tiny: bool, directory: Path, device: str, layers: int | None) -> dict[str, Any]:
    """A random-weight model of shape ``name`` saved in bfloat16 with intelrt's tiny tokenizer (every
    method loads the same weights); returns its config."""
    import torch

    from intelrt.cli.shapes import random_model, shape, tiny_config
    from intelrt.tiny import build_tokenizer

    config = shape(name)
    if tiny:
        config = tiny_config(config, vocab_size=512)
    if layers is not None:
        config["num_hidden_layers"] = layers
    model = random_model(config, dtype=torch.bfloat16, device=device)
    model.save_pretrained(directory)
    build_tokenizer(directory)
    del model
    gc.collect()
    return config


def plan(method: str, directory: Path, device: str) -> Any:
    """The plan's quantization of ``method`` on ``device`` (a ``PlanError`` when it does not run)."""
    from intelrt.cli.bench import bench_backend
    from intelrt.quantization import Target, decide, read_checkpoint_quantization
    from intelrt.quantization.methods import projection_inputs

    config = json.loads((directory / "config.json").read_text())
    target = Target.from_backend(bench_backend(device))  # the backend's columns, capability and torch
    return decide(REQUEST[method], read_checkpoint_quantization(config, directory), target,
                  in_features=projection_inputs(config))


def prompts(vocab: int, rows: int, length: int, seed: int) -> list[list[int]]:
    import torch

    ids = torch.randint(3, vocab, (rows, length), generator=torch.Generator().manual_seed(seed))
    return ids.tolist()


def reference_logits(directory: Path, device: str, ids: Any) -> Any:
    """The bf16 model's next-token logits over ``ids`` (its own forward), kept in float32."""
    import torch
    from transformers import AutoModelForCausalLM

    from intelrt.decoding.fidelity import model_logits

    model = AutoModelForCausalLM.from_pretrained(directory, dtype=torch.bfloat16, device_map=device).eval()
    logits = model_logits(model, ids.to(device)).float()
    del model
    gc.collect()
    return logits


def fidelity(model: Any, ids: Any, reference: Any) -> dict[str, Any]:
    """Fidelity to the bf16 model: through intelrt's compact step (the compiled few-row
    arithmetic) and through the model's own forward (torchao's reference), with the bound."""
    from intelrt.decoding.compact import Unsupported
    from intelrt.decoding.fidelity import compare, model_logits, step_logits

    ids = ids.to(reference.device)
    torchao = compare(reference, model_logits(model, ids))
    result: dict[str, Any] = {"torchao": torchao.as_dict(),
                              "bound": {"top1_at_least": torchao.top1 - 0.02, "kl_at_most": torchao.kl_mean * 1.25 + 1e-4}}
    try:
        ours = compare(reference, step_logits(model, ids, gemv=True))
    except Unsupported as why:
        result["intelrt"] = {"failed": f"compact step: {why}"}
        return result
    result["intelrt"] = ours.as_dict()
    result["within"] = ours.within(torchao)
    return result


def time_plain(model: Any, batch: list[list[int]], new: int, device: str) -> dict[str, Any]:
    """Plain ``model.generate`` (eager, greedy, its default cache): first call, then a timed one."""
    import torch

    ids = torch.tensor(batch, device=device)
    kwargs = {"attention_mask": torch.ones_like(ids), "max_new_tokens": new, "min_new_tokens": new,
              "do_sample": False, "pad_token_id": 1, "eos_token_id": None}
    with torch.inference_mode():
        start = time.perf_counter()
        model.generate(ids, **kwargs)
        _sync(device)
        first = time.perf_counter() - start
        _reset_peak(device)
        start = time.perf_counter()
        out = model.generate(ids, **kwargs)
        _sync(device)
        seconds = time.perf_counter() - start
    return {"tok_s": len(batch) * new / seconds, "first_call_s": first, "peak_bytes": _peak(device),
            "tokens": out[:, ids.shape[1]:].tolist()}


def time_intelrt(loaded: Any, batch: list[list[int]], new: int, device: str) -> dict[str, Any]:
    """intelrt's ``generate_ids`` as the plan decodes: first call (compile, capture), then a timed one."""
    start = time.perf_counter()
    loaded.generate_ids(batch, max_new_tokens=new, eos_token_id=None)
    _sync(device)
    first = time.perf_counter() - start
    _reset_peak(device)
    start = time.perf_counter()
    tokens = loaded.generate_ids(batch, max_new_tokens=new, eos_token_id=None)
    _sync(device)
    seconds = time.perf_counter() - start
    report = loaded.last_generation
    return {"tok_s": len(batch) * new / seconds, "first_call_s": first, "peak_bytes": _peak(device),
            "path": report.path if report else None, "step": report.step if report else None,
            "warmup": report.warmup if report else None, "notes": list(report.notes) if report else [],
            "tokens": tokens}


class Run:
    """One benchmark run: its rows, written to ``path`` after each, within ``budget`` seconds."""

    def __init__(self, path: Path, header: dict[str, Any], budget: float) -> None:
        self.path, self.result, self.budget = path, {**header, "rows": []}, budget
        self.start = time.monotonic()

    def over(self) -> bool:
        return time.monotonic() - self.start > self.budget

    def add(self, row: dict[str, Any]) -> None:
        row = {**row, "elapsed_s": round(time.monotonic() - self.start, 1)}
        self.result["rows"].append(row)
        self.path.write_text(json.dumps(self.result, indent=2) + "\n", encoding="utf-8")
        shown = {k: v for k, v in row.items() if k not in ("tokens", "notes", "plan", "decode")}
        print(json.dumps(shown), flush=True)

    def row(self, method: str, side: str, rows: int) -> dict[str, Any] | None:
        return next((r for r in self.result["rows"] if (r.get("method"), r.get("side"), r.get("rows")) ==
                     (method, side, rows) and "tok_s" in r), None)


def run_method(run: Run, method: str, directory: Path, device: str, rows_list: list[int], compile_rows: int,
               new: int, vocab: int, reference: Any, fidelity_ids: Any, warmups: tuple[str, ...],
               plain_rows: list[int]) -> None:
    """One method: per warm-up kind, one ``intelrt.load``; plain transformers and fidelity ride on the
    static load (the same loaded model: the same TorchAoConfig)."""
    import intelrt
    from intelrt.errors import PlanError

    try:
        decided = plan(method, directory, device)
    except PlanError as refused:
        run.add({"method": method, "skipped": str(refused)})
        return
    request = REQUEST[method]
    if method == "fp8" and device == "cpu":
        run.add({"method": method, "skipped": "FP8 on the CPU is Intel Neural Compressor's two-run quantize-dequantize "
                                              "flow (no speed to measure; tests/integration/test_quantization_cpu.py "
                                              "runs it); the benchmark times torchao float8 on CUDA"})
        return
    for warmup in warmups:
        wanted = [r for r in rows_list if (r <= compile_rows) == (warmup == "compiled")]
        if not wanted and warmup != "static":
            continue
        if run.over():
            run.add({"method": method, "warmup": warmup, "skipped": "time budget (--budget-s) spent"})
            continue
        start = time.perf_counter()
        loaded = intelrt.load(str(directory), quantization=request, dtype="bfloat16", warmup=warmup)
        load_s = time.perf_counter() - start
        model = loaded.model
        base = {"method": method, "plan": decided.reason, "weights_bytes": weights_bytes(model),
                "layers_bytes": layers_bytes(model), "step_bytes": step_bytes(model), "load_s": load_s,
                "decode": loaded.plan.decisions["decode"].reason}
        print(f"{method} ({warmup}): {decided.reason}; decode: {base['decode']}", flush=True)
        if warmup != "compiled":  # transformers and fidelity once per method, on this load
            for rows in plain_rows:
                if run.over():
                    break
                batch = prompts(vocab, rows, PROMPT_TOKENS, seed=rows)
                run.add({**base, "side": "transformers", "rows": rows, **time_plain(model, batch, new, device)})
            if reference is not None and not run.over():
                run.add({**base, "side": "fidelity", "positions": int(fidelity_ids.numel()),
                         **fidelity(model, fidelity_ids, reference)})
                model = loaded.model  # the fidelity pass rebuilt the compact step's fusion: same weights
        for rows in wanted:
            if run.over():
                run.add({"method": method, "side": "intelrt", "rows": rows, "skipped": "time budget spent"})
                continue
            batch = prompts(vocab, rows, PROMPT_TOKENS, seed=rows)
            run.add({**base, "side": "intelrt", "rows": rows, "warmup_asked": warmup,
                     **time_intelrt(loaded, batch, new, device)})
        del loaded, model
        gc.collect()
        if device != "cpu":
            import torch

            torch.accelerator.empty_cache()


def roofline(run: Run, methods: list[str], bandwidth_tb_s: float) -> list[str]:
    """Each method's 1-row tok/s through intelrt as a share of what the bandwidth allows: a decode
    step reads its weights (``step_bytes``) once per token."""
    lines = []
    for method in methods:
        row = run.row(method, "intelrt", 1)
        if row and row.get("step_bytes"):
            limit = bandwidth_tb_s * 1e12 / row["step_bytes"]
            lines.append(f"{method} at 1 row: {row['tok_s']:,.0f} tok/s = {row['tok_s'] / limit:.0%} of the "
                         f"bandwidth roofline ({limit:,.0f} tok/s: {row['step_bytes'] / 2**30:.2f} GiB a step at "
                         f"{bandwidth_tb_s:g} TB/s)")
    return lines


def verdicts(run: Run, shape: str, device: str, methods: list[str]) -> list[str]:
    """PASS/MISS lines against issue 42's targets (8B shape on CUDA), from the rows that ran."""
    lines = []

    def tok(method: str, side: str, rows: int) -> float | None:
        row = run.row(method, side, rows)
        return float(row["tok_s"]) if row else None

    def ratio(name: str, top: float | None, bottom: float | None, what: str) -> None:
        target = TARGETS[name]
        if top is None or bottom is None:
            lines.append(f"MISS {what}: not measured (target >= {target}x)")
            return
        value = top / bottom
        lines.append(f"{'PASS' if value >= target else 'MISS'} {what}: {value:.2f}x (target >= {target}x; "
                     f"{top:,.0f} / {bottom:,.0f} tok/s)")

    ratio("int4_vs_bf16", tok("int4", "intelrt", 1), tok("bf16", "intelrt", 1), "int4 at 1 row vs intelrt bf16")
    ratio("int4_vs_transformers", tok("int4", "intelrt", 1), tok("int4", "transformers", 1),
          "int4 at 1 row vs plain transformers, same TorchAoConfig")
    int4, bf16 = run.row("int4", "transformers", 1), run.row("bf16", "transformers", 1)
    if int4 and bf16:
        share = int4["weights_bytes"] / bf16["weights_bytes"]
        layers = int4["layers_bytes"] / bf16["layers_bytes"] if bf16["layers_bytes"] else float("nan")
        lines.append(f"{'PASS' if share <= TARGETS['int4_weights'] else 'MISS'} int4 weights: {share:.3f} of bf16's "
                     f"(target <= {TARGETS['int4_weights']}; {int4['weights_bytes'] / 2**30:.2f} of "
                     f"{bf16['weights_bytes'] / 2**30:.2f} GiB; the decoder layers alone {layers:.3f} — the embedding "
                     "and LM head stay bfloat16, as TorchAoConfig leaves them by default)")
    else:
        lines.append("MISS int4 weights: not measured")
    ratio("fp8_vs_bf16_1", tok("fp8", "intelrt", 1), tok("bf16", "intelrt", 1), "fp8 at 1 row vs intelrt bf16")
    ratio("fp8_vs_bf16_64", tok("fp8", "intelrt", 64), tok("bf16", "intelrt", 64), "fp8 at 64 rows vs intelrt bf16")
    for method in [m for m in methods if m != "bf16"]:
        row = next((r for r in run.result["rows"] if r.get("method") == method and r.get("side") == "fidelity"), None)
        if row is None or "intelrt" not in row or "top1" not in row["intelrt"]:
            lines.append(f"MISS {method} fidelity: not measured")
            continue
        ours, ref = row["intelrt"], row["torchao"]
        lines.append(f"{'PASS' if row['within'] else 'MISS'} {method} fidelity: top-1 {ours['top1']:.3f}, KL "
                     f"{ours['kl_mean']:.2e} (torchao's reference: top-1 {ref['top1']:.3f}, KL {ref['kl_mean']:.2e}; "
                     f"bound top-1 >= {row['bound']['top1_at_least']:.3f}, KL <= {row['bound']['kl_at_most']:.2e})")
    if shape != "8b" or device != "cuda":
        lines = [f"(no target at this shape/device) {line.split(' ', 1)[1]}" for line in lines]
    return lines


def main(argv: list[str] | None = None) -> int:
    from intelrt.cli.bench_shapes import H200_BANDWIDTH_TB_S

    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--out", required=True, type=Path, help="directory for the JSON results")
    parser.add_argument("--shape", choices=sorted(SHAPES), default="8b", help="8b: Llama-3.1-8B, 2b: Llama-3.2-1B")
    parser.add_argument("--tiny", action="store_true", help="the shape at a tiny size on the CPU (seconds)")
    parser.add_argument("--device", default=None, help="cuda or cpu (default: the accelerator, else cpu; --tiny: cpu)")
    parser.add_argument("--methods", default=",".join(METHODS))
    parser.add_argument("--rows", default="1,64")
    parser.add_argument("--transformers-rows", default=None,
                        help="rows plain transformers runs at (default: --rows; '1' for the 8B must-show)")
    parser.add_argument("--compile-rows", type=int, default=None,
                        help="rows up to this run warmup='compiled', larger ones 'static' (default: 4 on a GPU, 0 on "
                             "the CPU: everything eager there)")
    parser.add_argument("--new-tokens", type=int, default=None, help="decode steps (default 128; --tiny 8)")
    parser.add_argument("--fidelity-rows", type=int, default=4, help="prompts of 64 tokens for the fidelity")
    parser.add_argument("--layers", type=int, default=None, help="fewer layers (said in the JSON)")
    parser.add_argument("--budget-s", type=float, default=420.0, help="start no row after this many seconds")
    parser.add_argument("--bandwidth", type=float, default=H200_BANDWIDTH_TB_S, metavar="TB_S",
                        help="peak memory bandwidth for the roofline share, TB/s (default: an H200's)")
    args = parser.parse_args(argv)
    import torch

    device = args.device or ("cpu" if args.tiny or not torch.accelerator.is_available()
                             else torch.accelerator.current_accelerator().type)
    methods = [m for m in args.methods.split(",") if m]
    unknown = sorted(set(methods) - set(METHODS))
    if unknown:
        parser.error(f"unknown methods {unknown}; choose from {', '.join(METHODS)}")
    rows_list = [int(r) for r in args.rows.split(",") if r]
    new = args.new_tokens or (8 if args.tiny else 128)
    compile_rows = args.compile_rows if args.compile_rows is not None else (0 if device == "cpu" else 4)
    # the cheap static loads first (transformers, fidelity, many rows), then one compile per method
    warmups = ("static", "compiled") if device != "cpu" else ("eager",)
    plain_rows = [int(r) for r in (args.transformers_rows or args.rows).split(",") if r]
    args.out.mkdir(parents=True, exist_ok=True)
    name = SHAPES[args.shape]
    stamp = time.strftime("%Y%m%d-%H%M%S")
    path = args.out / f"bench_quantization_{args.shape}{'-tiny' if args.tiny else ''}_{device}_{stamp}.json"
    header = {"shape": name, "tiny": args.tiny, "device": device, "new_tokens": new, "rows_asked": rows_list,
              "layers": args.layers, "compile_rows": compile_rows, "torch": torch.__version__,
              "targets": TARGETS, "device_name": torch.cuda.get_device_name() if device == "cuda" else None}
    run = Run(path, header, args.budget_s)
    with tempfile.TemporaryDirectory() as tmp:
        directory = Path(tmp) / "bf16"
        config = build(name, args.tiny, directory, device, args.layers)
        vocab = int(config["vocab_size"])
        fidelity_ids = torch.tensor(prompts(vocab, args.fidelity_rows, FIDELITY_TOKENS, seed=99))
        reference = reference_logits(directory, device, fidelity_ids) if args.fidelity_rows else None
        for warmup in warmups:
            for method in methods:
                run_method(run, method, directory, device, rows_list, compile_rows, new, vocab,
                           reference if warmup != "compiled" else None, fidelity_ids,
                           (warmup,) if device != "cpu" else warmups, plain_rows)
    run.result["roofline"] = roofline(run, methods, args.bandwidth)
    run.result["verdicts"] = verdicts(run, args.shape, device, methods)
    for line in [*run.result["roofline"], *run.result["verdicts"]]:
        print(line, flush=True)
    path.write_text(json.dumps(run.result, indent=2) + "\n", encoding="utf-8")
    print(f"wrote {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
