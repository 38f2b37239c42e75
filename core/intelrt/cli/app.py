"""The ``intelrt`` command: the parser, the error contract around every command, logging, and the
inference commands (plugins, doctor, plan, run); ``train`` and ``launch`` are in
:mod:`.training`, ``bench`` in :mod:`.bench`, ``serve`` in :mod:`.serve`."""

from __future__ import annotations

import argparse
import atexit
import contextlib
import json
import logging
import os
import sys
from collections.abc import Callable, Sequence
from typing import Any

from .._version import __version__
from ..hooks.request import REQUEST_OPTIONS
from .arguments import (
    SIMULATE_HELP,
    Parser,
    common_options,
    count,
    json_requested,
    non_empty,
    refuse,
    verbose_requested,
)
from .failures import EXIT_FAILED, UsageError, describe, print_traceback
from .interrupt import Terminated, interrupts
from .models import (
    announce_download,
    check_tokens,
    default_model,
    load_planned,
    planned,
    require_generation,
    simulated,
)
from .output import emit, step

DESCRIPTION = """\
Take a Hugging Face transformers model through load, inference, training and distributed runs on
Intel GPUs (xpu), Intel Gaudi (hpu), the CPU and CUDA: every decision planned, explained, overridable.

Start with `intelrt plan` and `intelrt run` (the embedded tiny model: no download), then give them
a model of yours. `intelrt COMMAND --help` describes each command.

exit status: 0 success, 1 a run that failed, 2 a usage or configuration error, 130 interrupted,
143 stopped by SIGTERM.
With --json, the result (or the error, as {"error": {"type", "message", "fix"}}) is JSON on stdout."""

MODEL_HELP = ("a directory saved with save_pretrained(), or a hub id (org/name); default: the embedded tiny "
              "model, built offline on first use")
REFUSE_SIMULATE = ("--simulate only plans: a simulated machine cannot run a model. See the plan for a machine "
                   "you lack with `intelrt plan MODEL --simulate xpu:2`")


def plan_kwargs(args: argparse.Namespace) -> dict[str, Any]:
    """The request options as the command line gave them (their defaults otherwise)."""
    return {option.name: getattr(args, option.name) for option in REQUEST_OPTIONS}


# -- commands ------------------------------------------------------------------------------------

def cmd_plugins(args: argparse.Namespace) -> int:
    from ..host.manager import PluginHost
    from ..support.tables import plural, table, terminal_width, wrap

    host = PluginHost(on_error="record")
    records = [r.to_dict() for r in host.records]
    lines = table(("name", "distribution", "version", "status", "backends", "hooks"),
                  [(r["name"], r["distribution"], r["version"], r["status"], ", ".join(r["backends"]) or "-",
                    plural(len(r["hooks"]), "hook")) for r in records], indent="")
    for r in records:
        if r["error"]:
            lines += wrap(f"{r['name']} failed: {r['error']}", terminal_width(), "", "  ")
    emit(args, {"plugins": records}, "\n".join(lines))
    return 0


def cmd_doctor(args: argparse.Namespace) -> int:
    from ..planning.diagnosis import diagnose, format_report

    with step("checking this machine: versions, backends, environment"), simulated(args.simulate):
        report = diagnose(probe=args.probe)
    if args.simulate is not None:  # how the simulation reaches child processes is not part of the machine
        from ..testing.simulation import CHILD_VAR

        report["environment"].pop(CHILD_VAR, None)
    emit(args, report, format_report(report))
    return EXIT_FAILED if any(f["severity"] == "error" for f in report["findings"]) else 0


def cmd_plan(args: argparse.Namespace) -> int:
    from ..planning.planner import plan

    model = args.model or default_model()  # built (first use) on this machine, not the simulated one
    machine = f" as on a simulated {args.simulate}" if args.simulate else ""
    if args.replicas is not None:
        from .serve import run_replica_plan

        return run_replica_plan(args, model, plan_kwargs(args))
    if args.devices_per_replica is not None:
        raise UsageError("--devices-per-replica plans Ray Serve replicas: add --replicas N", command="plan")
    with step(f"planning {model}{machine} (detecting backends, reading its config)"), simulated(args.simulate):
        result = plan(model, **plan_kwargs(args))
    emit(args, result.to_dict(), str(result))
    return 0


def cmd_run(args: argparse.Namespace) -> int:
    model = args.model or default_model()
    announce_download(model)
    the_plan = planned(model, **plan_kwargs(args))
    require_generation(the_plan, "run")
    check_tokens(the_plan, args.max_new_tokens, "--max-new-tokens", room=1)
    loaded = load_planned(the_plan)
    compiles = loaded.plan.decided.compile is not None and loaded.plan.decided.compile.enabled
    with step(f"generating up to {args.max_new_tokens} tokens" + (" (the first call compiles)" if compiles else "")):
        text = loaded.generate(args.prompt, max_new_tokens=args.max_new_tokens)
    report = loaded.last_generation.to_dict() if loaded.last_generation else None
    emit(args, {"plan": loaded.plan.to_dict(), "prompt": args.prompt, "output": text, "generation": report},
         f"{loaded.plan}\n\nprompt: {args.prompt}\noutput: {text}")
    return 0


def cmd_train(args: argparse.Namespace) -> int:
    from .training import run_train

    return run_train(args, plan_kwargs(args))


def cmd_launch(args: argparse.Namespace) -> int:
    from .training import run_launch

    return run_launch(args)


def cmd_bench(args: argparse.Namespace) -> int:
    """Plain transformers against intelrt, side by side (benchmarks/bench_generate.py); with
    ``--shape``, on real model shapes (bench_shapes.py)."""
    if args.shape:
        from .bench_shapes import main as shapes_main

        return shapes_main(args)
    from .bench import main as bench_main
    from .bench_shapes import refuse_without_shape

    refuse_without_shape(args)

    return bench_main(args)


def cmd_quantize(args: argparse.Namespace) -> int:
    from .quantize import run_quantize

    return run_quantize(args, plan_kwargs(args))


def cmd_serve(args: argparse.Namespace) -> int:
    from .serve import run_serve

    return run_serve(args, plan_kwargs(args))


# -- the parser ----------------------------------------------------------------------------------

TRAINING_ONLY = {"sharding": "--sharding says how training spreads over processes; {command} trains nothing "
                              "(intelrt train and intelrt launch take it)"}
"""Request options that mean nothing to an inference command: refused there with the reason."""


def add_plan_options(parser: argparse.ArgumentParser, *, inference: bool = False,
                     refused: dict[str, str] | None = None) -> None:
    """One flag per request option (``--name-with-dashes``), from their one declaration; for an
    ``inference`` command (run, serve), the training-only ones are refused instead, and so are the
    ``refused`` ones (option name → why) of a command that sets that option itself."""
    group = parser.add_argument_group("plan options (each overrides one decision; default: intelrt decides)")
    refusals = {**(TRAINING_ONLY if inference else {}), **(refused or {})}
    for option in REQUEST_OPTIONS:
        if option.name in refusals:
            parser.set_defaults(**{option.name: option.default})
            refuse(parser, option.cli_flag, refusals[option.name].format(command=parser.prog))
        elif option.flag:
            group.add_argument(option.cli_flag, action="store_true", help=option.help)
        else:
            group.add_argument(option.cli_flag, default=option.default, help=option.help, choices=option.choices,
                               metavar=option.metavar)


def examples(*lines: str) -> str:
    return "examples:\n" + "\n".join(f"  {line}" for line in lines)


def add_command(sub: Any, name: str, func: Callable[[argparse.Namespace], int], *, summary: str,
                description: str, epilog: str) -> argparse.ArgumentParser:
    parser: argparse.ArgumentParser = sub.add_parser(name, help=summary, description=description, epilog=epilog,
                                                     parents=[common_options()])
    parser.set_defaults(func=func)
    return parser


def build_parser() -> Parser:
    from .bench import BENCH_DESCRIPTION, BENCH_EXAMPLES
    from .bench import add_arguments as add_bench_arguments
    from .bench_shapes import add_arguments as add_shape_arguments
    from .quantize import QUANTIZE_DESCRIPTION, QUANTIZE_EXAMPLES, REFUSED
    from .quantize import add_arguments as add_quantize_arguments
    from .serve import SERVE_DESCRIPTION, SERVE_EXAMPLES, add_replica_arguments
    from .serve import add_arguments as add_serve_arguments
    from .training import (
        LAUNCH_DESCRIPTION,
        LAUNCH_EXAMPLES,
        TRAIN_DESCRIPTION,
        TRAIN_EXAMPLES,
        add_launch_arguments,
        add_train_arguments,
    )

    parser = Parser(prog="intelrt", description=DESCRIPTION)
    parser.add_argument("-v", "--verbose", action="count", default=0,
                        help="log what intelrt does (-vv: more detail, and other libraries' messages); errors "
                             "come with their traceback")
    parser.add_argument("--version", action="version", version=f"intelrt {__version__}",
                        help="print intelrt's version and exit")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND", parser_class=Parser)

    add_command(sub, "plugins", cmd_plugins, summary="list plugins: name, distribution, version, status, hooks",
                description="List every plugin intelrt found: its built-in backends, the Intel plugins and "
                            "third-party plugins of the `intelrt` entry-point group, with distribution, version, "
                            "status (enabled, blocked, not allowed, failed) and the hooks each implements. "
                            "Imports neither torch nor transformers.",
                epilog=examples("intelrt plugins", "intelrt plugins --json",
                                "INTELRT_DISABLE_PLUGINS=acme intelrt plugins"))

    p = add_command(sub, "doctor", cmd_doctor, summary="check this machine: versions, backends, environment, fixes",
                    description="Check this machine: package versions, every backend with the reason it is or is "
                                "not available, the intelrt-relevant environment variables in effect, and findings "
                                "with fixes. Secrets are redacted. Exit status 1 when a finding is an error.",
                    epilog=examples("intelrt doctor", "intelrt doctor --simulate hpu:8", "intelrt doctor --probe --json"))
    p.add_argument("--simulate", default=None, metavar="KIND:N[:GEN]", help=SIMULATE_HELP)
    p.add_argument("--probe", action="store_true",
                   help="also run the vendors' tools (hl-smi) to ask the machine (slower; off by default)")

    p = add_command(sub, "plan", cmd_plan, summary="show what intelrt would do for a model, loading nothing",
                    description="Show what `intelrt run` / intelrt.load() would do for MODEL: backend, dtype, "
                                "attention, kernels, compile, decode … each decision with its reason, the plugin "
                                "that made it and whether you forced it. Loads and downloads nothing: a hub model "
                                "must be in the local cache (`intelrt run ID` downloads it).",
                    epilog=examples("intelrt plan                          # the embedded tiny model",
                                    "intelrt plan ./my-model --dtype bfloat16 --compile on",
                                    "intelrt plan --simulate xpu:2         # as on two Intel GPU cards you do not have",
                                    "intelrt plan --simulate hpu:8 --replicas 8   # 8 Ray Serve replicas, one per Gaudi",
                                    "intelrt plan Qwen/Qwen3-0.6B --json   # a cached hub model"))
    p.add_argument("model", nargs="?", default=None, help=MODEL_HELP.replace("a hub id (org/name)",
                                                                              "a hub id (org/name) in the local cache"))
    add_plan_options(p)
    p.add_argument("--simulate", default=None, metavar="KIND:N[:GEN]", help=SIMULATE_HELP)
    add_replica_arguments(p)

    p = add_command(sub, "run", cmd_run, summary="load a model and generate from a prompt",
                    description="Load MODEL as planned (the plan is printed first) and generate a continuation of "
                                "--prompt. A hub id that is not cached is downloaded once (unless HF_HUB_OFFLINE).",
                    epilog=examples("intelrt run                           # the embedded tiny model",
                                    "intelrt run Qwen/Qwen3-0.6B --prompt 'Intel GPUs are' --max-new-tokens 40",
                                    "intelrt run ./my-model --dtype bfloat16 --json"))
    p.add_argument("model", nargs="?", default=None, help=MODEL_HELP)
    p.add_argument("--prompt", default="Intel GPUs are", type=non_empty(),
                   help="the text to continue (default: %(default)r)")
    p.add_argument("--max-new-tokens", type=count(), default=32, metavar="N",
                   help="how many tokens to generate at most (default: %(default)s; below the model's context)")
    add_plan_options(p, inference=True)
    p.set_defaults(workload="one-shot")  # one generate, then the process ends: warm-up that pays for itself
    refuse(p, "--simulate", REFUSE_SIMULATE)

    p = add_command(sub, "train", cmd_train, summary="fine-tune a model on a text file (--demo: the whole lifecycle)",
                    description=TRAIN_DESCRIPTION, epilog=TRAIN_EXAMPLES)
    add_train_arguments(p)
    add_plan_options(p)
    refuse(p, "--simulate", REFUSE_SIMULATE)

    p = add_command(sub, "launch", cmd_launch, summary="run a script with one process per device",
                    description=LAUNCH_DESCRIPTION, epilog=LAUNCH_EXAMPLES)
    add_launch_arguments(p)

    p = add_command(sub, "bench", cmd_bench, summary="tokens/s of plain transformers and intelrt side by side",
                    description=BENCH_DESCRIPTION, epilog=BENCH_EXAMPLES)
    add_bench_arguments(p)
    add_shape_arguments(p)

    p = add_command(sub, "quantize", cmd_quantize, summary="quantize a model and save it as a checkpoint",
                    description=QUANTIZE_DESCRIPTION, epilog=QUANTIZE_EXAMPLES)
    add_quantize_arguments(p)
    add_plan_options(p, inference=True, refused=REFUSED)
    refuse(p, "--simulate", REFUSE_SIMULATE)

    p = add_command(sub, "serve", cmd_serve, summary="serve a model with the OpenAI API (in-flight batching)",
                    description=SERVE_DESCRIPTION, epilog=SERVE_EXAMPLES)
    add_serve_arguments(p)
    add_plan_options(p, inference=True)
    p.add_argument("--simulate", default=None, metavar="KIND:N[:GEN]",
                   help=SIMULATE_HELP + "; serve then only shows the plan and the limits it would serve with")
    return parser


# -- logging -------------------------------------------------------------------------------------

class _Once(logging.Filter):
    """Lets each message through once (libraries repeat warnings per call or per import)."""

    def __init__(self) -> None:
        super().__init__()
        self.seen: set[tuple[str, int, str]] = set()

    def filter(self, record: logging.LogRecord) -> bool:
        key = (record.name, record.levelno, record.getMessage())
        if key in self.seen:
            return False
        self.seen.add(key)
        return True


class _NotIntelrt(logging.Filter):
    """The root handler shows other libraries' records; intelrt's have their own handler."""

    def filter(self, record: logging.LogRecord) -> bool:
        return record.name != "intelrt" and not record.name.startswith("intelrt.")


OWN_HANDLERS = ("torch.utils._pytree",)
"""Loggers of libraries that print through a handler of their own, so their records never reach
the root handler (``torch._logging`` gives the ``torch`` logger its own handler and stops
propagation). Importing transformers' quantizers imports torchao, whose registrations make
``torch.utils._pytree`` warn twice on every command ("… is an Enum subclass and is now natively
supported by torch.compile …"): a dependency's warning the user did not ask for. A logger's filter
sees only the records made on that logger: each is named."""


class _BelowVerbose(logging.Filter):
    """On a library's logger with a handler of its own: warnings only with ``-v`` (errors always)."""

    def filter(self, record: logging.LogRecord) -> bool:
        return record.levelno >= logging.ERROR


def configure_logging(verbosity: int) -> Callable[[], None]:
    """The one place the command line sets up logging; returns what puts it back.

    intelrt's records: ``intelrt: LEVEL: message`` (warnings by default, ``-v`` info, ``-vv`` debug;
    ``intelrt.progress``, the long steps (a spinner with the elapsed time on a terminal, else plain
    lines: :mod:`.output`), always).
    Other libraries' records and Python warnings: under their own name (``bitsandbytes: WARNING: …``),
    each message once, and only with ``-v`` (errors always). transformers prints through its own
    handler (``[transformers] …``); so does huggingface_hub, whose level follows ``-v`` the same way
    (its retries of an unreachable hub — a warning per try — show with ``-v`` only).
    """
    from huggingface_hub.utils import logging as hub_logging

    from ..support.redaction import redact_log_output
    from .output import CurrentStderr, ProgressHandler

    intelrt_log, root = logging.getLogger("intelrt"), logging.getLogger()
    progress = logging.getLogger("intelrt.progress")
    before = (intelrt_log.level, root.level, progress.level, progress.propagate)
    steps = ProgressHandler()
    ours = logging.StreamHandler(CurrentStderr())
    ours.setFormatter(logging.Formatter("intelrt: %(levelname)s: %(message)s"))
    theirs = logging.StreamHandler(CurrentStderr())
    theirs.setFormatter(logging.Formatter("%(name)s: %(levelname)s: %(message)s"))
    theirs.setLevel(logging.INFO if verbosity >= 2 else logging.WARNING if verbosity else logging.ERROR)
    theirs.addFilter(_NotIntelrt())
    theirs.addFilter(_Once())
    for handler in (ours, theirs, steps):
        redact_log_output(handler)
    intelrt_log.addHandler(ours)
    intelrt_log.setLevel(logging.DEBUG if verbosity >= 2 else logging.INFO if verbosity else logging.WARNING)
    root.addHandler(theirs)
    root.setLevel(logging.INFO if verbosity >= 2 else logging.WARNING if verbosity else logging.ERROR)
    hub_level = hub_logging.get_verbosity()
    hub_logging.set_verbosity(logging.INFO if verbosity >= 2 else logging.WARNING if verbosity else logging.ERROR)
    progress.setLevel(logging.INFO)  # a long step is never silent
    progress.addHandler(steps)
    progress.propagate = False  # rendered by `steps` alone, not again as "intelrt: INFO: …"
    logging.captureWarnings(True)
    quiet = _BelowVerbose()
    own = [logging.getLogger(name) for name in OWN_HANDLERS] if not verbosity else []
    for logger in own:
        logger.addFilter(quiet)

    def restore() -> None:
        from .output import SPINNERS

        SPINNERS.stop()
        intelrt_log.removeHandler(ours)
        root.removeHandler(theirs)
        progress.removeHandler(steps)
        intelrt_log.setLevel(before[0])
        root.setLevel(before[1])
        progress.setLevel(before[2])
        progress.propagate = before[3]
        hub_logging.set_verbosity(hub_level)
        logging.captureWarnings(False)
        for logger in own:
            logger.removeFilter(quiet)

    return restore


# -- main ----------------------------------------------------------------------------------------

def _report(exc: BaseException, command: str, as_json: bool, verbosity: int) -> int:
    """``exc`` as the error contract says (a library's message may quote a token: redacted)."""
    from ..support.redaction import redact, redact_text

    failure = describe(exc, command)
    if verbosity:
        print_traceback(exc)
    if as_json:
        print(json.dumps(redact(failure.to_dict()), indent=2))
    else:
        print(redact_text(failure.text()), file=sys.stderr)
    return failure.exit_code


def _stdout_closed() -> int:
    """The reader of our output went away (``intelrt plugins | head``): stop quietly. Python's
    advice: point stdout at devnull so the final flush cannot fail again."""
    with contextlib.suppress(OSError, ValueError):
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
    return EXIT_FAILED


def main(argv: Sequence[str] | None = None) -> int:
    """``intelrt ARGS``: the exit status of the command (see :data:`DESCRIPTION`)."""
    argv = list(sys.argv[1:] if argv is None else argv)
    parser = build_parser()
    as_json = json_requested(parser, argv)
    command, verbosity = "", 0
    restore: Callable[[], None] = lambda: None  # noqa: E731
    try:
        args = parser.parse_args(argv)
        args.argv = tuple(argv)  # as typed: argparse drops a `--` before a remainder (launch's script arguments)
        command, verbosity = args.command, args.verbose
        restore = configure_logging(verbosity)
        with interrupts():
            code = int(args.func(args))
        sys.stdout.flush()  # a closed pipe shows here, not at interpreter exit
        return code
    except BrokenPipeError:
        return _stdout_closed()
    except (Exception, KeyboardInterrupt, Terminated) as exc:  # noqa: BLE001 - the error contract: every failure reported
        if not command:  # the command line itself was wrong: -v was not parsed, but was it given?
            verbosity = verbose_requested(argv)
        try:
            return _report(exc, command, as_json, verbosity)
        except BrokenPipeError:
            return _stdout_closed()
    finally:
        restore()


def console_script() -> None:
    """The ``intelrt`` executable (and ``python -m intelrt.cli``): :func:`main`, then an exit within
    moments of the last line.

    A normal interpreter exit spends seconds after a command's last line (1.3-1.9 s measured here
    for ``plan``, ``run`` and ``train --demo``, 3.5-7 s on a busy 2-core machine; issue 32) of which
    the ``atexit`` handlers take 10-30 ms and the rest is the interpreter tearing down torch's and
    transformers' modules and objects. So the last ``atexit`` handler to run — registered here,
    before anything registers its own — flushes stdout, stderr and every log handler, then ends the
    process with ``os._exit`` and the command's status: non-daemon threads have been joined and
    every other handler (filelock's lock release, inductor's compile workers, temporary
    directories) has run by then; only the teardown is skipped.
    """
    status = [EXIT_FAILED]
    atexit.register(_exit_now, status)
    try:
        status[0] = main()
    except SystemExit as exc:  # argparse's --help and --version end through sys.exit
        code = exc.code
        if code is not None and not isinstance(code, int):
            print(code, file=sys.stderr)
        status[0] = 0 if code is None else code if isinstance(code, int) else EXIT_FAILED
    sys.exit(status[0])


def _exit_now(status: list[int]) -> None:
    for stream in (sys.stdout, sys.stderr):
        with contextlib.suppress(OSError, ValueError):
            stream.flush()
    logging.shutdown()
    os._exit(status[0])
