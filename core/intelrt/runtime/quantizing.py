"""Quantize and save (``intelrt.quantize``, ``intelrt quantize``): a model quantized as its plan
says, written as a checkpoint plain ``from_pretrained`` loads.

- bitsandbytes, torchao: loaded with the plan's ``quantization_config``, then transformers'
  ``save_pretrained`` (``intelrt.quantization.saving``).
- AutoRound: loaded as it is on disk, then auto-round's ``AutoRound(...).quantize_and_save``
  with your calibration text (``intelrt.quantization.autoround``).
- FP8 on Gaudi (Intel Neural Compressor): the measure stage — the model prepared, run on your
  calibration prompts, INC's statistics written — and the QUANTIZE configuration for
  ``QUANT_CONFIG`` (``intelrt.quantization.inc``); INC keeps FP8 models in no checkpoint format.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from ..errors import ConfigurationError, PlanError
from ..host.manager import get_host
from ..training.saving import write_atomically
from .loading import apply_plan, plan_for_load
from .quantized_load import autoround_device
from .quantized_save import output_directory, refuse_content, refuse_the_source

log = logging.getLogger(__name__)

CALIBRATING = ("auto-round", "inc")
"""The methods that tune or measure on calibration text."""


def calibration_texts(calibration: Sequence[str] | str | os.PathLike[str] | None) -> list[str] | None:
    """Calibration text: a list of texts, or a file of them (``.jsonl``: each line's ``text``;
    anything else: one text per paragraph, blank lines between)."""
    if calibration is None:
        return None
    if isinstance(calibration, (str, os.PathLike)):
        path = Path(calibration)
        if not path.is_file():
            raise ConfigurationError(f"calibration={os.fspath(calibration)!r} is not a file; pass a text or .jsonl "
                                     "file, or a list of texts")
        body = path.read_text(encoding="utf-8")
        if path.suffix == ".jsonl":
            import json

            texts = []
            for number, line in enumerate(body.splitlines(), 1):
                if not line.strip():
                    continue
                try:
                    row = json.loads(line)
                except ValueError:
                    raise ConfigurationError(f"{path}:{number}: not a JSON line") from None
                if not isinstance(row, dict) or not isinstance(row.get("text"), str):
                    raise ConfigurationError(f"{path}:{number}: each line must be an object with a \"text\" string")
                texts.append(row["text"])
        else:
            texts = [p.strip() for p in body.split("\n\n")]
    else:
        texts = list(calibration)
    texts = [t for t in texts if isinstance(t, str) and t.strip()]
    if not texts:
        raise ConfigurationError("calibration holds no text: give at least one non-empty text")
    return texts


def quantize(model: str | os.PathLike[str], *, method: str, output: str | os.PathLike[str],
             calibration: Sequence[str] | str | os.PathLike[str] | None = None, iters: int | None = None,
             overwrite: bool = False, **options: Any) -> Path:
    """Quantize ``model`` with ``method`` (a ``quantization=`` value: ``4bit``, ``8bit``, ``int4``,
    ``int8``, ``int8-dynamic``, ``autoround``, ``fp8``) and write the result to ``output`` (a new
    or empty directory, returned): a checkpoint ``intelrt.load(output)`` and plain
    ``from_pretrained(output)`` load, or — FP8 on Gaudi — INC's statistics and the
    ``inc_fp8_quantize.json`` that ``QUANT_CONFIG`` names.

    ``calibration``: texts (or a text / ``.jsonl`` file) AutoRound tunes on and INC measures on;
    ``iters``: AutoRound's tuning steps (0: round-to-nearest). ``options``: as for ``load``."""
    if iters is not None and (isinstance(iters, bool) or not isinstance(iters, int) or iters < 0):
        raise ConfigurationError(f"iters must be a whole number >= 0, got {iters!r}")
    texts = calibration_texts(calibration)
    target = output_directory(output)
    plan = plan_for_load(model, quantization=method, **options)
    refuse_the_source(target, plan.model)
    refuse_content(target, overwrite)
    choice = plan.decided.quantization
    if choice is None or choice.pre_quantized:
        found = plan.decisions["quantization"].reason if choice is not None else "it plans none"
        raise PlanError(f"{plan.model.source} is quantized already ({found}): quantize its unquantized checkpoint")
    if choice.method not in CALIBRATING and (texts is not None or iters is not None):
        raise ConfigurationError(f"quantization={method!r} ({choice.method}) quantizes without calibration: drop "
                                 "calibration= / iters= (AutoRound and FP8 on Gaudi use them)")
    if iters is not None and choice.method != "auto-round":
        raise ConfigurationError("iters= is AutoRound's tuning steps: drop it for FP8")
    host = get_host()
    if choice.method == "auto-round":
        from ..quantization.autoround import quantize_and_save

        loaded = apply_plan(plan, host, quantize=False)
        if loaded.tokenizer is None:
            raise PlanError("AutoRound tunes on tokenized text, and the model has no tokenizer files")
        def tune_and_save(staging: str) -> None:
            quantize_and_save(loaded.model, loaded.tokenizer, choice, staging, calibration=texts, iters=iters,
                              device=autoround_device(plan))
            loaded.tokenizer.save_pretrained(staging)

        write_atomically(target, tune_and_save, "the AutoRound checkpoint")
        return target
    loaded = apply_plan(plan, host)
    if choice.method == "inc":
        if texts is None:
            raise ConfigurationError("FP8 on Gaudi measures activation ranges on calibration prompts first (INC's "
                                     "measure stage): pass calibration= (texts, or a text / .jsonl file)")
        if choice.details.get("stage") != "measure":
            raise PlanError(f"INC's statistics exist already ({choice.details.get('stats_path')}): this run would "
                            "quantize, not measure; remove them (or set QUANT_CONFIG to a MEASURE configuration) to "
                            "measure again")
        _calibrate(loaded, texts)
        loaded.save_quantized(target, overwrite=overwrite)  # INC's statistics, and the QUANT_CONFIG file in target
        return target
    return loaded.save_quantized(target, overwrite=overwrite)


def _calibrate(loaded: Any, texts: list[str]) -> None:
    """Run the prepared model on each calibration text (INC records the activations it sees)."""
    import torch

    tokenizer = loaded.tokenizer
    if tokenizer is None:
        raise PlanError("INC measures on tokenized prompts, and the model has no tokenizer files")
    device = loaded.model.device
    with torch.inference_mode():
        for text in texts:
            ids = tokenizer(text, return_tensors="pt").to(device)
            loaded.model(**ids)
    log.info("intelrt: INC measured %d calibration texts", len(texts))
