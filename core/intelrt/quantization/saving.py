"""Save a quantized model as a checkpoint that plain ``from_pretrained`` loads (its
``quantization_config`` in config.json).

transformers saves a quantized model when its quantizer is serializable
(``HfQuantizer.is_serializable``: bitsandbytes, torchao — tensor subclasses flattened into
safetensors by torchao's ``flatten_tensor_state_dict`` —, AutoRound, GPTQ, AWQ,
compressed-tensors, HQQ …; not optimum-quanto). AutoRound quantizes *and* saves with auto-round
itself (``autoround.quantize_and_save``), from an unquantized model. INC's FP8 keeps its scales in
its own statistics files, not in a checkpoint (``inc.save_measurement``).
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from ..errors import PlanError
from .choice import QuantizationChoice
from .methods import method_of


def save_quantized(model: Any, choice: QuantizationChoice, directory: str | os.PathLike[str], *,
                   tokenizer: Any = None) -> Path:
    """Write ``model``, loaded with ``choice``'s quantization, to ``directory`` as safetensors plus
    config.json (its ``quantization_config``); the tokenizer too when given. Returns the directory."""
    method = method_of(choice)
    target = Path(directory)
    if not method.serializable:
        raise PlanError(f"{method.title} cannot be saved as a checkpoint: {method.serializable_source}")
    if choice.dequantized:
        raise PlanError(f"{method.title} was dequantized on this device while loading: saving would write "
                        "unquantized weights. Save the checkpoint you loaded instead")
    if getattr(model, "hf_quantizer", None) is None and not getattr(model, "is_quantized", False):
        raise PlanError(f"the model is not quantized (no transformers quantizer on it): load it with the plan's "
                        f"quantization ({method.title}) first")
    target.mkdir(parents=True, exist_ok=True)
    model.save_pretrained(target, safe_serialization=True)
    if tokenizer is not None:
        tokenizer.save_pretrained(target)
    return target
