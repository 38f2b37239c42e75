"""``intelrt`` command line: plugins | doctor | plan | run | train | launch | bench (each takes --json)."""

from __future__ import annotations

import argparse
import contextlib
import json
import logging
import sys
from collections.abc import Iterator, Sequence
from typing import Any

from ..errors import IntelrtError
from ..planning.options import REQUEST_OPTIONS

log = logging.getLogger("intelrt")


def _emit(args: argparse.Namespace, data: Any, text: str) -> None:
    from ..support.redaction import redact, redact_text

    if args.json:
        print(json.dumps(redact(data), indent=2))
    else:
        print(redact_text(text))


@contextlib.contextmanager
def _maybe_simulate(spec: str | None) -> Iterator[None]:
    if not spec:
        yield
        return
    from ..testing.simulation import parse_spec, simulate

    try:
        kwargs = parse_spec(spec)
    except ValueError as exc:
        raise SystemExit(f"intelrt: {exc}") from None
    with simulate(**kwargs):
        yield


def _plan_options(parser: argparse.ArgumentParser) -> None:
    """One flag per request option (``--name-with-dashes``), from their one declaration."""
    for option in REQUEST_OPTIONS:
        if option.flag:
            parser.add_argument(option.cli_flag, action="store_true", help=option.help)
        else:
            parser.add_argument(option.cli_flag, default=option.default, help=option.help, choices=option.choices,
                                metavar=option.metavar)
    parser.add_argument("--simulate", metavar="KIND:N[:GEN]", default=None,
                        help="plan as on a simulated machine, e.g. xpu:2 or hpu:8:gaudi3")


def _plan_kwargs(args: argparse.Namespace) -> dict[str, Any]:
    return {option.name: getattr(args, option.name) for option in REQUEST_OPTIONS}


def cmd_plugins(args: argparse.Namespace) -> int:
    from ..host.manager import PluginHost

    host = PluginHost(on_error="record")
    records = [r.to_dict() for r in host.records]
    text = "\n".join(f"{r['name']:<10} {r['distribution']:<14} {r['version']:<8} {r['status']:<11} "
                     f"{len(r['hooks'])} hooks" + (f"  error: {r['error']}" if r["error"] else "") for r in records)
    _emit(args, {"plugins": records}, text)
    return 0


def cmd_doctor(args: argparse.Namespace) -> int:
    from ..planning.diagnosis import diagnose, format_report

    with _maybe_simulate(args.simulate):
        report = diagnose()
    _emit(args, report, format_report(report))
    return 1 if any(f["severity"] == "error" for f in report["findings"]) else 0


def cmd_plan(args: argparse.Namespace) -> int:
    from ..planning.planner import plan

    with _maybe_simulate(args.simulate):
        result = plan(args.model, **_plan_kwargs(args))
    _emit(args, result.to_dict(), str(result))
    return 0


def cmd_run(args: argparse.Namespace) -> int:
    from ..runtime.loading import load
    from ..tiny import default_model_path

    model = args.model or str(default_model_path())
    loaded = load(model, **_plan_kwargs(args))
    text = loaded.generate(args.prompt, max_new_tokens=args.max_new_tokens)
    if args.json:
        _emit(args, {"plan": loaded.plan.to_dict(), "prompt": args.prompt, "output": text}, "")
    else:
        print(loaded.plan)
        print(f"\nprompt: {args.prompt}\noutput: {text}")
    return 0


def cmd_train(args: argparse.Namespace) -> int:
    from .training import run_train

    return run_train(args, _plan_kwargs(args), _emit)


def cmd_launch(args: argparse.Namespace) -> int:
    from .training import run_launch

    return run_launch(args, _maybe_simulate, _emit)


def cmd_bench(args: argparse.Namespace) -> int:
    """Plain transformers against intelrt, side by side (benchmarks/bench_generate.py); with
    ``--shape``, on real model shapes (bench_shapes.py)."""
    if args.shape:
        from .bench_shapes import main as shapes_main

        return shapes_main(args)
    from .bench import main as bench_main

    return bench_main(args)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="intelrt", description=__doc__)
    parser.add_argument("-v", "--verbose", action="store_true", help="log what intelrt does")
    sub = parser.add_subparsers(dest="command", required=True)

    p = sub.add_parser("plugins", help="list plugins: name, distribution, version, hooks, status")
    p.add_argument("--json", action="store_true")
    p.set_defaults(func=cmd_plugins)

    p = sub.add_parser("doctor", help="versions, backends with reasons, environment, findings with fixes")
    p.add_argument("--json", action="store_true")
    p.add_argument("--simulate", default=None, metavar="KIND:N[:GEN]")
    p.set_defaults(func=cmd_doctor)

    p = sub.add_parser("plan", help="show what intelrt would do for MODEL, without loading it")
    p.add_argument("model")
    p.add_argument("--json", action="store_true")
    _plan_options(p)
    p.set_defaults(func=cmd_plan)

    p = sub.add_parser("run", help="load MODEL (default: the embedded tiny model) and generate")
    p.add_argument("model", nargs="?", default=None)
    p.add_argument("--prompt", default="Intel GPUs are")
    p.add_argument("--max-new-tokens", type=int, default=32)
    p.add_argument("--json", action="store_true")
    _plan_options(p)
    p.set_defaults(func=cmd_run, workload="one-shot")  # one generate, then the process ends: no compile

    from .training import LAUNCH_HELP, TRAIN_HELP, add_launch_arguments, add_train_arguments

    p = sub.add_parser("train", help=TRAIN_HELP)
    add_train_arguments(p)
    _plan_options(p)
    p.set_defaults(func=cmd_train)

    p = sub.add_parser("launch", help=LAUNCH_HELP)
    add_launch_arguments(p)
    p.set_defaults(func=cmd_launch)

    p = sub.add_parser("bench", help="tok/s of plain transformers and intelrt side by side (--chart: PNG)")
    from .bench import add_arguments as bench_arguments

    bench_arguments(p)
    from .bench_shapes import add_arguments as shape_arguments

    shape_arguments(p)
    p.set_defaults(func=cmd_bench)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO if args.verbose else logging.WARNING,
                        format="intelrt: %(levelname)s: %(message)s")
    logging.getLogger("intelrt.progress").setLevel(logging.INFO)  # a long compile is never silent
    from ..support.redaction import redact_log_output, redact_text

    for handler in logging.getLogger().handlers:
        redact_log_output(handler)
    try:
        return int(args.func(args))
    except IntelrtError as exc:
        notes = "".join(f"\n  ({n})" for n in getattr(exc, "__notes__", []))
        print(redact_text(f"intelrt: error: {exc}{notes}"), file=sys.stderr)
        return 2

