"""Plan-time rules for the ``decode`` decision, shared by every backend's hooks.

Pure functions of the request, the model's config and earlier decisions: no torch, no device.
"""

from __future__ import annotations

from collections.abc import Mapping
from importlib.util import find_spec
from typing import TYPE_CHECKING

from ..errors import PlanError
from ..hooks.payloads import (
    DecisionValue,
    DecodeChoice,
    ParallelismChoice,
    QuantizationChoice,
    placement_kwargs,
)
from ..hooks.types import BackendStatus, Decision
from .compact import compact_blocker

if TYPE_CHECKING:
    from ..planning.model_source import ModelInfo
    from ..planning.request import Request

#: Cache layer kinds the static-cache loop handles (transformers' ``config.layer_types``).
STATIC_LAYER_TYPES = ("full_attention", "sliding_attention", "chunked_attention")


def layer_types(model: ModelInfo) -> tuple[str, ...]:
    """Each decoder layer's kind as transformers' config class reads it (its class's view when the
    class is known: config.json may list blocks the config class folds, e.g. Dory's ``mlp``)."""
    if model.architecture is not None:
        return model.architecture.layer_types
    config = model.config
    return tuple(str(t) for t in (config.get("text_config") or config).get("layer_types") or ())


def decode_blockers(model: ModelInfo, decisions: Mapping[str, DecisionValue]) -> str | None:
    """Why the fast decode loop cannot serve this model/plan, or ``None`` when it can."""
    task = decisions.get("task")
    if task is not None and task != "text-generation":
        return f"the task is {task}: only text generation decodes tokens"
    config = model.config
    if config.get("is_encoder_decoder"):
        return (f"{model.model_type} is an encoder-decoder model; the fast loop decodes decoder-only models, "
                "so transformers' generate runs it")
    arch = model.architecture
    if arch is None:
        return ("the model's class is its own code (or unknown to transformers): the fast loop runs only "
                "transformers' own classes, whose cache handling it reproduces; transformers' generate runs it")
    if not arch.from_transformers:
        return f"{arch.name} comes from {arch.module}, not transformers; transformers' generate runs it"
    if arch.stateful:
        return (f"{arch.name} carries a recurrent state between steps (transformers marks it _is_stateful), "
                "which the fast loop's static KV cache does not hold; transformers' generate runs it")
    if not arch.takes_cache:
        return f"{arch.name}.forward takes no KV cache to reuse; transformers' generate runs it"
    if not arch.static_cache:
        return (f"transformers does not declare {arch.name} fit for a static KV cache (_can_compile_fullgraph is "
                "False), which the fast loop runs on; transformers' generate runs it")
    odd = sorted(set(layer_types(model)) - set(STATIC_LAYER_TYPES))
    if odd:
        return (f"{model.model_type} has {', '.join(odd)} layers, which a static KV cache does not hold; "
                "transformers' generate runs it")
    if isinstance(decisions.get("quantization"), QuantizationChoice):
        return ("bitsandbytes-quantized weights: the compiled, graph-captured step is not proven with them, "
                "so transformers' generate runs them")
    if placement_kwargs(decisions.get("placement"))["device_map"] == "auto":
        return "the model is split across devices (device_map='auto'); one device graph cannot span several devices"
    return sharded_blocker(decisions)


def sharded_blocker(decisions: Mapping[str, DecisionValue]) -> str | None:
    """Why a model whose weights are sharded across ranks as they load decodes only through
    transformers' ``generate`` (``None`` when they are not): each step runs collectives between the
    ranks, which neither intelrt's loop nor continuous batching schedules."""
    choice = decisions.get("parallelism")
    if not isinstance(choice, ParallelismChoice) or not choice.sharded_load:
        return None
    how = "tensor parallel" if choice.inference == "tensor" else "FSDP2"
    return (f"the weights are sharded across {choice.world_size} ranks as they load ({how}): every step runs "
            "collectives between them, so transformers' generate runs it on every rank")


#: Cache layer kinds transformers' continuous batching allocates (``ATTN_TYPE_TO_ALLOCATOR``).
CONTINUOUS_LAYER_TYPES = ("full_attention", "sliding_attention")


def continuous_blocker(model: ModelInfo) -> str | None:
    """Why transformers' continuous batching (``generate_batch``) cannot run this model, or ``None``.

    Its paged cache holds full- and sliding-attention layers only
    (``continuous_batching/cache.py``: ``group_layers_by_attn_type``), for a transformers class
    whose forward takes a cache and carries no recurrent state, and whose attention and cache
    handling transformers declares modern (the attention interface paged attention plugs into, and
    a static cache: older classes read the cache's length, which a paged cache does not have)."""
    arch = model.architecture
    config = model.config
    if config.get("is_encoder_decoder"):
        return f"{model.model_type} is an encoder-decoder model"
    if arch is None or not arch.from_transformers:
        return "the model's class is not one of transformers' own"
    if arch.stateful or not arch.takes_cache:
        return f"{arch.name} carries a recurrent state or takes no KV cache"
    if not (arch.attention_backend and arch.static_cache):
        return (f"transformers does not declare {arch.name}'s attention and cache fit for it "
                "(_supports_attention_backend and _can_compile_fullgraph)")
    odd = sorted(set(layer_types(model)) - set(CONTINUOUS_LAYER_TYPES))
    if odd:
        return f"{model.model_type} has {', '.join(odd)} layers, which the paged cache does not hold"
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
    arch = model.architecture
    blocker = (compact_blocker(arch.name, arch.module, model.config) if arch is not None else
               "the model's class is unknown; the step runs the model's own forward")
    if blocker is None:
        return "compact", (f"{model.model_type} layers run as intelrt's compact step (q/k/v and gate/up "
                           "projections fused, grouped-query attention without expanding K/V, its own KV cache)")
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
