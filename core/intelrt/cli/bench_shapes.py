"""``intelrt bench --shape NAME``: batch-1 decode speed on real model shapes (issue 18).

For each shape of ``shapes.SHAPES`` (a published config, random bf16 weights built on the device
in memory — nothing downloaded, nothing saved), in one process:

* plain transformers: ``generate`` with ``cache_implementation="static"`` (transformers compiles
  the forward on a GPU by itself), the median of ``--repeats`` timed calls after a warm-up call;
* intelrt: the same model under intelrt's plan for it (``workload="batch"``: compiled and
  captured), the same timing;
* per run: tokens per second, the ratio to plain static cache + compile, the share of the
  bandwidth roofline (``--bandwidth`` ÷ the bytes of weights one decode step reads; an H200's
  4.24 TB/s by default) and the peak device memory (``torch.cuda.max_memory_allocated``, reset
  before each run);
* the float32 check: the same shape in float32 (``--verify-layers`` of its layers, so that the
  8B and MoE shapes fit beside nothing else and compile in minutes), intelrt's fast path against
  plain ``generate`` token for token — in bf16 random weights make argmax ties, in float32 not.

``--quantized`` adds bitsandbytes 4-bit rows (plain 4-bit ``generate`` against intelrt's 4-bit
fast loop), ``--first-answer`` the time-to-first-answer rows of ``first_answer.py`` (fresh
processes, cold and warm compile caches). ``--tiny`` runs the shapes at a tiny size on the CPU
and judges no GPU target.
"""

from __future__ import annotations

import argparse
import gc
import json
import tempfile
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from ..errors import ConfigurationError
from ..hooks.backend import Backend
from .arguments import count, positive_number
from .bench import (
    DEFAULT_REPEATS,
    TARGET_DEVICE,
    bench_backend,
    compare,
    targets_judged,
    timed,
    timed_median,
)
from .output import emit, say
from .shapes import SHAPES, save_shape, shape, tiny_config

H200_BANDWIDTH_TB_S = 4.24
"""An H200's peak memory bandwidth (HBM3e), TB/s."""
TARGETS = {"roofline": 0.5, "vs_static": 2.0, "new_family_vs_static": 1.0, "warm_first_answer_s": 10.0,
           "default_first": 1.0, "default_steady": 1.5}
"""Issue 18: Llama-family shapes at >= 50 % of the roofline and >= 2x static cache + compile; the
new families faster than static cache + compile; a warm first answer in <= 10 s. Issue 31: the
default path's first tokens of a fresh process >= 1x plain static cache + compile's steady state,
its steady state >= 1.5x."""
LLAMA_FAMILY = ("llama", "qwen2", "qwen3", "mistral")


@dataclass
class ShapeRow:
    shape: str
    run: str
    tok_s: float | None = None
    seconds: float | None = None
    ratio: float | None = None
    """tok/s against the row this run is compared with (plain static cache + compile)."""
    roofline: float | None = None
    peak_gib: float | None = None
    outputs: str = ""
    calls: tuple[float, ...] = ()
    prompt_tokens: int | None = None
    first_call_s: float | None = None
    """Seconds of the run's first call (its compile and capture, where it has them)."""
    prefill_gib: float | None = None
    """The timed calls' peak device memory above what was allocated before them (the KV cache and
    weights are resident by then): what the prompt's pass needs beyond them, mostly attention."""


def decode_bytes(model: Any) -> int:
    """Bytes of weights one batch-1 decode step reads: every parameter once (a tied LM head reads
    the embedding matrix), except the untied input embedding (one row) and, of mixture-of-experts
    layers, the experts a token does not choose (top-k of E)."""
    import torch

    total = sum(p.numel() * p.element_size() for p in model.parameters())
    embedding = model.get_input_embeddings().weight
    head = model.get_output_embeddings()
    if head is None or head.weight is not embedding:
        total -= embedding.numel() * embedding.element_size()
    for module in model.modules():
        up, down = getattr(module, "gate_up_proj", None), getattr(module, "down_proj", None)
        if isinstance(up, torch.nn.Parameter) and isinstance(down, torch.nn.Parameter) and up.dim() == 3:
            experts = int(up.shape[0])
            chosen = int(getattr(model.config, "num_experts_per_tok", experts))
            unread = (up.numel() * up.element_size() + down.numel() * down.element_size()) * (experts - chosen)
            total -= unread // experts
    return int(total)


@dataclass(frozen=True)
class Timed:
    """One run's measurements (``Measure.run``)."""

    out: Any
    tok_s: float
    seconds: float
    calls: tuple[float, ...]
    first_call_s: float
    peak_gib: float | None
    prefill_gib: float | None


class Measure:
    """Times and peak memory of the runs of one shape on ``backend``'s device (``device``: its torch
    device type)."""

    def __init__(self, backend: Backend, repeats: int, bandwidth_tb_s: float) -> None:
        self.backend, self.device = backend, backend.device_type
        self.repeats, self.bandwidth = repeats, bandwidth_tb_s * 1e12

    def run(self, fn: Callable[[], Any], tokens: int) -> Timed:
        """``fn``'s first call (timed: it compiles), then the median of ``repeats`` timed calls; the peak
        device memory of all of them, and of the timed calls above what was allocated before them
        (``None`` where the backend counts no memory: the CPU)."""
        backend = self.backend
        backend.empty_cache()
        backend.reset_peak_memory(None)
        _, first = timed(backend, fn)
        peak = backend.memory_in_use(None, peak=True, cached=False)
        resident = backend.memory_in_use(None, cached=False) or 0
        backend.reset_peak_memory(None)
        out, seconds, calls = timed_median(backend, fn, self.repeats)
        steady = backend.memory_in_use(None, peak=True, cached=False)
        counted = peak is not None and steady is not None
        return Timed(out, tokens / seconds, seconds, tuple(calls), first,
                     max(peak or 0, steady or 0) / 2**30 if counted else None,
                     ((steady or 0) - resident) / 2**30 if counted else None)

    def share(self, tok_s: float, read: int) -> float:
        return tok_s * read / self.bandwidth


def _release() -> None:
    """Free what the caller dropped (its ``del`` first): compiled code, which holds graphs and
    their memory pools, then the collector and the allocator's cache."""
    import torch

    torch._dynamo.reset()
    gc.collect()
    if torch.accelerator.is_available():
        torch.accelerator.empty_cache()


def shape_config(name: str, args: argparse.Namespace) -> dict[str, Any]:
    config = tiny_config(shape(name), vocab_size=384) if args.tiny else shape(name)
    if args.layers:
        config["num_hidden_layers"] = args.layers
        config.pop("layer_types", None)
    return config


def shape_label(name: str, args: argparse.Namespace) -> str:
    return name + (" (tiny)" if args.tiny else "") + (f" ({args.layers} layers)" if args.layers else "")


@dataclass(frozen=True)
class Workload:
    """One shape's model directory (config and tokenizer), prompt and generation settings."""

    label: str
    config: dict[str, Any]
    workdir: Path
    prompt: list[list[int]]
    settings: dict[str, Any]

    @property
    def new_tokens(self) -> int:
        return int(self.settings["max_new_tokens"])


def greedy(model: Any, work: Workload, **extra: Any) -> list[list[int]]:
    """Plain transformers' ``generate`` of ``work``'s prompt: its new tokens."""
    import torch

    ids = torch.tensor(work.prompt, device=model.device)
    with torch.inference_mode():
        out = model.generate(input_ids=ids, attention_mask=torch.ones_like(ids), **work.settings, **extra)
    return out[:, ids.shape[1]:].tolist()


def prompt_of(tokens: int) -> list[list[int]]:
    """The benchmark's one prompt of ``tokens`` random ids (the same for every run and shape)."""
    import torch

    return torch.randint(2, 384, (1, tokens), generator=torch.Generator().manual_seed(0)).tolist()


def bench_shape(name: str, args: argparse.Namespace, measure: Measure) -> list[ShapeRow]:
    """Plain static cache + compile and intelrt on shape ``name`` at every ``--prompt-tokens`` length;
    the float32 check; 4-bit rows. Each part builds its model and frees it before the next starts
    (peak memory is per run)."""
    config = shape_config(name, args)
    work = Workload(shape_label(name, args), config,
                    save_shape(Path(tempfile.mkdtemp(prefix="intelrt-shape-")), config, weights=False),
                    prompt_of(args.prompt_tokens[0]),
                    {"max_new_tokens": args.new_tokens, "do_sample": False, "pad_token_id": 1, "eos_token_id": None})
    rows = speed_rows(work, measure, args.prompt_tokens)
    _release()
    if not args.skip_verify:
        rows.append(verify_float32(work, args, measure.backend))
        _release()
    if args.quantized:
        rows += quantized_rows(work, measure)
        _release()
    if args.default_path:
        plain = next((r.tok_s for r in rows if r.run == "static cache + compile" and r.tok_s), None)
        rows += default_path_rows(work, args, measure, plain)
    return rows


def default_path_rows(work: Workload, args: argparse.Namespace, measure: Measure,
                      plain: float | None) -> list[ShapeRow]:
    """A fresh process with empty compile caches on intelrt's default path (``default_path.py``):
    its first ``--default-path-tokens`` tokens, and its steady state after the background compile's
    swap; ratios to plain static cache + compile's steady state at the first prompt length."""
    import sys

    from .first_answer import run_fresh

    config_file = work.workdir / "shape.json"
    config_file.write_text(json.dumps(work.config), encoding="utf-8")
    tokens = args.default_path_tokens
    command = [sys.executable, "-m", "intelrt.cli.default_path", str(config_file), str(work.workdir), "--device",
               measure.device, "--prompt-tokens", str(args.prompt_tokens[0]), "--new-tokens", str(tokens),
               "--repeats", str(measure.repeats)]
    try:
        _, found = run_fresh(command, Path(tempfile.mkdtemp(prefix="intelrt-default-")), timeout=3600)
    except Exception as exc:  # noqa: BLE001 - reported in the table
        return [ShapeRow(work.label, "default path (fresh process)", outputs=f"FAILED: {str(exc)[:300]}")]
    read = int(found["read_bytes"])
    first, steady = found["first_report"], found["steady_report"]
    swaps = found["swaps"]
    swapped = (f"compiled in the background for {swaps[0]['compile_s']:.0f} s, took over at token {swaps[0]['token']}"
               if swaps else "no swap" + ("" if found["compile_finished"] else " (the compile had not ended)"))
    return [
        ShapeRow(work.label, f"default: first {tokens} tokens (fresh)", found["first_tok_s"], found["first_s"],
                 found["first_tok_s"] / plain if plain else None, measure.share(found["first_tok_s"], read),
                 found["peak_gib"], f"warmup={first.get('warmup')}, compiled={first.get('compiled')}, step="
                 f"{first.get('step')}; {found['decode'][:160]}", prompt_tokens=args.prompt_tokens[0],
                 first_call_s=found["first_s"]),
        ShapeRow(work.label, f"default: steady ({tokens} tokens)", found["steady_tok_s"], found["steady_s"],
                 found["steady_tok_s"] / plain if plain else None, measure.share(found["steady_tok_s"], read),
                 found["peak_gib"], f"warmup={steady.get('warmup')}, compiled={steady.get('compiled')}, attention "
                 f"kernel={steady.get('attention_kernel')}; {swapped}; tokens "
                 f"{'the same' if found['same_tokens'] else 'DIFFERENT'} before and after",
                 tuple(found["steady_calls"]), prompt_tokens=args.prompt_tokens[0]),
    ]


def at_length(work: Workload, tokens: int, sweep: bool) -> Workload:
    """``work`` with a prompt of ``tokens`` ids (its label says the length when several are benched)."""
    import dataclasses

    label = f"{work.label} @{tokens}" if sweep else work.label
    return dataclasses.replace(work, label=label, prompt=prompt_of(tokens))


def speed_rows(work: Workload, measure: Measure, lengths: Sequence[int] = ()) -> list[ShapeRow]:
    """Plain static cache + compile, then intelrt, on one model with random weights, at each prompt
    length of ``lengths`` (default: ``work``'s prompt)."""
    from transformers import AutoTokenizer

    import intelrt

    from ..runtime.loading import adopt, prepare
    from ..runtime.pretrained_kwargs import from_pretrained_kwargs
    from .shapes import random_model

    plan = intelrt.plan(work.workdir, backend=measure.backend.name, workload="batch")
    prepare(plan)
    kwargs = from_pretrained_kwargs(plan)
    model = random_model(work.config, dtype=kwargs.get("dtype"), device=measure.device,
                         attn_implementation=kwargs.get("attn_implementation"))
    read = decode_bytes(model)
    loaded = adopt(model, AutoTokenizer.from_pretrained(work.workdir), plan)
    rows: list[ShapeRow] = []
    lengths = list(lengths) or [len(work.prompt[0])]
    for tokens in lengths:
        at = at_length(work, tokens, len(lengths) > 1)
        rows += _length_rows(at, measure, model, loaded, read, tokens)
    return rows


def _length_rows(work: Workload, measure: Measure, model: Any, loaded: Any, read: int,
                 tokens: int) -> list[ShapeRow]:
    base: list[list[int]] | None = None
    rows: list[ShapeRow] = []
    try:
        plain = measure.run(lambda: greedy(model, work, cache_implementation="static"), work.new_tokens)
        base = plain.out
        rows.append(ShapeRow(work.label, "static cache + compile", plain.tok_s, plain.seconds, 1.0,
                             measure.share(plain.tok_s, read), plain.peak_gib, calls=plain.calls,
                             prompt_tokens=tokens, first_call_s=plain.first_call_s, prefill_gib=plain.prefill_gib))
    except Exception as exc:  # noqa: BLE001 - reported in the table; intelrt's run still happens
        rows.append(ShapeRow(work.label, "static cache + compile", outputs=f"FAILED: {type(exc).__name__}: "
                             f"{str(exc)[:160]}", prompt_tokens=tokens))
    ours = measure.run(lambda: [loaded.generate_ids(work.prompt[0], **work.settings)], work.new_tokens)
    report = loaded.last_generation
    path = (f"path {report.path}, step={report.step}, compiled={report.compiled}, graphs={report.graphs}, "
            f"attention kernel={report.attention_kernel}" + (f", notes: {report.notes}" if report.notes else "")
            if report else "")
    baseline = rows[0].tok_s
    rows.append(ShapeRow(work.label, "intelrt", ours.tok_s, ours.seconds, ours.tok_s / baseline if baseline else None,
                         measure.share(ours.tok_s, read), ours.peak_gib,
                         (f"{compare(ours.out, base)} vs static; " if base is not None else "") + path, ours.calls,
                         prompt_tokens=tokens, first_call_s=ours.first_call_s, prefill_gib=ours.prefill_gib))
    return rows


def verify_float32(work: Workload, args: argparse.Namespace, backend: Backend) -> ShapeRow:
    """intelrt's fast path (as planned for the device) against plain ``generate`` in float32."""
    import torch

    import intelrt

    from ..runtime.loading import adopt
    from ..runtime.pretrained_kwargs import from_pretrained_kwargs
    from .shapes import random_model

    total = work.config["num_hidden_layers"]
    layers = min(args.verify_layers or total, total)
    small = {**work.config, "num_hidden_layers": layers}
    if layers != total:
        small.pop("layer_types", None)
    plan = intelrt.plan(work.workdir, backend=backend.name, dtype="float32", workload="batch")
    model = random_model(small, dtype=torch.float32, device=backend.device_type,
                         attn_implementation=from_pretrained_kwargs(plan).get("attn_implementation"))
    expected = greedy(model, work)
    loaded = adopt(model, None, plan)
    loaded.generate_ids(work.prompt[0], **work.settings)  # compile and capture, as the timed run did
    got: list[Any] = [loaded.generate_ids(work.prompt[0], **work.settings)]
    report = loaded.last_generation
    where = f"{layers} of {total} layers" if layers != total else "all layers"
    return ShapeRow(work.label, "verify fp32", outputs=f"{compare(got, expected)} vs plain generate ({where}; path "
                    f"{report.path if report else '?'}, step={report.step if report else '?'}, "
                    f"compiled={report.compiled if report else '?'}, graphs={report.graphs if report else '?'})")


def quantized_rows(work: Workload, measure: Measure) -> list[ShapeRow]:
    """bitsandbytes 4-bit: plain transformers' 4-bit ``generate`` against intelrt's 4-bit fast loop
    (the weights are saved once in the plan's dtype, then loaded quantized by each in turn)."""
    import torch

    from .shapes import random_model

    dtype = torch.float32 if measure.backend.computes_on_host else torch.bfloat16
    random_model(work.config, dtype=dtype, device=measure.device).save_pretrained(work.workdir)
    _release()
    plain, base = plain_4bit(work, measure)
    _release()
    return [plain, intelrt_4bit(work, measure, base, plain.tok_s)]


def plain_4bit(work: Workload, measure: Measure) -> tuple[ShapeRow, list[list[int]]]:
    from transformers import AutoModelForCausalLM

    import intelrt

    from ..runtime.pretrained_kwargs import from_pretrained_kwargs

    plan = intelrt.plan(work.workdir, backend=measure.backend.name, quantization="4bit", workload="batch")
    model = AutoModelForCausalLM.from_pretrained(work.workdir, **from_pretrained_kwargs(plan)).eval()
    read = decode_bytes(model)
    plain = measure.run(lambda: greedy(model, work), work.new_tokens)
    return ShapeRow(work.label, "4-bit generate", plain.tok_s, plain.seconds, 1.0, measure.share(plain.tok_s, read),
                    plain.peak_gib, calls=plain.calls, first_call_s=plain.first_call_s), plain.out


def intelrt_4bit(work: Workload, measure: Measure, base: list[list[int]], baseline: float | None) -> ShapeRow:
    import intelrt

    loaded = intelrt.load(work.workdir, backend=measure.backend.name, quantization="4bit", workload="batch")
    read = decode_bytes(loaded.model)
    ours = measure.run(lambda: [loaded.generate_ids(work.prompt[0], **work.settings)], work.new_tokens)
    report = loaded.last_generation
    return ShapeRow(work.label, "intelrt 4-bit", ours.tok_s, ours.seconds, ours.tok_s / baseline if baseline else None,
                    measure.share(ours.tok_s, read), ours.peak_gib,
                    f"{compare(ours.out, base)} vs 4-bit generate; path {report.path if report else '?'}, "
                    f"warmup={report.warmup if report else '?'}"
                    + (f"; notes: {report.notes}" if report and report.notes else ""), ours.calls,
                    first_call_s=ours.first_call_s)


def first_answer(name: str, args: argparse.Namespace, backend: Backend) -> list[ShapeRow]:
    """Fresh processes: load + one ``--first-answer-tokens`` generate, cold then warm caches."""
    import torch

    from .first_answer import first_answer_rows
    from .shapes import random_model

    config = shape_config(name, args)
    workdir = save_shape(Path(tempfile.mkdtemp(prefix="intelrt-first-")), config, weights=False)
    device = backend.device_type
    random_model(config, dtype=torch.float32 if backend.computes_on_host else torch.bfloat16,
                 device=device).save_pretrained(workdir)
    _release()
    rows = []
    for answer in first_answer_rows(workdir, device, new_tokens=args.first_answer_tokens,
                                    prompt_tokens=args.prompt_tokens[0]):
        detail = answer.detail
        phases = (f"import {detail['import_s']:.1f} s, load {detail['load_s']:.1f} s, generate "
                  f"{detail['generate_s']:.1f} s" if "load_s" in detail else "the intelrt command, end to end")
        path = detail.get("report") or {}
        warm = f"; warmup={path.get('warmup')}, compiled={path.get('compiled')}" if path else ""
        if detail.get("fxgraph_cache_hit") or detail.get("fxgraph_cache_miss"):
            warm += (f"; inductor FX-graph cache {detail['fxgraph_cache_hit']} hits, "
                     f"{detail['fxgraph_cache_miss']} misses")
        rows.append(ShapeRow(shape_label(name, args), f"first answer: {answer.name} ({answer.cache})", seconds=answer.seconds,
                             outputs=phases + warm))
    return rows


def _shown(value: float, target: float, spec: str, finer: str) -> str:
    """``value`` formatted with ``spec``, or with ``finer`` where ``spec`` would print a value short
    of ``target`` as the target itself (a MISS that reads like a PASS)."""
    text = format(value, spec)
    return format(value, finer) if value < target and text == format(target, spec) else text


def check_targets(rows: Sequence[ShapeRow]) -> list[str]:
    """PASS/MISS lines against issue 18's GPU targets."""
    lines = []
    for row in rows:
        family = next((SHAPES[s]["model_type"] for s in SHAPES if row.shape.startswith(s)), "")
        if row.run == "intelrt" and row.ratio is not None and row.roofline is not None:
            if family in LLAMA_FAMILY:
                share = _shown(row.roofline, TARGETS["roofline"], ".0%", ".1%")
                lines.append(_verdict(row.roofline >= TARGETS["roofline"], f"{row.shape}: {share} of the "
                                      f"bandwidth roofline (target >= {TARGETS['roofline']:.0%})"))
                ratio = _shown(row.ratio, TARGETS["vs_static"], ".2f", ".3f")
                lines.append(_verdict(row.ratio >= TARGETS["vs_static"], f"{row.shape}: {ratio}x static "
                                      f"cache + compile (target >= {TARGETS['vs_static']}x)"))
            else:
                lines.append(_verdict(row.ratio > TARGETS["new_family_vs_static"], f"{row.shape}: {row.ratio:.2f}x "
                                      "static cache + compile (target: faster)"))
        if row.run.startswith("default: ") and row.ratio is not None:
            target = TARGETS["default_steady" if "steady" in row.run else "default_first"]
            lines.append(_verdict(row.ratio >= target, f"{row.shape} {row.run.removeprefix('default: ')}: default path "
                                  f"{row.ratio:.2f}x static cache + compile's steady state (target >= {target}x)"))
        if row.run == "verify fp32":
            lines.append(_verdict(row.outputs.startswith("identical"), f"{row.shape}: float32 tokens "
                                  f"{row.outputs.split(' vs ')[0]}"))
    answers = {r.run: r.seconds or 0.0 for r in rows if r.run.startswith("first answer")}
    if answers:
        cold, warm = answers.get("first answer: intelrt (cold)"), answers.get("first answer: intelrt (warm)")
        static = answers.get("first answer: plain-static (cold)")
        if cold is not None and static is not None:
            lines.append(_verdict(cold <= static, f"first answer cold: intelrt {cold:.1f} s, plain static cache + "
                                  f"compile {static:.1f} s (target: intelrt <=)"))
        if warm is not None:
            lines.append(_verdict(warm <= TARGETS["warm_first_answer_s"], f"first answer warm: intelrt {warm:.1f} s "
                                  f"(target <= {TARGETS['warm_first_answer_s']:.0f} s; process start to exit)"))
        for cache in ("cold", "warm"):
            run, eager = answers.get(f"first answer: intelrt run ({cache})"), answers.get(
                f"first answer: plain-eager ({cache})")
            if run is not None and eager is not None:
                lines.append(_verdict(run <= eager, f"intelrt run ({cache}): {run:.1f} s, plain eager generate "
                                      f"{eager:.1f} s (target: intelrt run <=)"))
    return lines


def _verdict(ok: bool, text: str) -> str:
    return ("PASS " if ok else "MISS ") + text


def format_rows(rows: Sequence[ShapeRow], header: str) -> str:
    lines = [header, f"{'shape':<28} {'run':<36} {'tok/s':>8} {'seconds':>8} {'ratio':>6} {'roofline':>8} "
             f"{'peak GiB':>8} {'prefill GiB':>11} {'1st call s':>10}  outputs"]
    for r in rows:
        lines.append(f"{r.shape:<28} {r.run:<36} {_num(r.tok_s, ',.0f'):>8} {_num(r.seconds, '.3f'):>8} "
                     f"{_num(r.ratio, '.2f', 'x'):>6} {_num(r.roofline, '.0%'):>8} {_num(r.peak_gib, '.1f'):>8} "
                     f"{_num(r.prefill_gib, '.2f'):>11} {_num(r.first_call_s, '.1f'):>10}  {r.outputs}")
    return "\n".join(lines)


def _num(value: float | None, spec: str, suffix: str = "") -> str:
    return "-" if value is None else format(value, spec) + suffix


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """The ``--shape`` options of ``intelrt bench``."""
    parser.add_argument("--shape", action="append", default=None, metavar="NAME",
                        help=f"bench real model shapes by name (repeat or comma-separate; 'all'): {', '.join(SHAPES)}")
    parser.add_argument("--bandwidth", type=positive_number(), default=H200_BANDWIDTH_TB_S, metavar="TB_S",
                        help="peak memory bandwidth for the roofline share, TB/s (default: an H200's 4.24)")
    parser.add_argument("--layers", type=count(), default=None, metavar="N",
                        help="with --shape: run the shape with this many layers (say so in the table)")
    parser.add_argument("--verify-layers", type=count(0), default=4, metavar="N",
                        help="with --shape: layers of the float32 identity check (0: all; default 4)")
    parser.add_argument("--skip-verify", action="store_true", help="with --shape: leave out the float32 check")
    parser.add_argument("--quantized", action="store_true",
                        help="with --shape: add bitsandbytes 4-bit rows (plain 4-bit generate against intelrt)")
    parser.add_argument("--first-answer", action="store_true",
                        help="with --shape: add time-to-first-answer rows (fresh processes, cold and warm caches)")
    parser.add_argument("--first-answer-only", action="store_true",
                        help="with --shape: only the time-to-first-answer rows (no speed rows, no float32 check)")
    parser.add_argument("--first-answer-tokens", type=count(), default=64, metavar="N",
                        help="with --first-answer: tokens each fresh process generates (default %(default)s)")
    parser.add_argument("--default-path", action="store_true",
                        help="with --shape: add intelrt's default path (workload auto: the compiled step built in "
                             "the background) in a fresh process with empty compile caches: its first tokens and "
                             "its steady state after the swap")
    parser.add_argument("--default-path-tokens", type=count(), default=512, metavar="N",
                        help="with --default-path: new tokens per call of the fresh process (default %(default)s)")


def refuse_without_shape(args: argparse.Namespace) -> None:
    """The ``--shape`` options do nothing without ``--shape``: say so rather than ignore them."""
    given = [flag for flag, value, default in (
        ("--bandwidth", args.bandwidth, H200_BANDWIDTH_TB_S), ("--layers", args.layers, None),
        ("--verify-layers", args.verify_layers, 4), ("--skip-verify", args.skip_verify, False),
        ("--quantized", args.quantized, False), ("--first-answer", args.first_answer, False),
        ("--first-answer-only", args.first_answer_only, False),
        ("--first-answer-tokens", args.first_answer_tokens, 64), ("--default-path", args.default_path, False),
        ("--default-path-tokens", args.default_path_tokens, 512)) if value != default]
    if given:
        raise ConfigurationError(f"{', '.join(given)} only apply to --shape runs: add --shape NAME "
                                 f"(one of {', '.join(SHAPES)}), or leave them out")


def refuse_beyond_positions(chosen: Sequence[str], args: argparse.Namespace) -> None:
    """A prompt and its new tokens past a shape's ``max_position_embeddings`` would not be a decode
    of that model (transformers' generate runs it, or fails): refused before anything loads."""
    beyond = []
    for name in chosen:
        limit = int(shape_config(name, args).get("max_position_embeddings") or 0)
        for tokens in args.prompt_tokens:
            if limit and tokens + args.new_tokens > limit:
                beyond.append(f"{shape_label(name, args)}: {tokens:,} + {args.new_tokens:,} new tokens > {limit:,}")
    if beyond:
        raise ConfigurationError("--prompt-tokens: a prompt and its new tokens must fit the shape's "
                                 f"max_position_embeddings ({'; '.join(beyond)}); use shorter prompts, fewer "
                                 "--new-tokens, or leave those shapes out")


def names(requested: Sequence[str]) -> list[str]:
    wanted = [n.strip() for item in requested for n in item.split(",") if n.strip()]
    if wanted == ["all"]:
        return list(SHAPES)
    for name in wanted:
        shape(name)  # a ConfigurationError naming the known shapes
    return wanted


def main(args: argparse.Namespace) -> int:
    """Run the ``--shape`` benchmark and print its table (and PASS/MISS lines on a GPU)."""
    import torch
    import transformers

    backend = bench_backend(args.device or ("cpu" if args.tiny else None))  # --tiny measures the CPU
    device = backend.device_type
    args.new_tokens = args.new_tokens or (16 if args.tiny else 256)
    args.repeats = args.repeats or DEFAULT_REPEATS
    measure = Measure(backend, args.repeats, args.bandwidth)
    chosen = names(args.shape)
    refuse_beyond_positions(chosen, args)
    rows: list[ShapeRow] = []
    for name in chosen:
        if not args.first_answer_only:
            rows += bench_shape(name, args, measure)
        if args.first_answer or args.first_answer_only:
            rows += first_answer(name, args, backend)
    gpu = device if backend.computes_on_host else backend.device_name(None)
    lengths = ", ".join(f"{n:,}" for n in args.prompt_tokens)
    header = (f"intelrt bench --shape — random {'float32' if backend.computes_on_host else 'bf16'} weights on {gpu} (torch "
              f"{torch.__version__}, transformers {transformers.__version__}); batch 1, {lengths}-token "
              f"prompt, {args.new_tokens} new tokens, median of {args.repeats}; roofline: "
              f"{args.bandwidth:g} TB/s over the weights a step reads; prefill GiB: the timed calls' peak above "
              "what was allocated before them")
    judged = targets_judged(args, backend)
    checks = check_targets(rows) if judged else [
        f"(targets not judged: set for {TARGET_DEVICE}; this run is {'--tiny ' if args.tiny else ''}on {backend.name})"]
    data = {"device": gpu, "rows": [asdict(r) for r in rows], "checks": checks if judged else []}
    emit(args, data, "\n".join([format_rows(rows, header), *checks]))
    if args.output:
        from ..training.saving import write_json_atomically

        write_json_atomically(args.output, data)  # a full disk never leaves a cut-off results file
        say(f"results written to {args.output}")
    return 0
