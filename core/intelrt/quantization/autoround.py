"""AutoRound on the fly: quantize a loaded model with Intel's auto-round and save it as a checkpoint
transformers loads.

transformers loads AutoRound checkpoints only (``quantizers/quantizer_auto_round.py``:
"AutoRound only supports pre-quantized models"), so ``quantization='autoround'`` is auto-round's
own flow: ``AutoRound(model, tokenizer, scheme=..., iters=..., dataset=...)`` then
``quantize_and_save(output_dir, format="auto_round")`` (auto-round 0.16
``compressors/base.py``), after which ``from_pretrained(output_dir)`` runs it through auto-round's
inference backends. Its defaults (``iters=200``, ``nsamples=128``, ``seqlen=2048``, dataset
``NeelNanda/pile-10k``) are auto-round's; the dataset comes from the hub, so offline runs pass
their own calibration text (or ``iters=0``: round-to-nearest, no tuning).
"""

from __future__ import annotations

import logging
import os
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from ..errors import PlanError
from ..support.hubcache import hub_offline, is_repo_cached
from .choice import QuantizationChoice

log = logging.getLogger(__name__)

EXTRA = "intelrt[autoround]"
DEFAULT_ITERS = 200
DEFAULT_SAMPLES = 128
DEFAULT_SEQLEN = 2048
DEFAULT_DATASET = "NeelNanda/pile-10k"
"""auto-round's default calibration set (``compressors/base.py``), from the hub."""


def calibration_defaults(bits: int, group_size: int) -> dict[str, Any]:
    """The plan's AutoRound settings: auto-round's W{bits}A16 scheme and its tuning defaults."""
    return {"scheme": f"W{bits}A16", "bits": bits, "group_size": group_size, "sym": True, "iters": DEFAULT_ITERS,
            "nsamples": DEFAULT_SAMPLES, "seqlen": DEFAULT_SEQLEN, "format": "auto_round"}


def _auto_round() -> Any:
    try:
        from auto_round import AutoRound
    except ImportError:
        raise PlanError(f"quantization='autoround' uses auto-round, which is not installed: pip install '{EXTRA}' "
                        "(or pip install 'auto-round>=0.5')") from None
    return AutoRound


def quantize_and_save(model: Any, tokenizer: Any, choice: QuantizationChoice, output_dir: str | os.PathLike[str], *,
                      calibration: Sequence[str] | None = None, iters: int | None = None,
                      device: str | None = None) -> Path:
    """Quantize ``model`` with auto-round as ``choice`` says and write the checkpoint to
    ``output_dir`` (returned); ``calibration``: texts to tune on (auto-round's hub dataset
    otherwise); ``iters``: tuning steps (0: round-to-nearest)."""
    if choice.method != "auto-round":
        raise PlanError(f"auto-round quantizes a plan whose method is auto-round, not {choice.method}")
    details = dict(choice.details)
    steps = choice.number("iters", DEFAULT_ITERS) if iters is None else int(iters)
    samples = choice.number("nsamples", DEFAULT_SAMPLES)
    seqlen = choice.number("seqlen", DEFAULT_SEQLEN)
    if calibration is not None:
        texts = [t for t in calibration if isinstance(t, str) and t.strip()]
        if not texts:
            raise PlanError("calibration must hold at least one non-empty text")
        samples = min(samples, len(texts))
        # auto-round keeps only samples of at least seqlen tokens: fit seqlen to the shortest text
        seqlen = min(seqlen, min(len(tokenizer(t)["input_ids"]) for t in texts))
    elif steps and hub_offline() and not is_repo_cached(DEFAULT_DATASET, "dataset"):  # iters=0: no data
        raise PlanError(f"AutoRound tunes on calibration text; its default dataset ({DEFAULT_DATASET}) is on the hub, "
                        "which is offline (HF_HUB_OFFLINE), and not in the local cache: pass your own text (intelrt "
                        "quantize MODEL --method autoround --calibration FILE --output DIR, or intelrt.quantize(..., "
                        "calibration=[...])), or iters=0 (round-to-nearest, no tuning)")
    kwargs: dict[str, Any] = {"scheme": str(details.get("scheme", f"W{choice.bits}A16")),
                              "group_size": choice.number("group_size", choice.group_size or 128),
                              "sym": bool(details.get("sym", True)), "iters": steps, "nsamples": samples,
                              "seqlen": seqlen}
    if calibration is not None:
        kwargs["dataset"] = texts
    elif steps == 0:
        # plain round-to-nearest: auto-round's "optimized RTN" (its default at iters=0) calibrates on data
        kwargs["disable_opt_rtn"] = True
    if device is not None:
        kwargs["device_map"] = device
    target = Path(output_dir)
    quantizer = _auto_round()(model, tokenizer, **kwargs)
    log.info("intelrt: AutoRound %s, %d tuning steps on %d samples", kwargs["scheme"], steps, samples)
    _, folder = quantizer.quantize_and_save(str(target), format=str(details.get("format", "auto_round")))
    written = Path(folder) if folder else target
    if written != target and (written / "config.json").is_file():
        # auto-round writes into a sub-folder named after the model and scheme; the caller asked for target
        for item in written.iterdir():
            item.replace(target / item.name)
        written.rmdir()
    return target
