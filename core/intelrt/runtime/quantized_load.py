"""The quantization a plan applies after ``from_pretrained``: the methods transformers does not
apply while loading.

- ``quantization='autoround'``: transformers loads only AutoRound checkpoints
  (``quantizers/quantizer_auto_round.py``: "AutoRound only supports pre-quantized models"), so the
  unquantized model is quantized with auto-round, saved to a temporary directory in auto-round's
  format and loaded back from it through transformers' AutoRound quantizer (what
  ``intelrt quantize --method autoround`` writes to a directory of your choice).
- ``quantization='fp8'`` on Gaudi: Intel Neural Compressor's stage of the run (``prepare`` to
  measure, ``convert`` to quantize; ``intelrt.quantization.inc``).

Every other method is transformers' own, through ``quantization_config`` (or the checkpoint's).
"""

from __future__ import annotations

import logging
import shutil
import tempfile
from collections.abc import Mapping
from typing import Any

from ..hooks.payloads import QuantizationChoice
from ..hooks.plan import Plan

log = logging.getLogger(__name__)


def after_load(model: Any, tokenizer: Any, plan: Plan, auto_class: Any, kwargs: Mapping[str, Any]) -> Any:
    """``model`` as the plan's quantization leaves it (``auto_class`` and ``kwargs``: how it was
    loaded, to load AutoRound's result back the same way)."""
    choice = plan.decided.quantization
    if choice is None or choice.pre_quantized:
        return model
    if choice.method == "auto-round":
        return _autoround(model, tokenizer, choice, plan, auto_class, kwargs)
    if choice.method == "inc":
        from ..quantization.inc import apply_fp8

        return apply_fp8(model, choice.details)
    return model


def autoround_device(plan: Plan) -> str | None:
    """The device auto-round tunes on: where the plan placed the model (``None``: auto-round's choice)."""
    placement = plan.decided.placement
    device_map = placement.device_map if placement is not None else None
    return device_map if device_map not in (None, "auto") else None


def _autoround(model: Any, tokenizer: Any, choice: QuantizationChoice, plan: Plan, auto_class: Any,
               kwargs: Mapping[str, Any]) -> Any:
    from ..errors import PlanError
    from ..quantization.autoround import quantize_and_save

    if tokenizer is None:
        raise PlanError("quantization='autoround' tunes on tokenized text, and the model has no tokenizer files")
    folder = tempfile.mkdtemp(prefix="intelrt-autoround-")
    try:
        quantize_and_save(model, tokenizer, choice, folder, device=autoround_device(plan))
        del model
        log.info("intelrt: loading the AutoRound checkpoint back from %s", folder)
        reload = {k: v for k, v in kwargs.items() if k != "quantization_config"}
        # the weights are read into memory while loading: the folder goes once they are
        return auto_class.from_pretrained(folder, **reload)
    finally:
        shutil.rmtree(folder, ignore_errors=True)
