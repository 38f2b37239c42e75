"""The quantization a plan applies after ``from_pretrained``: the methods transformers does not
apply while loading.

- ``quantization='autoround'``: transformers loads only AutoRound checkpoints
  (``quantizers/quantizer_auto_round.py``: "AutoRound only supports pre-quantized models"), so the
  unquantized model is quantized with auto-round, saved to a temporary directory in auto-round's
  format and loaded back from it through transformers' AutoRound quantizer (what
  ``intelrt quantize --method autoround`` writes to a directory of your choice).
- ``quantization='fp8'`` on Gaudi: Intel Neural Compressor's stage of the run (``prepare`` to
  measure, ``convert`` to quantize; ``intelrt.quantization.inc``).
- a compressed-tensors checkpoint: decompressed at load, as transformers would at the first
  forward (intelrt's compact step does not run the model's forward).

Every other method is transformers' own, through ``quantization_config`` (or the checkpoint's).
"""

from __future__ import annotations

import contextlib
import logging
import shutil
import sys
import tempfile
from collections.abc import Iterator, Mapping
from typing import Any

from ..errors import PlanError
from ..hooks.payloads import QuantizationChoice
from ..hooks.plan import Plan

log = logging.getLogger(__name__)


def after_load(model: Any, tokenizer: Any, plan: Plan, auto_class: Any, kwargs: Mapping[str, Any]) -> Any:
    """``model`` as the plan's quantization leaves it (``auto_class`` and ``kwargs``: how it was
    loaded, to load AutoRound's result back the same way)."""
    choice = plan.decided.quantization
    if choice is not None and choice.method == "compressed-tensors":
        return _decompressed(model)
    if choice is None or choice.pre_quantized:
        return model
    if choice.method == "auto-round":
        return _autoround(model, tokenizer, choice, plan, auto_class, kwargs)
    if choice.method == "inc":
        from ..quantization.inc import apply_fp8

        return apply_fp8(model, choice.details)
    return model


def _decompressed(model: Any) -> Any:
    """A compressed-tensors checkpoint decompressed now: transformers leaves its packed weights to a
    forward pre-hook on the model (``ModelCompressor.add_decompress_hook``: "decompresses the model on
    first forward pass"), and intelrt's compact step never calls the model's forward."""
    compressor = getattr(getattr(model, "hf_quantizer", None), "compressor", None)
    if compressor is not None and hasattr(model, "ct_decompress_hook"):
        log.info("intelrt: decompressing the compressed-tensors weights (transformers does it at the first forward)")
        compressor.decompress_model(model)
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


_CONVERSION_FAILED = "issues during automatic conversion of the weights"
"""transformers' ``log_state_dict_report`` (utils/loading_report.py): a quantizer could not convert
some weights; the causes are in its load report, logged just before."""


class _HeldReport(logging.Filter):
    """Holds back transformers' load report when it lists conversion errors: a table of tracebacks
    per weight, always followed by the ``RuntimeError`` :func:`conversion_refused` translates."""

    def __init__(self) -> None:
        super().__init__()
        self.held: list[logging.LogRecord] = []

    def filter(self, record: logging.LogRecord) -> bool:
        if "LOAD REPORT" in str(record.msg) and "CONVERSION" in str(record.msg):
            if record not in self.held:  # seen by the logger and again by a handler
                self.held.append(record)
            return False
        return True


def _conversion_causes(exc: BaseException) -> list[str]:
    """The distinct errors the quantizer raised per weight (``loading_info.conversion_errors`` of the
    frame that raised ``exc``: each entry ends ``{error}\\nError: … on tensors destined for …``)."""
    tb = exc.__traceback__
    while tb is not None and "loading_info" not in tb.tb_frame.f_locals:
        tb = tb.tb_next
    info = tb.tb_frame.f_locals["loading_info"] if tb is not None else None
    causes: list[str] = []
    for text in getattr(info, "conversion_errors", {}).values():
        lines = [line.strip() for line in str(text).splitlines() if line.strip()]
        cause = next((lines[i - 1] for i, line in enumerate(lines) if i and line.startswith("Error")), lines[-1:])
        cause = cause if isinstance(cause, str) else (cause[0] if cause else "")
        if cause and cause not in causes:
            causes.append(cause)
    return causes


@contextlib.contextmanager
def conversion_refused(plan: Plan, class_name: str) -> Iterator[None]:
    """``from_pretrained`` with the plan's quantization: a quantizer that cannot convert this kind of
    model (torchao's asks every model for its input embeddings, which speech encoders lack; int4 needs
    widths its group size divides) ends in transformers' "see the report above" ``RuntimeError``
    after a report of tracebacks. That becomes a :class:`PlanError` naming the method, the model's
    class and the first cause; the report goes to the debug log (``-vv``)."""
    choice = plan.decided.quantization
    if choice is None or choice.pre_quantized:
        yield
        return
    held = _HeldReport()
    target = logging.getLogger("transformers.modeling_utils")
    target.addFilter(held)
    # the handlers too: a record another test's (or program's) logging set-up routes elsewhere still
    # passes a handler on its way to the terminal
    handlers = {*logging.root.handlers, *logging.getLogger("transformers").handlers}
    for handler in handlers:
        handler.addFilter(held)
    try:
        yield
    except RuntimeError as exc:
        if _CONVERSION_FAILED not in str(exc):
            raise
        from ..quantization.methods import method_of

        causes = _conversion_causes(exc)
        for record in held.held:  # debug: shown with -vv, never at a level a caller's INFO set-up shows
            log.debug("%s", record.getMessage())
        shown = "; ".join(c.rstrip(".") for c in causes[:2]) + (f" (and {len(causes) - 2} more)" if len(causes) > 2 else "")
        raise PlanError(
            f"{method_of(choice).title} cannot convert the weights of {class_name} ({plan.model.source})"
            + (f": {shown}" if shown else "") + ". Pick another method (intelrt plan MODEL --quantization METHOD "
            "shows what runs here), or load it unquantized") from exc
    finally:
        target.removeFilter(held)
        for handler in handlers:
            handler.removeFilter(held)
        for record in held.held if sys.exc_info()[0] is None else ():
            target.handle(record)  # no error followed: the report is the user's, as transformers meant it
