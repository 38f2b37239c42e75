"""The quantization decision's value, and the decision with its reason.

:class:`QuantizationChoice` is shaped like ``hooks.payloads.QuantizationChoice`` (its five fields
keep their names, meaning and defaults, so code reading ``bits`` or ``quant_type`` reads it
unchanged) with what every method needs besides bitsandbytes: where the quantization comes
from, the package and extra that run it, the dtype transformers computes in, the builder's inputs,
and whether the result trains LoRA adapters, saves, or is dequantized on this device. It is the
proposed replacement of the hooks' class (docs/quantization.md, "Wiring").
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from ..hooks.payloads import JSONValue, Payload
from ..hooks.types import Decision

SOURCES = ("request", "checkpoint")
"""``request``: quantized while loading (``quantization=``); ``checkpoint``: the weights on disk
are quantized (their ``quantization_config``)."""
BITS = (2, 3, 4, 5, 6, 7, 8)
"""Widths transformers' configs accept (``GPTQConfig.post_init``: 2/3/4/8; ``AutoRoundConfig``: 2-8)."""


def _fail(message: str) -> None:
    raise TypeError(f"QuantizationChoice: {message}")


def _plain(value: Any) -> JSONValue:
    if isinstance(value, Mapping):
        return {str(k): _plain(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_plain(v) for v in value]
    return value


@dataclass(frozen=True)
class QuantizationChoice(Payload):
    """Weights quantized by ``method`` to ``bits``, as the plan applies them.

    ``method`` is transformers' ``quant_method`` family: ``bitsandbytes``, ``torchao``,
    ``auto-round``, ``inc`` (Intel Neural Compressor FP8 on Gaudi), ``gptq``, ``awq``,
    ``compressed-tensors``, ``fbgemm_fp8``, ``fp8`` (fine-grained FP8), ``mxfp4``, ``hqq``,
    ``quanto``. ``scheme`` names the variant (``nf4``, ``int8-weight-only``, ``w4a16`` …).
    """

    method: str
    bits: int
    quant_type: str | None = None
    """bitsandbytes 4-bit only: ``nf4`` or ``fp4``."""
    compute_dtype: str | None = None
    """bitsandbytes 4-bit only: the dtype matmuls run in (``bfloat16``, ``float16``, ``float32``)."""
    double_quant: bool = False
    scheme: str | None = None
    source: str = "request"
    package: str | None = None
    """The distribution that runs it (``torchao``, ``auto-round``, ``gptqmodel`` …)."""
    extra: str | None = None
    """The intelrt extra that installs ``package`` (``intelrt[torchao]``)."""
    group_size: int | None = None
    dtype: str | None = None
    """The dtype transformers loads the model in with this method on this device (AWQ: float16 on
    CUDA and XPU); ``None``: the plan's dtype decision stands."""
    details: Mapping[str, JSONValue] = field(default_factory=dict)
    """What the runtime builder needs (a torchao config class and its arguments, INC's JSON
    configurations, a checkpoint's loading attributes …); plain JSON."""
    trainable: bool = False
    """PEFT trains LoRA adapters on this base (``lora.lora_support`` says why or why not)."""
    serializable: bool = True
    """``save_pretrained`` writes it as a checkpoint plain ``from_pretrained`` loads."""
    dequantized: bool = False
    """transformers expands the weights to ``dtype`` on this device: it runs, saving no memory."""

    def __post_init__(self) -> None:
        for name in ("method", "source"):
            if not isinstance(getattr(self, name), str) or not getattr(self, name):
                _fail(f"{name} must be a non-empty str, got {getattr(self, name)!r}")
        if isinstance(self.bits, bool) or not isinstance(self.bits, int) or self.bits not in BITS:
            _fail(f"bits={self.bits!r} is not one of {', '.join(map(str, BITS))}")
        if self.source not in SOURCES:
            _fail(f"source={self.source!r} is not one of {', '.join(SOURCES)}")
        for name in ("quant_type", "compute_dtype", "scheme", "package", "extra", "dtype"):
            value = getattr(self, name)
            if value is not None and not isinstance(value, str):
                _fail(f"{name} must be str or None, got {value!r}")
        if self.group_size is not None and (isinstance(self.group_size, bool) or not isinstance(self.group_size, int)):
            _fail(f"group_size must be int or None, got {self.group_size!r}")
        for name in ("double_quant", "trainable", "serializable", "dequantized"):
            if not isinstance(getattr(self, name), bool):
                _fail(f"{name} must be bool, got {getattr(self, name)!r}")
        if not isinstance(self.details, Mapping):
            _fail(f"details must be a mapping, got {self.details!r}")
        object.__setattr__(self, "details", _plain(self.details))
        try:
            json.dumps(self.to_dict())
        except (TypeError, ValueError) as exc:
            _fail(f"every field must be JSON-serialisable (plans are data): {exc}")

    def number(self, key: str, default: int) -> int:
        """An integer of ``details`` (``default`` when absent)."""
        value = self.details.get(key)
        if value is None:
            return default
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            raise TypeError(f"QuantizationChoice.details[{key!r}] must be a number, got {value!r}")
        return int(value)

    @property
    def pre_quantized(self) -> bool:
        return self.source == "checkpoint"


@dataclass(frozen=True)
class QuantizationPlan:
    """A decided quantization: the value, why, the notes a user should read, the SPEC claim."""

    choice: QuantizationChoice | None
    reason: str
    notes: tuple[str, ...] = ()
    claim: str | None = None

    def decision(self) -> Decision:
        """The hooks' ``Decision`` for the quantization concern."""
        return Decision(self.choice, self.reason, claim=self.claim, notes=self.notes)
