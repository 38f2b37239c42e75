"""QLoRA beyond bitsandbytes: whether PEFT trains LoRA adapters on a quantized base.

Two libraries must agree. transformers' Trainer refuses a quantized model whose quantizer says
``is_trainable`` is False (``trainer_utils.validate_quantization_for_training``), and PEFT must
have a LoRA layer for the quantized module (``peft/tuners/lora/model.py`` dispatchers: bnb, gptq
— gptqmodel's ``BaseQuantLinear`` —, awq, hqq, torchao — int8 only, ``TorchaoLoraLinear`` refuses
``Int4Tensor`` —, inc, eetq, aqlm; anything left a ``torch.nn.Linear`` takes the default layer).
The table's rows (``methods.TABLE``: ``lora``, ``lora_reason``) declares the answer per method; this
module adds what the installed packages say.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from ..errors import PlanError
from ..support.versions import package_version
from .choice import QuantizationChoice
from .methods import method_of

#: The package PEFT needs, besides itself, for the LoRA layer of a method family.
LAYER_PACKAGES = {"gptq": "gptqmodel", "awq": "gptqmodel", "torchao": "torchao", "hqq": "hqq",
                  "bitsandbytes": "bitsandbytes"}


@dataclass(frozen=True)
class LoraSupport:
    """Whether LoRA adapters train on this base, and why."""

    ok: bool
    reason: str


def lora_support(choice: QuantizationChoice | None,
                 version: Callable[[str], str | None] = package_version) -> LoraSupport:
    """Whether PEFT trains LoRA on a model quantized as ``choice`` (``None``: not quantized)."""
    if choice is None:
        return LoraSupport(True, "the base is not quantized")
    method = method_of(choice)
    if not method.lora:
        return LoraSupport(False, f"{method.title}: {method.lora_reason}")
    if choice.dequantized:
        return LoraSupport(True, f"{method.title} is dequantized on this device: LoRA trains on the dequantized weights")
    if version("peft") is None:
        return LoraSupport(False, "LoRA adapters need PEFT: pip install 'intelrt[peft]'")
    needed = LAYER_PACKAGES.get(choice.method)
    if needed and choice.details.get("loader") != "auto-round" and version(needed) is None:
        return LoraSupport(False, f"PEFT's LoRA layer for {method.title} needs {needed}, which is not installed")
    if choice.details.get("loader") == "auto-round":
        return LoraSupport(False, f"{method.title} loads through auto-round on this device, whose layers train no "
                                  "adapters (transformers' AutoRoundQuantizer.is_trainable is False)")
    return LoraSupport(True, f"{method.title}: {method.lora_reason}")


def require_lora(choice: QuantizationChoice | None) -> None:
    """Raise a ``PlanError`` with the reason when LoRA cannot train on this base."""
    support = lora_support(choice)
    if not support.ok:
        raise PlanError(f"lora=True on this quantized model is refused: {support.reason}")
