"""Plan-time rules for the ``decode`` decision, shared by every backend's hooks.

Pure functions of the request, the model's config and earlier decisions: no torch, no device.
"""

from __future__ import annotations

from collections.abc import Mapping
from importlib.util import find_spec
from typing import TYPE_CHECKING

from ..errors import PlanError
from ..hooks.payloads import DecisionValue, DecodeChoice, QuantizationChoice, placement_kwargs
from ..hooks.types import BackendStatus, Decision
from .compact import compact_blocker

if TYPE_CHECKING:
    from ..planning.model_source import ModelInfo
    from ..planning.request import Request

#: Cache layer kinds the static-cache loop handles (transformers' ``config.layer_types``).
STATIC_LAYER_TYPES = ("full_attention", "sliding_attention", "chunked_attention")


def decode_blockers(model: ModelInfo, decisions: Mapping[str, DecisionValue]) -> str | None:
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
    if isinstance(decisions.get("quantization"), QuantizationChoice):
        return ("bitsandbytes-quantized weights: the compiled, graph-captured step is not proven with them, "
                "so transformers' generate runs them")
    if placement_kwargs(decisions.get("placement"))["device_map"] == "auto":
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


def triton_installed() -> bool:
    """Whether Triton, which the one-kernel decode attention is written in, is installed."""
    return find_spec("triton") is not None


def decode_attention_kernel(request: Request, runs_here: bool, why_not: str, step: str) -> bool:
    """Whether the compact step's decode attention runs as intelrt's Triton kernel: the user's
    ``attention_kernel`` (``on`` / ``off``), else ``runs_here`` (the backend's word for its device).

    ``attention_kernel='on'`` where the backend's device cannot run it, or where the step is the
    model's own forward, is refused (``PlanError``) rather than ignored."""
    wanted = request.attention_kernel
    if wanted == "off":
        return False
    if wanted == "on" and step != "compact":
        raise PlanError("attention_kernel='on' needs intelrt's compact decode step, and this model's step is its "
                        "own forward; leave attention_kernel to intelrt (auto)")
    if wanted == "on" and not runs_here:
        raise PlanError(f"attention_kernel='on', but {why_not}; leave attention_kernel to intelrt (auto) or turn "
                        "it off")
    return runs_here and step == "compact"


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
                notes: tuple[str, ...] = (), compile_options: Mapping[str, object] | None = None,
                step: str = "model", attention_kernel: bool = False) -> Decision:
    """The decision for intelrt's fast decode loop (``compile_options``: inductor settings;
    ``step``: ``compact`` or ``model``, see ``compact_step``; ``attention_kernel``: see
    ``decode_attention_kernel``)."""
    options = dict(compile_options) if compile_options and compile_backend == "inductor" else None
    value = DecodeChoice("fast", cache="static", graphs=graphs, compile=compile_backend, step=step,
                         compile_options=options, attention_kernel=attention_kernel)  # type: ignore[arg-type]
    if attention_kernel:
        reason += "; decode attention as intelrt's one Triton kernel per layer"
    return Decision(value, reason, claim=claim, notes=notes)


def plain_generate(reason: str, notes: tuple[str, ...] = ()) -> Decision:
    """The decision to let transformers' ``generate`` decode."""
    return Decision(DecodeChoice.plain_generate(), reason, notes=notes)


def fast_decode_planned(decisions: Mapping[str, DecisionValue]) -> bool:
    """Whether the decode decision made so far is intelrt's fast loop (batching hooks ask)."""
    decode = decisions.get("decode")
    return isinstance(decode, DecodeChoice) and decode.fast
