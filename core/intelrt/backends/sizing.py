"""How big a model is against a device: the sizing facts every backend's placement and
parallelism rules share. Pure: no torch, no device."""

from __future__ import annotations

from ..hooks.backend import Backend
from ..hooks.concerns import Decided
from ..hooks.model import ModelInfo

FIT_HEADROOM = 1.2  # weights × this must fit: activations and KV cache need room too
BYTES_PER_PARAM = {"float32": 4.0, "bfloat16": 2.0, "float16": 2.0}
DEFAULT_CONTEXT = 4096
"""Cache slots per row (prompt plus completion) of intelrt's engine and server unless ``context_length``
says otherwise; never more than the model's ``max_position_embeddings``."""


def context_limit(model: ModelInfo) -> int:
    """The tokens a row holds by default: :data:`DEFAULT_CONTEXT`, or the model's positions when fewer."""
    text = model.config.get("text_config") or model.config
    positions = text.get("max_position_embeddings")
    return min(positions, DEFAULT_CONTEXT) if isinstance(positions, int) and positions > 1 else DEFAULT_CONTEXT


def bytes_per_parameter(decided: Decided) -> float | None:
    """Bytes one weight takes under the decisions made so far (quantization, then dtype; a
    quantization dequantized on this device takes the dtype's)."""
    quantized = decided.quantization.bytes_per_weight if decided.quantization is not None else None
    return quantized if quantized is not None else BYTES_PER_PARAM.get(str(decided.dtype))


def smallest_device_memory(backend: Backend) -> int | None:
    """Bytes of the smallest visible device (``None`` when the runtime reports no memory)."""
    memories = [d.total_memory for d in backend.devices if d.total_memory]
    return min(memories) if memories else None


def fits_one_device(backend: Backend, model: ModelInfo, bytes_per_param: float | None = None) -> bool | None:
    """Whether the weights fit the smallest visible device (``None`` when memory is unknown)."""
    memory = smallest_device_memory(backend)
    if memory is None:
        return None
    need = model.weight_bytes if bytes_per_param is None else model.parameter_count * bytes_per_param
    return need * FIT_HEADROOM <= memory
