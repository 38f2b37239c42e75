"""Plan-time rules for the ``decode`` and ``batching`` decisions, shared by every backend's hooks.

Pure functions of the request, the model's config and earlier decisions: no torch, no device.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from ..errors import PlanError
from ..model_source import ModelInfo
from ..request import Request
from ..types import BackendStatus, Decision, JSONValue
from .compact import compact_blocker

DECODE_METHODS = ("fast", "generate")
#: Cache layer kinds the static-cache loop handles (transformers' ``config.layer_types``).
STATIC_LAYER_TYPES = ("full_attention", "sliding_attention", "chunked_attention")


def decode_blockers(model: ModelInfo, decisions: Mapping[str, JSONValue]) -> str | None:
    """Why the fast decode loop cannot serve this model/plan, or ``None`` when it can."""
    task = decisions.get("task")
    if task is not None and task != "text-generation":
        return f"the task is {task}: only text generation decodes tokens"
    config = model.config
    if config.get("is_encoder_decoder"):
        return (f"{model.model_type} is an encoder-decoder model; the fast loop decodes decoder-only models, "
                "so transformers' generate runs it")
    layer_types = (config.get("text_config") or config).get("layer_types") or ()
    odd = sorted({str(t) for t in layer_types} - set(STATIC_LAYER_TYPES))
    if odd:
        return (f"{model.model_type} has {', '.join(odd)} layers, which a static KV cache does not hold; "
                "transformers' generate runs it")
    if decisions.get("quantization"):
        return ("bitsandbytes-quantized weights: the compiled, graph-captured step is not proven with them, "
                "so transformers' generate runs them")
    if decisions.get("placement") == "auto":
        return "the model is split across devices (device_map='auto'); one device graph cannot span several devices"
    return None


def decode_compile(request: Request, default: str | None) -> str | None:
    """The compile backend for the decode step: the user's word, else ``default`` (``None`` = eager)."""
    choice = request.compile
    if choice == "none":
        return None
    if choice == "auto":
        return default
    if choice == "on":
        return default or "inductor"
    return str(choice)


def decode_graphs(request: Request, backend: BackendStatus, kind: str | None, why_not: str) -> str | None:
    """The graph kind for the decode step: ``kind`` unless the user turned graphs off.

    ``graphs='on'`` where the backend has none is refused (``PlanError``) rather than ignored.
    """
    if request.graphs == "off":
        return None
    if kind is None and request.graphs == "on":
        raise PlanError(f"graphs='on', but {why_not}; leave graphs to intelrt (auto) or turn them off")
    return kind


def compact_step(model: ModelInfo) -> tuple[str, str]:
    """(``compact`` or ``model``, why): which forward the fast loop's step runs for this model.

    ``compact`` is intelrt's compact step (``decoding/compact.py``) for Llama-family layers;
    ``model`` is the model's own forward. Decided from the config; the loaded modules are checked
    again at the first call (adapters or replaced projections fall back, with a note)."""
    blocker = compact_blocker(model.model_type, model.config)
    if blocker is None:
        return "compact", (f"{model.model_type} layers run as intelrt's compact step (fused q/k/v and gate/up "
                           "projections, grouped-query attention without expanding K/V, its own KV cache)")
    return "model", blocker


def fast_decode(graphs: str | None, compile_backend: str | None, reason: str, *, claim: str | None = None,
                notes: tuple[str, ...] = (), compile_options: Mapping[str, JSONValue] | None = None,
                step: str = "model") -> Decision:
    """The decision for intelrt's fast decode loop (``compile_options``: inductor settings;
    ``step``: ``compact`` or ``model``, see ``compact_step``)."""
    value: dict[str, Any] = {"method": "fast", "cache": "static", "graphs": graphs, "compile": compile_backend,
                             "step": step}
    if compile_options and compile_backend == "inductor":
        value["compile_options"] = dict(compile_options)
    return Decision(value, reason, claim=claim, notes=notes)


def plain_generate(reason: str, notes: tuple[str, ...] = ()) -> Decision:
    """The decision to let transformers' ``generate`` decode."""
    return Decision({"method": "generate", "cache": None, "graphs": None, "compile": None}, reason, notes=notes)


def batching_value(method: str, *, engine: str = "generate", max_batch: int | None = None,
                   use_graphs: bool | None = None, use_async_batching: bool | None = None,
                   kv_sizing: str = "memory") -> dict[str, JSONValue]:
    """A ``batching`` decision value.

    ``method`` ``padded``: prompts go in padded batches of at most ``max_batch`` through ``engine``
    (``fast`` = the decode loop, ``generate`` = ``model.generate``). ``continuous``: transformers'
    ``generate_batch`` with ``use_graphs`` / ``use_async_batching`` (``None`` = its auto) and the KV
    cache sized from free device ``memory`` or from the ``requests`` of the call.
    """
    return {"method": method, "engine": engine if method == "padded" else "continuous",
            "max_batch": max_batch, "use_graphs": use_graphs, "use_async_batching": use_async_batching,
            "kv_sizing": kv_sizing if method == "continuous" else None}
