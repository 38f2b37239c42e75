"""Plan value → what ``from_pretrained`` takes to apply it.

Each method's library is imported here, lazily; a missing one is a ``PlanError`` naming the extra
that installs it. transformers' config classes: ``utils/quantization_config.py``
(``BitsAndBytesConfig``, ``TorchAoConfig`` — which takes a torchao ``AOBaseConfig`` instance since
string quant types were removed — and ``AutoRoundConfig``). A pre-quantized checkpoint needs no
config object (transformers reads its ``quantization_config``) unless the plan loads it through
another loader (GPTQ / AWQ weights through auto-round on Gaudi).
"""

from __future__ import annotations

from typing import Any

from ..errors import PlanError
from .choice import QuantizationChoice


def _missing(choice: QuantizationChoice, module: str) -> PlanError:
    extra = choice.extra or f"{choice.package}"
    return PlanError(f"{choice.method} quantization needs {choice.package or module}, which is not installed: "
                     f"pip install '{extra}'")


def torchao_config(choice: QuantizationChoice) -> Any:
    """The torchao ``AOBaseConfig`` the plan names (``details['config']`` and its layout)."""
    try:
        import torch
        from torchao import quantization as ao
        from torchao.quantization.granularity import PerGroup, PerRow
    except ImportError:
        raise _missing(choice, "torchao") from None
    details = choice.details
    name = str(details.get("config", ""))
    group = choice.number("group_size", choice.group_size or 128)
    if name == "Int4WeightOnlyConfig":
        return ao.Int4WeightOnlyConfig(group_size=group,
                                       int4_packing_format=str(details.get("int4_packing_format", "plain")))
    if name == "IntxWeightOnlyConfig":
        return ao.IntxWeightOnlyConfig(weight_dtype=getattr(torch, str(details.get("weight_dtype", "int4"))),
                                       granularity=PerGroup(group))
    if name == "Int8WeightOnlyConfig":
        return ao.Int8WeightOnlyConfig()
    if name == "Int8DynamicActivationInt8WeightConfig":
        return ao.Int8DynamicActivationInt8WeightConfig()
    if name == "Float8DynamicActivationFloat8WeightConfig":
        return ao.Float8DynamicActivationFloat8WeightConfig(granularity=PerRow())
    raise PlanError(f"the plan names torchao's {name!r}, which intelrt does not build")


def quantization_config(choice: QuantizationChoice | None) -> Any:
    """transformers' ``quantization_config`` object for the plan's quantization, or ``None`` (not
    quantized, a checkpoint transformers reads by itself, or a method applied after loading:
    auto-round on the fly, INC FP8)."""
    if choice is None:
        return None
    if choice.method == "bitsandbytes" and choice.source == "request":
        import torch
        from transformers import BitsAndBytesConfig

        if choice.bits == 8:
            return BitsAndBytesConfig(load_in_8bit=True)
        return BitsAndBytesConfig(load_in_4bit=True, bnb_4bit_quant_type=choice.quant_type or "nf4",
                                  bnb_4bit_compute_dtype=getattr(torch, choice.compute_dtype or "float32"),
                                  bnb_4bit_use_double_quant=choice.double_quant)
    if choice.method == "torchao" and choice.source == "request":
        from transformers import TorchAoConfig

        quant_type = torchao_config(choice)
        return TorchAoConfig(quant_type=quant_type)
    if choice.details.get("loader") == "auto-round":
        try:
            import auto_round  # noqa: F401 - transformers imports it while loading
        except ImportError:
            raise _missing(choice, "auto_round") from None
        from transformers import AutoRoundConfig

        return AutoRoundConfig(bits=choice.bits, group_size=choice.group_size or 128, backend="auto")
    return None


def from_pretrained_kwargs(choice: QuantizationChoice | None) -> dict[str, Any]:
    """The ``from_pretrained`` keywords of the plan's quantization: ``quantization_config``, the
    dtype transformers would cast to anyway (AWQ: float16 on CUDA/XPU), and ``use_kernels`` where
    the method runs quantized only through hub kernels (MXFP4 on the CPU)."""
    kwargs: dict[str, Any] = {}
    config = quantization_config(choice)
    if config is not None:
        kwargs["quantization_config"] = config
    if choice is not None and choice.dtype:
        kwargs["dtype"] = choice.dtype
    if choice is not None and choice.details.get("use_kernels"):
        kwargs["use_kernels"] = True
    return kwargs
