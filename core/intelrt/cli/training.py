"""``intelrt train`` and ``intelrt launch`` (kept apart from cli.py's inference commands)."""

from __future__ import annotations

import argparse
import logging
import shutil
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

from ..errors import ConfigurationError

log = logging.getLogger("intelrt")

#: ``intelrt train --demo`` (``make run``): the whole lifecycle on the embedded tiny model.
DEMO = {"epochs": 20.0, "learning_rate": 1e-2, "block_size": 64, "batch_size": 4, "prompt": "Intel GPUs are"}
_DEMO_MARKER = ".intelrt-demo"


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


def _train_request(args: argparse.Namespace) -> tuple[str, object, str, dict[str, Any]]:
    """(model, data, output_dir, train kwargs) from the command line, ``--demo`` filling the gaps."""
    from ..tiny import corpus_text, default_model_path

    if args.simulate:
        raise ConfigurationError("--simulate only plans; training runs on a real device. Use "
                                 "`intelrt plan MODEL --simulate ...` to see the plan for a machine you lack.")
    model = args.model or str(default_model_path())
    data: object = args.data
    output = args.output
    epochs = args.epochs
    extra: dict[str, Any] = {}
    if args.demo:
        _one_thread_for_the_tiny_model()
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
    return model, data, output, kwargs


def run_train(args: argparse.Namespace, plan_kwargs: dict[str, Any], emit: Callable[..., None]) -> int:
    from ..runtime.loading import load
    from ..training.locking import is_main_process

    if args.four_bit:
        if plan_kwargs.get("quantization") not in (None, "4bit"):
            raise ConfigurationError(f"--4bit and --quantization {plan_kwargs['quantization']} disagree; pass one")
        plan_kwargs["quantization"] = "4bit"
    model, data, output, kwargs = _train_request(args)
    if plan_kwargs.get("parallel") == "auto":
        plan_kwargs["parallel"] = "none"  # loaded to be trained: never split tensor-parallel for inference
    loaded = load(model, **plan_kwargs)
    if not is_main_process():  # in a launched job every rank trains (and generates); rank 0 reports
        args.json = False
        emit, print_ = (lambda *_: None), (lambda *_: None)
    else:
        print_ = print
    if not args.json:
        print_(loaded.plan)
        print_(f"\ntraining {'LoRA adapters' if kwargs['lora'] else 'the whole model'} on "
              f"{data if isinstance(data, str) else 'the bundled text'}; output {output}")
    before = loaded.generate(args.prompt, max_new_tokens=args.max_new_tokens) if args.prompt else None
    if before is not None and not args.json:
        print_(f"before training: {args.prompt!r} -> {before!r}")
    result = loaded.train(data, **kwargs)
    report: dict[str, Any] = {"plan": loaded.plan.to_dict(), "train": result.to_dict()}
    if not args.json:
        print_(result)
    if args.prompt:
        trained = loaded.generate(args.prompt, max_new_tokens=args.max_new_tokens)
        reloaded = load(output, **{k: v for k, v in plan_kwargs.items() if k != "task"})
        again = reloaded.generate(args.prompt, max_new_tokens=args.max_new_tokens)
        report["generation"] = {"prompt": args.prompt, "before": before, "trained": trained, "reloaded": again,
                                "reloaded_matches": again == trained}
        if not args.json:
            print_(f"after training:  {args.prompt!r} -> {trained!r}")
            print_(f"reloaded from {output}: {args.prompt!r} -> {again!r} "
                  f"({'same as the trained model' if again == trained else 'DIFFERS from the trained model'})")
    if args.json:
        emit(args, report, "")
    return 0


def run_launch(args: argparse.Namespace, simulate: Callable[[str | None], Any], emit: Callable[..., None]) -> int:
    from ..training.launching import launch

    if args.simulate and not args.dry_run:
        raise ConfigurationError("--simulate describes a machine you do not have, so it only works with --dry-run")
    options = {"nproc": args.nproc, "devices": args.devices, "nnodes": args.nnodes, "node_rank": args.node_rank,
               "rdzv_endpoint": args.rdzv_endpoint, "rdzv_id": args.rdzv_id, "via": args.via,
               "module": args.module, "backend": args.backend, "strict": args.strict}
    with simulate(args.simulate):
        command = launch(args.script, args.script_args, dry_run=args.dry_run, **options)
    if args.dry_run:
        emit(args, command.to_dict(), str(command))
        return 0
    if command.returncode:
        print(f"intelrt: {command.via} exited with status {command.returncode}", file=sys.stderr)
    return int(command.returncode or 0)


TRAIN_HELP = "fine-tune MODEL (default: the embedded tiny model) on a text file; --demo runs the whole lifecycle"
LAUNCH_HELP = "run SCRIPT with one process per device via torchrun (or accelerate launch)"


def add_train_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("model", nargs="?", default=None)
    p.add_argument("--data", default=None, help="UTF-8 text file, one example per line")
    p.add_argument("--output", default=None, help="directory for checkpoints and the trained model")
    p.add_argument("--lora", action="store_true", help="train LoRA adapters (PEFT) instead of the whole model")
    p.add_argument("--4bit", dest="four_bit", action="store_true", help="load in 4-bit and train LoRA on it (QLoRA)")
    p.add_argument("--resume", nargs="?", const=True, default=False, metavar="CHECKPOINT",
                   help="continue from the last checkpoint in --output (or from the CHECKPOINT directory given)")
    p.add_argument("--overwrite", action="store_true",
                   help="train into an --output that already holds a model or checkpoints, replacing them")
    p.add_argument("--epochs", type=float, default=None)
    p.add_argument("--max-steps", type=int, default=None)
    p.add_argument("--learning-rate", type=float, default=None)
    p.add_argument("--batch-size", type=int, default=None, help="per device")
    p.add_argument("--block-size", type=int, default=None, help="tokens per training example (default 128)")
    p.add_argument("--save-steps", type=int, default=None, help="write a checkpoint every N steps")
    p.add_argument("--seed", type=int, default=None)
    p.add_argument("--prompt", default=None, help="generate from this before and after training, and after reloading")
    p.add_argument("--max-new-tokens", type=int, default=20)
    p.add_argument("--demo", action="store_true",
                   help="load -> LoRA fine-tune on the bundled text -> save -> reload -> generate")
    p.add_argument("--json", action="store_true")


def add_launch_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--nproc", type=int, default=None, help="processes per node (default: the visible devices)")
    p.add_argument("--devices", default=None, help="device ids for every rank, e.g. 0,2")
    p.add_argument("--nnodes", type=int, default=1)
    p.add_argument("--node-rank", type=int, default=None)
    p.add_argument("--rdzv-endpoint", default=None, metavar="HOST:PORT", help="rendezvous of a multi-node job")
    p.add_argument("--rdzv-id", default="intelrt")
    p.add_argument("--via", choices=("torchrun", "accelerate"), default="torchrun")
    p.add_argument("-m", "--module", action="store_true", help="SCRIPT is a module name (python -m)")
    p.add_argument("--backend", default="auto")
    p.add_argument("--strict", action="store_true", help="turn risky-configuration warnings into errors")
    p.add_argument("--dry-run", action="store_true", help="print the exact command and environment; run nothing")
    p.add_argument("--simulate", default=None, metavar="KIND:N[:GEN]", help="with --dry-run: as on xpu:4, hpu:8 ...")
    p.add_argument("--json", action="store_true")
    p.add_argument("script")
    p.add_argument("script_args", nargs=argparse.REMAINDER)
