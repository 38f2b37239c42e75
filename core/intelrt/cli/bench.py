"""Side-by-side benchmark: plain transformers against ``intelrt.load(...).generate`` (issue 6).

Builds a Qwen3-0.6B-shaped model with random bf16 weights from its config alone (no download),
or a tiny one (``tiny=True``, for the CPU), and in one process measures tokens per second for:
batch 1 (eager ``generate``, ``cache_implementation="static"`` + auto-compile, intelrt), many
requests (one padded ``generate``, ``generate_batch`` with defaults, intelrt), and load wall
time (``from_pretrained`` with the plan's own keywords + tokenizer, against ``intelrt.load``).
Outputs are compared token for token. ``benchmarks/bench_generate.py`` and ``intelrt bench``
call :func:`main`.
"""

from __future__ import annotations

import argparse
import gc
import os
import statistics
import tempfile
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from ..errors import ConfigurationError
from ..hooks.backend import Backend
from .arguments import count, counts
from .output import emit, say, step

QWEN3_0_6B: dict[str, Any] = {
    "vocab_size": 151936, "hidden_size": 1024, "intermediate_size": 3072, "num_hidden_layers": 28,
    "num_attention_heads": 16, "num_key_value_heads": 8, "head_dim": 128, "max_position_embeddings": 40960,
    "rope_parameters": {"rope_type": "default", "rope_theta": 1000000.0}, "rms_norm_eps": 1e-6, "tie_word_embeddings": True, "hidden_act": "silu",
}
DEFAULT_REPEATS = 3
DEFAULT_PROMPT_TOKENS = 32
TARGETS = {"batch1_tok_s": 1000.0, "batch1_vs_static": 3.0, "many_tok_s": 5000.0, "many_vs_padded": 3.0,
           "load_ratio": 1.03}
TARGET_DEVICE = "cuda"
"""Issue 6 set :data:`TARGETS` for the Qwen3-0.6B shape on a CUDA GPU (an H200): judged there only."""
WORKDIR_MARKER = ".intelrt-bench"
"""The file that makes a ``--workdir`` bench's own: only such a directory (or an empty one) is written into."""


@dataclass
class Row:
    group: str
    name: str
    tok_s: float | None = None
    seconds: float | None = None
    match: str = ""
    calls: list[float] = field(default_factory=list)
    """Every timed call's seconds, when ``seconds`` is their median."""


@dataclass
class Results:
    device: str
    model: str
    rows: list[Row] = field(default_factory=list)
    checks: list[str] = field(default_factory=list)
    plan: dict[str, Any] = field(default_factory=dict)
    path: dict[str, Any] = field(default_factory=dict)
    versions: dict[str, str] = field(default_factory=dict)

    def add(self, row: Row) -> None:
        """Record ``row`` and report it as progress (a full run takes minutes)."""
        self.rows.append(row)
        say(f"bench {row.group} / {row.name}: {f'{row.tok_s:,.0f}' if row.tok_s else '-'} tok/s in "
            f"{row.seconds or 0.0:.3f} s {row.match}"
            + (f" (median of calls: {', '.join(f'{c:.3f}' for c in row.calls)} s)" if row.calls else ""))

    def get(self, group: str, name: str) -> Row:
        return next(r for r in self.rows if r.group == group and r.name == name)


def row(group: str, name: str) -> Any:
    """A row being measured, as progress (a spinner on a terminal); its result line follows."""
    return step(f"bench {group} / {name}", report_done=False)


def build_model(directory: Path, *, tiny: bool, device: str) -> None:
    """Save a random-weight bf16 Qwen3 (0.6B-shaped, or tiny) and a small tokenizer in ``directory``."""
    import torch
    from transformers import Qwen3Config, Qwen3ForCausalLM

    from ..tiny import build_causal_lm, build_tokenizer

    if tiny:
        build_causal_lm(directory, hidden_size=64, layers=2)
        return
    build_tokenizer(directory)
    config = Qwen3Config(**QWEN3_0_6B, bos_token_id=None, eos_token_id=None, pad_token_id=1)
    torch.manual_seed(0)
    with torch.device(device):
        model: Any = Qwen3ForCausalLM(config)
        model = model.to(dtype=torch.bfloat16)
    model.generation_config.eos_token_id = None
    model.generation_config.pad_token_id = 1
    model.save_pretrained(directory, safe_serialization=True)
    del model


def bench_backend(requested: str | None) -> Backend:
    """The backend a benchmark measures: ``--device`` when given, else the one intelrt's detection
    chooses (``backend="auto"``, SPEC C1), as ``intelrt.load`` would — never a guess of its own."""
    from ..hooks.options import AUTO
    from ..planning.planner import plan_backend

    return plan_backend(backend=requested or AUTO).backend


def timed(backend: Backend, fn: Callable[[], Any]) -> tuple[Any, float]:
    """``fn()`` and its wall time, device work included (``backend`` waits for its device);
    garbage collected first, so no run pays for the collection of what earlier runs left."""
    gc.collect()
    backend.synchronize()
    start = time.perf_counter()
    out = fn()
    backend.synchronize()
    return out, time.perf_counter() - start


def timed_median(backend: Backend, fn: Callable[[], Any], repeats: int) -> tuple[Any, float, list[float]]:
    """The last output, the median wall time of ``repeats`` calls, and every call's time."""
    calls: list[float] = []
    out: Any = None
    for _ in range(repeats):
        out, seconds = timed(backend, fn)
        calls.append(seconds)
    return out, statistics.median(calls), calls


def compare(ours: Sequence[Sequence[int]], theirs: Sequence[Sequence[int]]) -> str:
    """``identical`` or how many rows differ and where the first difference is."""
    differ = [(i, next((j for j, (a, b) in enumerate(zip(o, t, strict=False)) if a != b), min(len(o), len(t))))
              for i, (o, t) in enumerate(zip(ours, theirs, strict=True)) if list(o) != list(t)]
    if not differ:
        return "identical"
    first = min(d[1] for d in differ)
    return f"{len(differ)}/{len(ours)} rows differ (first at token {first})"


def run(args: argparse.Namespace) -> Results:
    with step("importing torch and transformers"):
        import torch
        import transformers
        from transformers import AutoModelForCausalLM, AutoTokenizer

        import intelrt

        from ..runtime.pretrained_kwargs import from_pretrained_kwargs

    backend = bench_backend(args.device)
    device = backend.device_type
    results = Results(device=device, model="tiny Qwen3" if args.tiny else "Qwen3-0.6B-shaped, random bf16",
                      versions={"torch": str(torch.__version__), "transformers": transformers.__version__})
    workdir = Path(args.workdir or tempfile.mkdtemp(prefix="intelrt-bench-"))
    with step(f"building the {results.model} model in {workdir}"):
        build_model(workdir, tiny=args.tiny, device=device)
    gen = torch.Generator().manual_seed(0)
    prompts = torch.randint(2, 384, (args.requests, args.prompt_tokens), generator=gen).tolist()
    new = args.new_tokens
    settings = {"max_new_tokens": new, "do_sample": False, "pad_token_id": 1, "eos_token_id": None}

    # -- intelrt first: its plan fixes the choices the plain run copies ---------------------
    with step(f"intelrt.load on {device}"):
        loaded = intelrt.load(workdir, backend=backend.name, workload="batch")  # timed calls after a warm-up: compiled
    plan = loaded.plan
    results.plan = {k: {"value": v.value, "reason": v.reason} for k, v in plan.decisions.items()
                    if k in ("dtype", "placement", "attention", "decode", "batching")}
    kwargs = from_pretrained_kwargs(plan)

    def plain_load() -> Any:
        model = AutoModelForCausalLM.from_pretrained(workdir, **kwargs).eval()
        AutoTokenizer.from_pretrained(workdir)
        return model

    if not args.only_verify:
        with step(f"from_pretrained on {device} (plain transformers)"):
            plain = plain_load()
        _speed(args, results, loaded, plain, prompts, settings, backend)
    if args.verify or args.only_verify:
        _verify(results, workdir, prompts, settings, backend)
    if args.only_verify:
        return results

    # load wall time, alternating, median of N (the same from_pretrained keywords as the plan's)
    del loaded
    gc.collect()
    plain_times: list[float] = []
    ours_times: list[float] = []
    with row("load", f"{args.load_repeats} x from_pretrained + tokenizer, intelrt.load"):
        _load_pairs(args, workdir, backend, plain_load, plain_times, ours_times)
    results.add(Row("load", "from_pretrained + tokenizer", None, statistics.median(plain_times)))
    results.add(Row("load", "intelrt.load", None, statistics.median(ours_times)))
    results.checks = check_targets(results, len(prompts), new) if targets_judged(args, backend) else [
        f"(targets not judged: issue 6 set them for the Qwen3-0.6B shape on {TARGET_DEVICE}; this run is "
        f"{'--tiny ' if args.tiny else ''}on {device})"]
    return results


def targets_judged(args: argparse.Namespace, backend: Backend) -> bool:
    return backend.name == TARGET_DEVICE and not args.tiny


def _load_pairs(args: argparse.Namespace, workdir: Path, backend: Backend, plain_load: Callable[[], Any],
                plain_times: list[float], ours_times: list[float]) -> None:
    """Load wall time, alternating plain and intelrt, ``--load-repeats`` pairs."""
    import intelrt

    for _ in range(args.load_repeats):
        for which, sink in ((plain_load, plain_times),
                            (lambda: intelrt.load(workdir, backend=backend.name, workload="batch"), ours_times)):
            obj, seconds = timed(backend, which)
            sink.append(seconds)
            del obj
            gc.collect()
            backend.empty_cache(None)


def _speed(args: argparse.Namespace, results: Results, loaded: Any, plain: Any, prompts: list[list[int]],
           settings: dict[str, Any], backend: Backend) -> None:
    import torch

    new = args.new_tokens
    dev = plain.device

    def hf_generate(model: Any, rows: Sequence[Sequence[int]], **extra: Any) -> list[list[int]]:
        ids = torch.tensor(rows, device=dev)
        with torch.inference_mode():
            out = model.generate(input_ids=ids, attention_mask=torch.ones_like(ids), **{**settings, **extra})
        return out[:, ids.shape[1]:].tolist()

    one = prompts[:1]
    # batch 1: eager generate (short warm-up, then timed)
    with row("batch 1", "eager generate"):
        hf_generate(plain, one, max_new_tokens=8)
        eager, seconds = timed(backend, lambda: hf_generate(plain, one))
    results.add(Row("batch 1", "eager generate", new / seconds, seconds))
    # batch 1: static cache (+ transformers' auto-compile on cuda/xpu): warm-up is a full run
    with row("batch 1", "static cache + compile (the first call compiles)"):
        hf_generate(plain, one, cache_implementation="static")
        static, seconds, calls = timed_median(backend, lambda: hf_generate(plain, one, cache_implementation="static"),
                                              args.repeats)
    results.add(Row("batch 1", "static cache + compile", new / seconds, seconds,
                    compare(static, eager) + " vs eager", calls))
    # batch 1: intelrt (warm-up compiles and captures)
    with row("batch 1", "intelrt"):
        loaded.generate_ids(one[0], **settings)
        ours, seconds, calls = timed_median(backend, lambda: [loaded.generate_ids(one[0], **settings)], args.repeats)
    results.path["batch 1"] = loaded.last_generation.to_dict() if loaded.last_generation else {}
    results.add(Row("batch 1", "intelrt", new / seconds, seconds,
                    f"{compare(ours, static)} vs static; {compare(ours, eager)} vs eager", calls))

    if args.variants:
        import intelrt

        for label, graphs, compiled in (("intelrt, graphs off", "off", "auto"),
                                        ("intelrt, eager step in graph", "auto", "none")):
            with row("batch 1", label):
                variant = intelrt.load(loaded.plan.model.local_dir, backend=backend.name, graphs=graphs,
                                       compile=compiled, workload="batch")

                def once(v: Any = variant) -> list[Any]:
                    return [v.generate_ids(one[0], **settings)]

                once()
                out, seconds, calls = timed_median(backend, once, args.repeats)
            results.add(Row("batch 1", label, new / seconds, seconds, compare(out, static) + " vs static", calls))
            del variant
            gc.collect()

    # many requests: one padded generate
    many = len(prompts) * new
    with row(f"{len(prompts)} x {new}", "padded generate"):
        hf_generate(plain, prompts, max_new_tokens=8)
        padded, seconds = timed(backend, lambda: hf_generate(plain, prompts))
    results.add(Row(f"{len(prompts)} x {new}", "padded generate", many / seconds, seconds))
    # many requests: continuous batching with transformers' defaults
    if not args.skip_continuous:
        from transformers import GenerationConfig

        config = GenerationConfig(**settings)

        def batch(rows: list[list[int]], cfg: Any) -> list[list[int]]:
            # No inference_mode here: generate_batch decodes on its own thread, where it would not apply.
            out = plain.generate_batch(rows, generation_config=cfg)
            tokens = [list(o.generated_tokens) for o in out.values()]
            failed = [o.error for o in out.values() if getattr(o, "error", None)]
            if len(tokens) != len(rows) or failed or any(len(t) != cfg.max_new_tokens for t in tokens):
                raise RuntimeError(f"generate_batch failed: {len(tokens)} of {len(rows)} results; "
                                   f"{failed[:1] or 'short outputs'}")
            return tokens

        try:
            with row(f"{len(prompts)} x {new}", "generate_batch (defaults)"):
                batch(prompts[:4], GenerationConfig(**{**settings, "max_new_tokens": 8}))
                cont, seconds = timed(backend, lambda: batch(prompts, config))
            results.add(Row(f"{len(prompts)} x {new}", "generate_batch (defaults)", many / seconds, seconds,
                            compare(cont, padded) + " vs padded"))
        except Exception as exc:  # noqa: BLE001 - reported in the table instead of ending the run
            results.add(Row(f"{len(prompts)} x {new}", "generate_batch (defaults)", None, None,
                            f"FAILED: {str(exc)[:120]}"))
    # many requests: intelrt
    with row(f"{len(prompts)} x {new}", "intelrt"):
        loaded.generate_ids(prompts, **settings)
        ours_many, seconds, calls = timed_median(backend, lambda: loaded.generate_ids(prompts, **settings),
                                                 args.repeats)
    results.path["many"] = loaded.last_generation.to_dict() if loaded.last_generation else {}
    results.add(Row(f"{len(prompts)} x {new}", "intelrt", many / seconds, seconds,
                    compare(ours_many, padded) + " vs padded", calls))


def _verify(results: Results, workdir: Path, prompts: list[list[int]], settings: dict[str, Any],
            backend: Backend) -> None:
    """Token-for-token check in float32, where argmax has no bf16 ties: intelrt's fast path
    (compiled, graph-captured) against plain ``generate``, at batch 1 and for the whole batch."""
    import torch
    from transformers import AutoModelForCausalLM

    import intelrt

    from ..runtime.pretrained_kwargs import from_pretrained_kwargs

    with step(f"loading the float32 pair (intelrt.load, from_pretrained) on {backend.device_type}"):
        ours = intelrt.load(workdir, backend=backend.name, dtype="float32", workload="batch")
        plain = AutoModelForCausalLM.from_pretrained(workdir, **from_pretrained_kwargs(ours.plan)).eval()
    group = "verify fp32"
    for label, rows in (("batch 1", prompts[:1]), (f"{len(prompts)} x {settings['max_new_tokens']}", prompts)):
        def run_ours(r: list[list[int]] = rows) -> Any:
            return [ours.generate_ids(r[0], **settings)] if len(r) == 1 else ours.generate_ids(r, **settings)

        with row(group, f"intelrt {label}"):
            ids = torch.tensor(rows, device=plain.device)
            with torch.inference_mode():
                out = plain.generate(input_ids=ids, attention_mask=torch.ones_like(ids), **settings)
            reference = out[:, ids.shape[1]:].tolist()
            run_ours()  # warm-up: compile and capture
            mine, seconds = timed(backend, run_ours)
        info = ours.last_generation
        assert info is not None
        results.add(Row(group, f"intelrt {label}", len(rows) * settings["max_new_tokens"] / seconds, seconds,
                        f"{compare(mine, reference)} vs plain generate (path {info.path}, "
                        f"graphs={info.graphs}, compiled={info.compiled}, step={info.step}, "
                        f"attention kernel={info.attention_kernel})"))


def check_targets(results: Results, requests: int, new: int) -> list[str]:
    b1 = results.get("batch 1", "intelrt").tok_s or 0.0
    static = results.get("batch 1", "static cache + compile").tok_s or 1.0
    many = results.get(f"{requests} x {new}", "intelrt").tok_s or 0.0
    padded = results.get(f"{requests} x {new}", "padded generate").tok_s or 1.0
    load = (results.get("load", "intelrt.load").seconds or 0.0) / (
        results.get("load", "from_pretrained + tokenizer").seconds or 1.0)
    t = TARGETS

    def verdict(ok: bool) -> str:
        return "PASS" if ok else "MISS"

    return [
        f"{verdict(b1 >= t['batch1_tok_s'])} batch 1: {b1:,.0f} tok/s (target >= {t['batch1_tok_s']:,.0f})",
        f"{verdict(b1 / static >= t['batch1_vs_static'])} batch 1: {b1 / static:.2f}x static+compile "
        f"(target >= {t['batch1_vs_static']}x)",
        f"{verdict(many >= t['many_tok_s'])} {requests} x {new}: {many:,.0f} tok/s (target >= {t['many_tok_s']:,.0f})",
        f"{verdict(many / padded >= t['many_vs_padded'])} {requests} x {new}: {many / padded:.2f}x padded generate "
        f"(target >= {t['many_vs_padded']}x)",
        f"{verdict(load <= t['load_ratio'])} load: intelrt.load / from_pretrained = {load:.3f} "
        f"(target <= {t['load_ratio']})",
    ]


def format_table(results: Results) -> str:
    lines = [f"intelrt bench — {results.model} on {results.device} "
             f"(torch {results.versions.get('torch')}, transformers {results.versions.get('transformers')})",
             f"{'group':<12} {'run':<28} {'tok/s':>10} {'seconds':>9}  {'ratio':>8}  outputs"]
    base: dict[str, float] = {}
    for row in results.rows:
        if row.name in ("static cache + compile", "padded generate"):
            base[row.group] = row.tok_s or 0.0
        if row.group == "load" and row.name.startswith("from_pretrained"):
            base["load"] = row.seconds or 0.0
    for row in results.rows:
        ratio = ""
        if row.tok_s and base.get(row.group):
            ratio = f"{row.tok_s / base[row.group]:.2f}x"
        elif row.group == "load" and row.seconds and base.get("load"):
            ratio = f"{row.seconds / base['load']:.3f}x"
        tok = f"{row.tok_s:,.0f}" if row.tok_s else "-"
        lines.append(f"{row.group:<12} {row.name:<28} {tok:>10} {row.seconds or 0:>9.3f}  {ratio:>8}  {row.match}")
    lines.append("ratios: tok/s against static+compile (batch 1) or padded generate (many); load time against "
                 "from_pretrained")
    for name, info in results.path.items():
        lines.append(f"intelrt path ({name}): {info.get('path')} — graphs={info.get('graphs')}, "
                     f"compiled={info.get('compiled')}; {info.get('reason')}")
        lines.extend(f"  note: {n}" for n in info.get("notes") or ())
    lines.extend(results.checks)
    return "\n".join(lines)


def write_chart(results: Results, path: str) -> None:
    """A PNG bar chart of tok/s per run (needs matplotlib)."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        raise ConfigurationError("--chart needs matplotlib, which is not installed: pip install matplotlib "
                                 "(or leave --chart out)") from None
    rows = [r for r in results.rows if r.tok_s]
    fig, ax = plt.subplots(figsize=(9, 4.5))
    colors = ["#1f77b4" if r.name != "intelrt" else "#d62728" for r in rows]
    ax.barh([f"{r.group}: {r.name}" for r in rows], [r.tok_s or 0.0 for r in rows], color=colors)
    ax.set_xscale("log")
    ax.set_xlabel("tokens per second (log scale)")
    ax.set_title(f"transformers vs intelrt — {results.model} on {results.device}")
    for i, r in enumerate(rows):
        ax.text(r.tok_s or 0, i, f" {r.tok_s:,.0f}", va="center", fontsize=8)
    ax.invert_yaxis()
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


BENCH_DESCRIPTION = """\
Measure tokens per second of plain transformers and of intelrt side by side, in one process: batch 1
(eager generate, static cache + compile, intelrt), many requests (padded generate, generate_batch,
intelrt) and load time (from_pretrained against intelrt.load), with every output compared token for
token. The model is Qwen3-0.6B-shaped with random bf16 weights built from its config (no download),
or tiny with --tiny (for the CPU). See docs/performance.md."""
BENCH_EXAMPLES = """\
examples:
  intelrt bench --tiny --skip-continuous
  intelrt bench --device cuda --verify
  intelrt bench --tiny --json > bench.json
  intelrt bench --output bench.json --chart bench.png"""


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--tiny", action="store_true", help="tiny model (for the CPU) instead of Qwen3-0.6B-shaped")
    parser.add_argument("--device", default=None, choices=("cuda", "xpu", "hpu", "cpu"),
                        help="the backend to measure (default: the one intelrt's detection chooses, as "
                             "intelrt.load does; --tiny with --shape: cpu)")
    parser.add_argument("--requests", type=count(), default=None, metavar="N",
                        help="prompts in the batch run (default 64; tiny 8)")
    parser.add_argument("--new-tokens", type=count(), default=None, metavar="N",
                        help="new tokens per prompt (default 256; tiny 32)")
    parser.add_argument("--prompt-tokens", type=counts(), default=(DEFAULT_PROMPT_TOKENS,), metavar="N[,N...]",
                        help=f"tokens per prompt (default: {DEFAULT_PROMPT_TOKENS}); with --shape, a comma-separated "
                             "sweep (e.g. 32,1024,4096,16384): every length is benched, with the prefill's peak memory")
    parser.add_argument("--load-repeats", type=count(), default=None, metavar="N",
                        help=f"alternating from_pretrained / intelrt.load pairs, median of each side "
                             f"(default {DEFAULT_REPEATS})")
    parser.add_argument("--repeats", type=count(), default=None, metavar="N",
                        help=f"timed calls per fast run (static cache, intelrt), median shown (default "
                             f"{DEFAULT_REPEATS}); the slow eager and padded generate runs are timed once")
    parser.add_argument("--skip-continuous", action="store_true", help="leave out generate_batch (slow on CPU)")
    parser.add_argument("--workdir", default=None, metavar="DIR",
                        help="where the random model is saved: a new or empty directory, or one an earlier bench "
                             "made (default: a temp dir)")
    parser.add_argument("--output", default=None, metavar="FILE",
                        help="also write the results as JSON to FILE (--json prints them on stdout instead "
                             "of the table)")
    parser.add_argument("--chart", default=None, metavar="FILE",
                        help="also write a PNG bar chart to FILE (needs matplotlib)")
    parser.add_argument("--verify", action="store_true",
                        help="also compare intelrt's fast path with plain generate in float32 (no bf16 argmax "
                             "ties), at batch 1 and for the whole batch: the tokens must be identical")
    parser.add_argument("--only-verify", action="store_true", help="run only the float32 comparison")
    parser.add_argument("--variants", action="store_true",
                        help="also time intelrt at batch 1 with graphs off, and with an eager step in the graph")


def claim_workdir(path: str | None) -> None:
    """``--workdir DIR`` receives a random model, replacing the model files there: refuse a file and
    a directory holding anything bench did not write (a real model above all), before any work."""
    if path is None:
        return
    work = Path(path)
    if work.exists() and not work.is_dir():
        raise ConfigurationError(f"--workdir {path} is a file; pass a directory for the random model (it is created "
                                 "when missing), or leave --workdir out for a temporary one")
    held = sorted(n for n in os.listdir(work) if n != WORKDIR_MARKER) if work.is_dir() else []
    if held and not (work / WORKDIR_MARKER).is_file():
        shown = ", ".join(held[:5]) + (f" and {len(held) - 5} more" if len(held) > 5 else "")
        raise ConfigurationError(f"--workdir {path} holds files bench did not write ({shown}): bench saves a random "
                                 "model there, replacing config.json, the weights and the tokenizer. Pass a new or "
                                 "empty directory, or leave --workdir out for a temporary one")
    work.mkdir(parents=True, exist_ok=True)  # an OSError here (disk full, read-only) names the path
    (work / WORKDIR_MARKER).write_text("made by `intelrt bench`: a random model, safe to delete\n", encoding="utf-8")


def check_positions(args: argparse.Namespace) -> None:
    """A prompt and its new tokens past the bench model's positions: transformers reads the position
    table past its end (garbage, or an index error on some devices) after minutes of work, and the run
    reported "0 tok/s". Refused before anything is built."""
    from ..tiny import CAUSAL_LM_POSITIONS

    positions = CAUSAL_LM_POSITIONS if args.tiny else int(QWEN3_0_6B["max_position_embeddings"])
    needed = args.prompt_tokens + args.new_tokens
    if needed <= positions:
        return
    model = "the --tiny model" if args.tiny else "the Qwen3-0.6B-shaped model"
    way = (f"pass --prompt-tokens {positions - args.new_tokens} or less" if args.new_tokens < positions else
           f"pass --new-tokens {positions - args.prompt_tokens} or less" if args.prompt_tokens < positions else
           "lower both")
    raise ConfigurationError(f"--prompt-tokens {args.prompt_tokens} with --new-tokens {args.new_tokens} needs {needed} "
                             f"positions, and {model} reads at most {positions} (max_position_embeddings); {way}")


def _writable(flag: str, path: str | None) -> None:
    """An output file whose directory is missing fails after minutes of benchmarking: check first."""
    if path is not None and not Path(path).resolve().parent.is_dir():
        raise ConfigurationError(f"{flag} {path}: the directory {Path(path).resolve().parent} does not exist")


def main(args: argparse.Namespace) -> int:
    if args.chart:  # fail before minutes of benchmarking, not after
        try:
            import matplotlib  # noqa: F401
        except ImportError:
            raise ConfigurationError("--chart needs matplotlib, which is not installed: pip install matplotlib "
                                     "(or leave --chart out)") from None
    _writable("--output", args.output)
    _writable("--chart", args.chart)
    if args.only_verify:  # the float32 comparison alone: the speed runs' options would be ignored
        unused = [flag for flag, given in (("--variants", args.variants), ("--skip-continuous", args.skip_continuous),
                                           ("--repeats", args.repeats is not None),
                                           ("--load-repeats", args.load_repeats is not None)) if given]
        if unused:
            raise ConfigurationError(f"--only-verify runs only the float32 comparison, so {', '.join(unused)} would "
                                     "do nothing: leave them out, or drop --only-verify")
    if len(args.prompt_tokens) > 1:
        raise ConfigurationError(f"--prompt-tokens {','.join(map(str, args.prompt_tokens))}: a sweep of prompt lengths "
                                 "is a --shape option; give one length here, or add --shape NAME")
    args.prompt_tokens = args.prompt_tokens[0]
    args.repeats = args.repeats or DEFAULT_REPEATS
    args.load_repeats = args.load_repeats or DEFAULT_REPEATS
    if args.requests is None:
        args.requests = 8 if args.tiny else 64
    if args.new_tokens is None:
        args.new_tokens = 32 if args.tiny else 256
    check_positions(args)
    claim_workdir(args.workdir)
    results = run(args)
    data = asdict(results)
    emit(args, data, format_table(results))
    if args.output:
        from ..training.saving import write_json_atomically

        write_json_atomically(args.output, data)  # a full disk never leaves a cut-off results file
        say(f"results written to {args.output}")
    if args.chart:
        write_chart(results, args.chart)
        say(f"chart written to {args.chart}")
    return 0
