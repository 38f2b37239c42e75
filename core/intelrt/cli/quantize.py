"""``intelrt quantize``: quantize a model as planned and save it as a checkpoint
(``intelrt.quantize``, ``runtime/quantizing.py``)."""

from __future__ import annotations

import argparse
from typing import Any

from ..hooks.options import QUANTIZATIONS
from .arguments import count
from .models import announce_download, default_model
from .output import emit, step

QUANTIZE_DESCRIPTION = """\
Quantize MODEL with --method and write the result to --output: a checkpoint (safetensors and
config.json with its quantization_config) that `intelrt run DIR`, intelrt.load(DIR) and plain
transformers' from_pretrained(DIR) load. The plan is the one `intelrt plan MODEL --quantization
METHOD` shows: which method runs on this backend, with which package (a missing one names the
intelrt extra that installs it). bitsandbytes (4bit, 8bit) and torchao (int4, int8, int8-dynamic)
quantize while loading; autoround tunes on calibration text (--calibration; auto-round's default
set is on the hub, --iters 0 rounds to nearest without tuning); fp8 on Gaudi runs Intel Neural
Compressor's measure stage on the calibration prompts and writes its statistics and the
QUANTIZE configuration for QUANT_CONFIG (see docs/quantization.md)."""

QUANTIZE_EXAMPLES = """\
examples:
  intelrt quantize ./my-model --method int8 --output ./my-model-int8
  intelrt quantize Qwen/Qwen3-0.6B --method autoround --calibration texts.txt --iters 50 --output ./qwen-w4
  intelrt quantize ./my-model --method autoround --iters 0 --output ./my-model-rtn   # round-to-nearest
  intelrt quantize ./my-model --method fp8 --calibration prompts.jsonl --output ./inc-fp8 --json   # on Gaudi"""

REFUSED = {"quantization": "--quantization is --method here (intelrt quantize MODEL --method METHOD --output DIR)"}


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("model", nargs="?", default=None,
                        help="a directory saved with save_pretrained(), or a hub id (org/name); default: the "
                             "embedded tiny model")
    parser.add_argument("--method", required=True, choices=QUANTIZATIONS,
                        help="how to quantize: " + ", ".join(QUANTIZATIONS) + " (docs/quantization.md: what runs where)")
    parser.add_argument("--output", required=True, metavar="DIR",
                        help="where the quantized checkpoint goes (a new or empty directory)")
    parser.add_argument("--calibration", default=None, metavar="FILE",
                        help="text to tune (autoround) or measure (fp8 on Gaudi) on: a text file, one text per "
                             "paragraph, or a .jsonl file with a \"text\" per line")
    parser.add_argument("--iters", type=count(0), default=None, metavar="N",
                        help="AutoRound's tuning steps (default: auto-round's 200; 0: round-to-nearest)")
    parser.add_argument("--overwrite", action="store_true",
                        help="write into --output even when it holds files already")


def run_quantize(args: argparse.Namespace, plan_kwargs: dict[str, Any]) -> int:
    from ..runtime.quantizing import quantize

    model = args.model or default_model()
    announce_download(model)
    options = {k: v for k, v in plan_kwargs.items() if k != "quantization"}
    with step(f"quantizing {model} with {args.method} into {args.output}"):
        written = quantize(model, method=args.method, output=args.output, calibration=args.calibration,
                           iters=args.iters, overwrite=args.overwrite, **options)
    files = sorted(p.name for p in written.iterdir()) if written.is_dir() else [written.name]
    emit(args, {"model": model, "method": args.method, "output": str(written), "files": files},
         f"quantized {model} with {args.method}: {written}\n" + "\n".join(f"  {name}" for name in files))
    return 0
