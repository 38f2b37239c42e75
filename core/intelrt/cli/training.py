"""``intelrt train`` and ``intelrt launch`` (kept apart from app.py's inference commands)."""

from __future__ import annotations

import argparse
import logging
import re
import shutil
import signal
import subprocess
import sys
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ..errors import ConfigurationError
from ..support.tables import plural
from ..training.rank_watch import DEFAULT_HANG_TIMEOUT_S
from .arguments import SIMULATE_HELP, count, non_empty, non_negative_seconds, positive_number
from .failures import RunFailed, UsageError
from .interrupt import Terminated
from .models import (
    announce_download,
    check_tokens,
    default_model,
    load_planned,
    planned,
    require_generation,
    simulated,
)
from .output import emit, say, step

if TYPE_CHECKING:
    from ..training.launching import LaunchCommand

log = logging.getLogger("intelrt")

#: ``intelrt train --demo`` (``make run``): the whole lifecycle on the embedded tiny model.
DEMO = {"epochs": 20.0, "learning_rate": 1e-2, "block_size": 64, "batch_size": 4, "prompt": "Intel GPUs are"}
_DEMO_MARKER = ".intelrt-demo"
MAX_SEED = 2**32 - 1
"""numpy's seeds (which transformers' set_seed also sets) stop here."""
RDZV_ID = "intelrt"
"""torchrun's rendezvous id of a multi-node job when --rdzv-id is not given."""
MAX_NPROC = 1024
"""More processes per node than any machine runs ranks; a typo such as --nproc 80000 is refused."""

TRAIN_DESCRIPTION = """\
Fine-tune MODEL (default: the embedded tiny model) on a UTF-8 text file, one example per line:
the whole model, LoRA adapters (--lora) or QLoRA (--4bit), with TrainingArguments from the plan.
The plan is printed first; Trainer shows a progress bar; a summary (loss, steps, time) ends the run.
--demo runs the whole lifecycle on the tiny model: generate, LoRA fine-tune on the bundled text,
save, reload, generate again."""
TRAIN_EXAMPLES = """\
examples:
  intelrt train --demo
  intelrt train ./my-model --data train.txt --lora --output out --epochs 3
  intelrt train ./my-model --data train.txt --4bit --output out --max-steps 100 --save-steps 50
  intelrt train ./my-model --data train.txt --lora --output out --resume"""
LAUNCH_DESCRIPTION = """\
Run SCRIPT with one process per device through torchrun (or accelerate launch), every rank with the
environment the backend needs (visibility masks, collective settings). Ends with a summary: ranks,
their exit codes, time. --dry-run prints the exact command and environment and runs nothing."""
LAUNCH_EXAMPLES = """\
examples:
  intelrt launch --nproc 2 train.py --epochs 1
  intelrt launch --devices 0,2 -m my_package.train
  intelrt launch --dry-run --simulate xpu:4 train.py
  intelrt launch --via accelerate --nproc 8 train.py"""


# -- train ---------------------------------------------------------------------------------------

def _demo_output() -> Path:
    from ..tiny import cache_root

    out = cache_root() / "demo-lora"
    if out.exists() and (out / _DEMO_MARKER).is_file():
        shutil.rmtree(out)  # only a directory an earlier demo made (it holds the marker)
    out.mkdir(parents=True, exist_ok=True)
    (out / _DEMO_MARKER).write_text("made by `intelrt train --demo`; safe to delete\n", encoding="utf-8")
    return out


def _one_thread_for_the_tiny_model() -> None:
    """The demo's model is tiny: thread start-up costs more than the math, and on a busy 2-core
    machine two threads thrash. Unless the user chose (OMP_NUM_THREADS), use one."""
    import os

    if os.environ.get("OMP_NUM_THREADS"):
        return
    import torch

    torch.set_num_threads(1)
    log.info("demo: one CPU thread (the tiny model trains fastest that way; set OMP_NUM_THREADS to choose)")


def _check_paths(data: object, output: str | None) -> None:
    """The files a run needs, checked before minutes of loading."""
    if isinstance(data, str) and not Path(data).is_file():
        raise ConfigurationError(f"--data {data}: no such file (a UTF-8 text file, one example per line)")
    if output is not None and Path(output).exists() and not Path(output).is_dir():
        raise ConfigurationError(f"--output {output} is a file; pass a directory (it is created when missing)")


def _require_peft(args: argparse.Namespace) -> None:
    """LoRA (``--lora``, ``--4bit``, ``--demo``) needs PEFT: say so before loading and generating,
    not after (``Loaded.train`` would find out only then)."""
    import importlib.util

    try:
        missing = importlib.util.find_spec("peft") is None
    except (ImportError, ValueError):
        missing = True
    if missing:
        flag = "--demo" if args.demo else "--4bit" if args.four_bit else "--lora"
        raise ConfigurationError(f"{flag} trains LoRA adapters with PEFT, which is not installed: pip install "
                                 "'intelrt[train]' (peft and datasets)"
                                 + ("" if args.demo else ", or leave --lora and --4bit out to train the whole model"))


def _train_request(args: argparse.Namespace) -> tuple[object, str, dict[str, Any]]:
    """(data, output_dir, train kwargs) from the command line, ``--demo`` filling the gaps."""
    from ..tiny import corpus_text

    data: object = args.data
    output = args.output
    epochs = args.epochs
    extra: dict[str, Any] = {}
    _check_paths(data, output)
    if args.demo:
        data = data or corpus_text().splitlines()
        output = output or str(_demo_output())
        epochs = epochs if epochs is not None else DEMO["epochs"]
        extra = {"learning_rate": DEMO["learning_rate"], "per_device_train_batch_size": DEMO["batch_size"]}
        args.block_size = args.block_size or DEMO["block_size"]
        args.prompt = args.prompt or DEMO["prompt"]
    if data is None:
        raise ConfigurationError("--data FILE is required (a UTF-8 text file, one example per line); "
                                 "or run `intelrt train --demo` to fine-tune the embedded model on its bundled text")
    if output is None:
        raise ConfigurationError("--output DIR is required: where checkpoints and the trained model go")
    kwargs: dict[str, Any] = {"lora": True if (args.lora or args.demo) else None,
                              "epochs": epochs if epochs is not None else 1.0, "output_dir": output,
                              "resume": args.resume, "overwrite": args.overwrite, **extra}
    for flag, key in (("learning_rate", "learning_rate"), ("batch_size", "per_device_train_batch_size"),
                      ("max_steps", "max_steps"), ("save_steps", "save_steps"), ("seed", "seed"),
                      ("block_size", "block_size")):
        value = getattr(args, flag)
        if value is not None:
            kwargs[key] = value
    return data, output, kwargs


def tell(text: object) -> None:
    """A line of the command's report (stdout; progress goes to stderr)."""
    print(text, flush=True)


def run_train(args: argparse.Namespace, plan_kwargs: dict[str, Any]) -> int:
    from ..training.locking import is_main_process

    if args.four_bit:
        if plan_kwargs.get("quantization") not in (None, "4bit"):
            raise UsageError(f"--4bit and --quantization {plan_kwargs['quantization']} disagree; pass one",
                             command="train")
        plan_kwargs["quantization"] = "4bit"
    if args.lora or args.demo or args.four_bit:
        _require_peft(args)
    data, output, kwargs = _train_request(args)
    if plan_kwargs.get("parallel") == "auto":
        plan_kwargs["parallel"] = "none"  # loaded to be trained: never split tensor-parallel for inference
    model = args.model or default_model()
    main_rank = is_main_process()  # in a launched job every rank trains (and generates); rank 0 reports
    quiet = args.json or not main_rank
    if main_rank:
        announce_download(model)
    the_plan = planned(model, **plan_kwargs)
    require_generation(the_plan, "train")
    if kwargs.get("block_size") is not None:
        check_tokens(the_plan, kwargs["block_size"], "--block-size")
    if args.prompt:
        check_tokens(the_plan, args.max_new_tokens, "--max-new-tokens", room=1)
    if args.demo:
        _one_thread_for_the_tiny_model()
    if not quiet:
        tell(the_plan)
    loaded = load_planned(the_plan)
    if not quiet:
        tell(f"\ntraining {'LoRA adapters' if kwargs['lora'] else 'the whole model'} on "
            f"{data if isinstance(data, str) else 'the bundled text'}; output {output}")
    before = None
    if args.prompt:
        with step(f"generating up to {args.max_new_tokens} tokens before training"):
            before = loaded.generate(args.prompt, max_new_tokens=args.max_new_tokens)
    if before is not None and not quiet:
        tell(f"before training: {args.prompt!r} -> {before!r}")
    result = loaded.train(data, **kwargs)
    report: dict[str, Any] = {"plan": loaded.plan.to_dict(), "train": result.to_dict()}
    if not quiet:
        tell(result)
    if args.prompt:
        with step(f"generating up to {args.max_new_tokens} tokens with the trained model"):
            trained = loaded.generate(args.prompt, max_new_tokens=args.max_new_tokens)
        reloaded = load_planned(planned(output, **{k: v for k, v in plan_kwargs.items() if k != "task"}))
        with step(f"generating up to {args.max_new_tokens} tokens with the reloaded model"):
            again = reloaded.generate(args.prompt, max_new_tokens=args.max_new_tokens)
        report["generation"] = {"prompt": args.prompt, "before": before, "trained": trained, "reloaded": again,
                                "reloaded_matches": again == trained}
        if not quiet:
            tell(f"after training:  {args.prompt!r} -> {trained!r}")
            tell(f"reloaded from {output}: {args.prompt!r} -> {again!r} "
                  f"({'same as the trained model' if again == trained else 'DIFFERS from the trained model'})")
    if args.json and main_rank:
        emit(args, report, "")
    return 0


def add_train_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("model", nargs="?", default=None,
                   help="a directory saved with save_pretrained(), or a hub id (org/name); default: the embedded "
                        "tiny model")
    p.add_argument("--data", default=None, metavar="FILE", help="UTF-8 text file, one example per line")
    p.add_argument("--output", default=None, metavar="DIR", help="directory for checkpoints and the trained model")
    p.add_argument("--lora", action="store_true", help="train LoRA adapters (PEFT) instead of the whole model")
    p.add_argument("--4bit", dest="four_bit", action="store_true", help="load in 4-bit and train LoRA on it (QLoRA)")
    p.add_argument("--resume", nargs="?", const=True, default=False, metavar="CHECKPOINT",
                   help="continue from the last checkpoint in --output (or from the CHECKPOINT directory given)")
    p.add_argument("--overwrite", action="store_true",
                   help="train into an --output that already holds a model or checkpoints, replacing them")
    p.add_argument("--epochs", type=positive_number(), default=None, metavar="N",
                   help="passes over the data (default 1; fractions allowed)")
    p.add_argument("--max-steps", type=count(), default=None, metavar="N",
                   help="stop after N optimizer steps (overrides --epochs)")
    p.add_argument("--learning-rate", type=positive_number(), default=None, metavar="LR",
                   help="peak learning rate (default: transformers' 5e-5; LoRA often wants 1e-4 to 1e-3)")
    p.add_argument("--batch-size", type=count(), default=None, metavar="N",
                   help="examples per device per step (default 8)")
    p.add_argument("--block-size", type=count(minimum=2), default=None, metavar="N",
                   help="tokens per training example (default 128; below the model's context)")
    p.add_argument("--save-steps", type=count(), default=None, metavar="N",
                   help="write a checkpoint every N steps (default: at the end only)")
    p.add_argument("--seed", type=count(minimum=0, maximum=MAX_SEED), default=None, metavar="N",
                   help="random seed of data order and initialisation (default: transformers' 42)")
    p.add_argument("--prompt", default=None, type=non_empty(),
                   help="generate from this before and after training, and after reloading")
    p.add_argument("--max-new-tokens", type=count(), default=20, metavar="N",
                   help="tokens generated from --prompt (default: %(default)s)")
    p.add_argument("--demo", action="store_true",
                   help="load -> LoRA fine-tune on the bundled text -> save -> reload -> generate")


# -- launch --------------------------------------------------------------------------------------

_RANK = re.compile(r"^\s*rank\s*:\s*(\d+)")
_EXITCODE = re.compile(r"^\s*exitcode\s*:\s*(-?\d+)")


@dataclass
class RankReport:
    """Which ranks ended how, read from the launcher's failure report (torch elastic's
    ``rank : N`` / ``exitcode : M`` lines, which torchrun and accelerate launch both print)."""

    exit_codes: dict[int, int] = field(default_factory=dict)
    _rank: int | None = None

    def read(self, line: str) -> None:
        rank, code = _RANK.match(line), _EXITCODE.match(line)
        if rank:
            self._rank = int(rank.group(1))
        elif code and self._rank is not None:
            self.exit_codes.setdefault(self._rank, int(code.group(1)))
            self._rank = None


def _exit_code(code: int) -> str:
    """``3``, or ``SIGTERM`` for a rank the launcher stopped (negative codes are signals)."""
    if code >= 0:
        return str(code)
    try:
        return signal.Signals(-code).name
    except ValueError:
        return f"signal {-code}"


def _run_launcher(command: LaunchCommand, as_json: bool) -> tuple[int, RankReport, str | None]:
    """Run the launcher, its output passed through (all of it to stderr with ``--json``, where
    stdout is the result), reading its failure report on the way, while a thread watches the ranks
    for a hang (:mod:`intelrt.training.rank_watch`). Its exit status, the ranks' report, the hang."""
    ranks = RankReport()
    process, beats = command.start(stdout=subprocess.PIPE if as_json else None,
                                   stderr=subprocess.STDOUT if as_json else subprocess.PIPE, bufsize=1)
    hang: list[str | None] = [None]
    stopping = threading.Event()  # from then on the launcher's output is its report of being stopped: not shown
    watcher = threading.Thread(target=lambda: hang.__setitem__(0, command.watch(process, beats,
                                                                                lambda _: stopping.set())),
                               name="intelrt-rank-watch", daemon=True)
    watcher.start()
    output = process.stdout if as_json else process.stderr
    assert output is not None
    try:
        for line in output:
            if not stopping.is_set():
                sys.stderr.write(line)
            ranks.read(line)
        code = process.wait()
        watcher.join()
        return code, ranks, hang[0]
    except KeyboardInterrupt:  # the launcher got the same Ctrl-C: let it stop its ranks first
        process.wait(timeout=60)
        raise
    except Terminated:  # `kill PID` reached intelrt alone: pass it on, the launcher stops its ranks
        process.terminate()
        process.wait(timeout=60)
        raise


RUN_NOTHING = ("--dry-run", "--simulate")
"""launch's options that mean "run nothing": after the script they would be the script's, and the job would run."""


def _script_args(args: argparse.Namespace) -> list[str]:
    """The script's arguments; one of :data:`RUN_NOTHING` among them is refused unless a ``--``
    before them says they are the script's (``intelrt launch -m mod --dry-run`` ran the module)."""
    rest = list(args.script_args)
    typed = list(getattr(args, "argv", ()))
    explicit = len(typed) > len(rest) and typed[len(typed) - len(rest) - 1] == "--"
    misplaced = next((a for a in rest if a.split("=")[0] in RUN_NOTHING), None)
    if misplaced is not None and not explicit:
        flag = misplaced.split("=")[0]
        raise UsageError(f"{flag} comes after the script, so it would go to the script and the job would run: put it "
                         f"before the script (intelrt launch {flag} {'-m ' if args.module else ''}{args.script} …); "
                         f"for a script that takes {flag} itself, write `--` before its arguments "
                         f"(intelrt launch {'-m ' if args.module else ''}{args.script} -- {flag})", command="launch")
    return rest


def run_launch(args: argparse.Namespace) -> int:
    from ..training.launching import launch_command

    if args.simulate is not None and not args.dry_run:
        raise UsageError("--simulate describes a machine you do not have, so it only works with --dry-run",
                         command="launch")
    if args.rdzv_id is not None and (args.rdzv_endpoint is None or args.via != "torchrun"):
        raise UsageError("--rdzv-id names torchrun's rendezvous of a multi-node job: pass it with --rdzv-endpoint "
                         "(and --via torchrun, the default), or leave it out", command="launch")
    options = {"nproc": args.nproc, "devices": args.devices, "nnodes": args.nnodes, "node_rank": args.node_rank,
               "rdzv_endpoint": args.rdzv_endpoint, "rdzv_id": args.rdzv_id or RDZV_ID, "via": args.via,
               "module": args.module, "backend": args.backend, "strict": args.strict,
               "hang_timeout": args.hang_timeout}
    script_args = _script_args(args)
    with step("planning the launch (detecting backends, the ranks' environment)"), simulated(args.simulate):
        command = launch_command(args.script, script_args, **options)
    if args.dry_run:
        if args.simulate is None:  # the run would be refused here: so is its dry run (it printed the command, exit 0)
            from ..training.launching import check_master_port

            check_master_port(command.environment(), command.nnodes)
        emit(args, command.to_dict(), str(command))
        return 0
    for finding in command.findings:
        if finding.severity == "warning":
            log.warning("%s — %s Fix: %s", finding.title, finding.detail, finding.fix)
    where = f"{command.plan.backend.name}" + (f", collective {command.collective}" if command.collective else "")
    ranks_here = plural(command.nproc, "rank") + (f" on this node of {command.nnodes}" if command.nnodes > 1 else "")
    say(f"launching {ranks_here} via {command.via} on {where}: {command.shell()}")
    start = time.perf_counter()
    returncode, ranks, hang = _run_launcher(command, args.json)
    seconds = time.perf_counter() - start
    if hang is not None:
        raise RunFailed(f"the launched job was stopped after {seconds:.1f} s: {hang}",
                        fix="the hung rank's script is where the message says (its output above); raise "
                            "--hang-timeout if that rank is only slow (a long save, a slow first compile)",
                        kind="RankHung")
    codes = {r: 0 for r in range(command.nproc)} if returncode == 0 else ranks.exit_codes
    listed = ", ".join(f"rank {r}: {_exit_code(c)}" for r, c in sorted(codes.items())) or "not reported"
    summary = {"via": command.via, "ranks": command.nproc, "nnodes": command.nnodes, "returncode": returncode,
               "exit_codes": {str(r): c for r, c in sorted(codes.items())}, "seconds": round(seconds, 3),
               "command": command.to_dict()}
    if returncode != 0:
        raise RunFailed(f"the launched job failed after {seconds:.1f} s: {command.via} exited with status "
                        f"{returncode}; exit codes {listed}",
                        fix="the failed rank's output above says why (a rank's traceback, or the launcher's "
                            "report); `intelrt launch --dry-run ...` shows the command and environment",
                        kind="LaunchFailed")
    emit(args, summary, f"intelrt launch: {ranks_here} via {command.via} finished in {seconds:.1f} s; "
                        f"exit codes {listed}")
    return 0


def add_launch_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--nproc", type=count(maximum=MAX_NPROC), default=None, metavar="N",
                   help="processes per node (default: one per visible device; 1 on the CPU)")
    p.add_argument("--devices", default=None, metavar="IDS", help="device ids every rank sees, e.g. 0,2")
    p.add_argument("--nnodes", type=count(), default=1, metavar="N",
                   help="machines in the job (default 1; more need --rdzv-endpoint)")
    p.add_argument("--node-rank", type=count(minimum=0), default=None, metavar="N",
                   help="this machine's index in a multi-node job (0 on the first)")
    p.add_argument("--rdzv-endpoint", default=None, metavar="HOST:PORT", help="rendezvous of a multi-node job")
    p.add_argument("--rdzv-id", default=None, type=non_empty(), metavar="ID",
                   help=f"with --rdzv-endpoint: the job id every node passes (default: {RDZV_ID})")
    p.add_argument("--via", choices=("torchrun", "accelerate"), default="torchrun",
                   help="the launcher (default: %(default)s)")
    p.add_argument("-m", "--module", action="store_true", help="SCRIPT is a module name (python -m)")
    p.add_argument("--backend", default="auto", metavar="NAME",
                   help="auto (the best available accelerator, else the CPU) or a backend name")
    p.add_argument("--strict", action="store_true", help="turn risky-configuration warnings into errors")
    p.add_argument("--hang-timeout", type=non_negative_seconds(), default=DEFAULT_HANG_TIMEOUT_S, metavar="S",
                   help="stop the job, naming the rank, when one keeps the others waiting in a collective for S "
                        "seconds (default: %(default)g; 0: do not watch)")
    p.add_argument("--dry-run", action="store_true", help="print the exact command and environment; run nothing")
    p.add_argument("--simulate", default=None, metavar="KIND:N[:GEN]", help=f"with --dry-run: {SIMULATE_HELP}")
    p.add_argument("script", help="the Python script each rank runs (a module name with -m)")
    p.add_argument("script_args", nargs=argparse.REMAINDER, metavar="ARGS",
                   help="arguments for the script (everything after SCRIPT)")
