"""Plan-time rules for the ``decode`` and ``batching`` decisions, shared by every backend.

Pure functions of the request, the model's config and earlier decisions: no torch, no device.
The decode engine (``decoding/``) runs what they decide.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, replace
from importlib.util import find_spec
from typing import Any

from ..errors import PlanError
from ..hooks.backend import Backend, Situation
from ..hooks.concerns import Decided
from ..hooks.model import ModelInfo
from ..hooks.payloads import BatchingChoice, DecodeChoice, QuantizationChoice
from ..hooks.request import Request
from ..hooks.types import Decision
from ..support.versions import at_least
from .families import FAMILIES, TRANSFORMERS_MODELS, attention_kernel_blocker, compact_blocker
from .sizing import step_tokens

#: Layer kinds (transformers' ``config.layer_types``) the decode engine's paged cache masks; a
#: ``chunked_attention`` layer (Llama 4) attends in chunks no mask here reproduces.
ENGINE_LAYER_TYPES = ("full_attention", "sliding_attention")


def layer_types(model: ModelInfo) -> tuple[str, ...]:
    """Each decoder layer's kind as transformers' config class reads it (its class's view when the
    class is known: config.json may list blocks the config class folds, e.g. Dory's ``mlp``)."""
    if model.architecture is not None:
        return model.architecture.layer_types
    config = model.config
    return tuple(str(t) for t in (config.get("text_config") or config).get("layer_types") or ())


VISION_LANGUAGE = "image-text-to-text"
OWN_POSITIONS = {
    "PaliGemmaForConditionalGeneration": ("PaliGemma numbers positions from 1 (PaliGemmaModel.forward: "
                                          "position_ids + 1), where the fast loop's decode steps count from 0"),
}
"""Vision-language classes whose language model gets positions other than 0, 1, 2 … of the prompt's
tokens, and how: their decode steps are not the language model's plain ones. (The engine also checks
the positions each prefill used, ``decoding/vision_language.py``, and falls back where they differ.)"""


def decoder_of(model: ModelInfo, task: str | None) -> tuple[str, str, Mapping[str, object]]:
    """(class name, module, config) of what the fast loop's step decodes with: for ``task``
    image-text-to-text the model's language model (the causal-LM class of its text config), else
    the model's own class (a vision-language class loaded for text generation steps as itself)."""
    arch = model.architecture
    if task == VISION_LANGUAGE and arch is not None and arch.language_model is not None:
        text = model.config.get("text_config")
        return (arch.language_model, f"{TRANSFORMERS_MODELS}{arch.text_model_type}",
                text if isinstance(text, Mapping) else model.config)
    return (arch.name, arch.module, model.config) if arch is not None else ("", "", model.config)


def vision_language_blocker(model: ModelInfo) -> str | None:
    """Why the fast loop cannot decode this vision-language model's language model after its
    prefill (``None``: it can). The prefill — vision tower, projector, merged embeddings — is
    transformers' own ``generate`` computing the first token; every later step is the language
    model's, which the compact step runs for its families."""
    arch = model.architecture
    if arch is None or not arch.from_transformers:
        return None  # decode_blockers says why an unknown class decodes with generate
    name, _module, _config = decoder_of(model, VISION_LANGUAGE)
    if arch.language_model is None:
        return (f"{arch.name}'s text decoder ({arch.text_model_type or 'not a sub-model'}) is no causal LM "
                "transformers maps, so after the image prefill there is no language model for the fast loop to "
                "step; transformers' generate runs it")
    if name not in FAMILIES:
        return (f"{arch.name}'s language model ({name}) is not one of the compact step's families, which the "
                "vision-language decode runs on; transformers' generate runs it")
    if FAMILIES[name].latent_attention:
        return (f"its language model ({name}) keeps a latent KV cache (one latent per token), not the per-head keys "
                "and values transformers' prefill hands over; transformers' generate runs it")
    own = OWN_POSITIONS.get(arch.name)
    if own is not None:
        return f"{own}; transformers' generate runs it"
    return None


def decode_blockers(model: ModelInfo, decided: Decided, *, four_bit: bool = False) -> str | None:
    """Why the fast decode loop cannot serve this model/plan, or ``None`` when it can.
    ``four_bit``: the backend runs bitsandbytes 4-bit models on the loop (the model's own forward,
    not compiled; see ``quantized_step``)."""
    task = decided.task
    vision_language = task == VISION_LANGUAGE
    if vision_language:
        why = vision_language_blocker(model)
        if why is not None:
            return why
    elif task is not None and task != "text-generation":
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
    # a vision-language model's steps are its language model's (a compact-step family); its own class only prefills
    if not arch.takes_positions and not vision_language:
        return (f"{arch.name}.forward takes no position_ids: it derives positions itself (from the cache's "
                "length, one number for every row, or ALiBi over its keys), which the fast loop's rows at their own "
                "lengths cannot hand it; transformers' generate runs it")
    if not arch.static_cache and not vision_language:
        return (f"transformers does not declare {arch.name} fit for a static KV cache (_can_compile_fullgraph is "
                "False), which the fast loop runs on; transformers' generate runs it")
    odd = sorted(set(layer_types(model)) - set(ENGINE_LAYER_TYPES))
    if odd:
        return (f"{model.model_type} has {', '.join(odd)} layers, which the fast loop's paged KV cache does not "
                "mask; transformers' generate runs it")
    differ = per_layer_cache_shapes(model.config)
    if differ:
        return (f"its layers' keys and values differ in size ({differ}: config.per_layer_config), and the fast loop's "
                "paged KV cache holds one size for every layer; transformers' generate runs it")
    name, module, decoder_config = decoder_of(model, task)
    if decoder_config.get("kv_lora_rank") and compact_blocker(name, module, decoder_config) is not None:
        return (f"{arch.name} has multi-head latent attention (kv_lora_rank): under its own forward its keys and "
                "values differ in size, which the paged KV cache does not hold (the compact step holds DeepSeek-V2/V3's "
                "latent cache); transformers' generate runs it")
    blocker = quantization_blocker(decided.quantization, four_bit)
    if blocker is not None:
        return blocker
    if decided.placement is not None and decided.placement.device_map == "auto":
        return "the model is split across devices (device_map='auto'); one device graph cannot span several devices"
    return sharded_blocker(decided)


CACHE_SIZE_FIELDS = ("head_dim", "num_key_value_heads", "num_attention_heads", "hidden_size")
"""Per-layer config overrides that change a layer's KV cache size (transformers' heterogeneous configs)."""


def per_layer_cache_shapes(config: Mapping[str, object]) -> str | None:
    """The per-layer overrides (``per_layer_config``, transformers' heterogeneous configs) of the
    model's or its text decoder's config that give a layer another KV size, or ``None``."""
    found = []
    for part in (config, config.get("text_config")):
        overrides = part.get("per_layer_config") if isinstance(part, Mapping) else None
        if not isinstance(overrides, Mapping):
            continue
        for layer, values in sorted(overrides.items(), key=lambda item: str(item[0])):
            if isinstance(values, Mapping):
                found += [f"layer {layer} {key}={values[key]}" for key in CACHE_SIZE_FIELDS if key in values]
    return ", ".join(found[:3]) if found else None


def quantization_blocker(choice: QuantizationChoice | None, four_bit: bool) -> str | None:
    """Why the fast loop cannot run these quantized weights (``None``: it can, with the model's own
    forward — see :func:`quantized_step`). bitsandbytes' LLM.int8 splits outlier columns per call,
    data-dependent work a device graph cannot hold; its 4-bit layers run on the loop where the
    backend says so (``four_bit``, ``Backend.fast_decode_4bit``). torchao's tensor subclasses and
    the pre-quantized formats' layers are ordinary modules of the model's forward."""
    if choice is None or choice.method != "bitsandbytes":
        return None
    if choice.bits == 4 and four_bit:
        return None
    return (f"bitsandbytes {choice.bits}-bit weights: the fast loop is not proven with them on this backend"
            + (" (LLM.int8 splits outliers per call, data-dependent work a device graph cannot hold)"
               if choice.bits == 8 else "") + ", so transformers' generate runs them")


def sharded_blocker(decided: Decided) -> str | None:
    """Why a model whose weights are sharded across ranks as they load decodes only through
    transformers' ``generate`` (``None`` when they are not): each step runs collectives between the
    ranks, which neither intelrt's loop nor continuous batching schedules."""
    choice = decided.parallelism
    if choice is None or not choice.sharded_load:
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
    differ = per_layer_cache_shapes(config)
    if differ:
        return f"its layers' keys and values differ in size ({differ}), which the paged cache does not hold"
    if any(isinstance(part, Mapping) and part.get("kv_lora_rank") for part in (config, config.get("text_config"))):
        return "its multi-head latent attention (kv_lora_rank) has keys and values of different sizes, which the paged " \
               "cache does not hold"
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


def decode_graphs(request: Request, kind: str | None, why_not: str) -> str | None:
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


def decode_attention_kernel(request: Request, runs_here: bool, why_not: str, step: str,
                            model_blocker: str | None = None) -> bool:
    """Whether the compact step's decode attention runs as intelrt's Triton kernel: the user's
    ``attention_kernel`` (``on`` / ``off``), else ``runs_here`` (the backend's word for its device)
    where the model fits the kernel (``model_blocker``: why it does not, see ``kernel_blocker``).

    ``attention_kernel='on'`` where the backend's device cannot run it, where the model does not
    fit it, or where the step is the model's own forward, is refused (``PlanError``) rather than
    ignored."""
    wanted = request.attention_kernel
    if wanted == "off":
        return False
    if wanted == "on" and step != "compact":
        raise PlanError("attention_kernel='on' needs intelrt's compact decode step, and this model's step is its "
                        "own forward; leave attention_kernel to intelrt (auto)")
    if wanted == "on" and model_blocker is not None:
        raise PlanError(f"attention_kernel='on', but the kernel cannot serve this model: {model_blocker}; leave "
                        "attention_kernel to intelrt (auto) or turn it off")
    if wanted == "on" and not runs_here:
        raise PlanError(f"attention_kernel='on', but {why_not}; leave attention_kernel to intelrt (auto) or turn "
                        "it off")
    return runs_here and step == "compact" and model_blocker is None


def kernel_blocker(model: ModelInfo, task: str | None) -> str | None:
    """Why the one-kernel decode attention cannot serve this model's compact step for ``task``
    (``None``: it can)."""
    name, _module, config = decoder_of(model, task)
    return attention_kernel_blocker(name, config)


def unified_attention_blocker(model: ModelInfo, task: str | None) -> str | None:
    """Why the engine step's one Triton attention kernel (``decoding/unified_attention.py``) cannot
    serve this model's compact step for ``task`` (``None``: it can): it attends per-head keys and
    values of a power-of-two size (q/k norms and rotary embeddings are applied before it)."""
    name, _module, text = decoder_of(model, task)
    config: Mapping[str, Any] = text
    family = FAMILIES.get(name)
    if family is not None and family.latent_attention:
        return "multi-head latent attention keeps one latent per token, not per-head keys and values"
    heads = int(config.get("num_attention_heads") or 1)
    dim = config.get("head_dim") or int(config.get("hidden_size") or 0) // max(1, heads)
    if not isinstance(dim, int) or dim < 16 or dim & (dim - 1):
        return f"head size {dim} is not a power of two >= 16"
    return None


@dataclass(frozen=True)
class Warmup:
    """How the fast loop's step is prepared (``DecodeChoice.warmup``), with the graphs and compiler
    that go with it, whether a compile worker process builds an adaptive step's compiled form
    (``DecodeChoice.compile_worker``), and why."""

    kind: str
    graphs: str | None
    compile: str | None
    reason: str
    worker: bool = False


def decode_warmup(request: Request, graphs: str | None, compiler: str | None, why_no_graphs: str,
                  why_no_compiler: str = "compile warm-up outweighs its gain here",
                  default_compiler: str = "inductor", *, why_no_worker: str | None = None,
                  cannot_compile: str | None = None) -> Warmup:
    """The warm-up for a backend that can capture the step in ``graphs`` (``None``: it cannot, for
    ``why_no_graphs``) and compile it with ``compiler`` (``None``: not by default, for
    ``why_no_compiler``), both after the user's ``graphs=`` and ``compile=``. The user's ``warmup=``
    wins; else the ``workload``: one-shot work is not worth a compile (static, or eager without
    graphs) unless a compiler is named (``compile=``: compiled at the first call, as asked); a server
    or batch job is (compiled at the first call, or at a server's start); unknown work — also with a
    compiler named — decodes uncompiled from the first call while a
    compile worker process builds the compiled step, which takes over at a step boundary once built
    (``adaptive``: ``decoding/background.py``); where no worker can run beside the decoding process
    (``why_no_worker``: one process per Gaudi) the adaptive step compiles in the decoding process
    once that pays. A backend without a compiler by default (the CPU) runs eagerly unless a
    compiler is named. ``cannot_compile``: why this run cannot compile at all (``warmup="compiled"``
    is refused with it)."""
    wanted, work = request.warmup, request.workload
    no_compile = request.compile == "none"
    if wanted == "eager":
        if request.graphs == "on" or request.compile not in ("auto", "none"):
            raise PlanError("warmup='eager' runs the step as it is, without graphs or compile; drop graphs='on' / "
                            "compile= or choose warmup='static' / 'compiled'")
        return Warmup("eager", None, None, "the step runs eagerly (warmup='eager'), without graphs or compile")
    if wanted == "static":
        if graphs is None:
            raise PlanError(f"warmup='static' captures the step in a device graph, but {why_no_graphs}; use "
                            "warmup='eager' or 'compiled', or leave warmup to intelrt")
        if request.compile not in ("auto", "none"):
            raise PlanError(f"warmup='static' does not compile the step, but compile={request.compile!r} asks for it; "
                            "use warmup='compiled' or leave compile to intelrt")
        return Warmup("static", graphs, None, f"the step captured in {_graph(graphs)} and not compiled "
                                              "(warmup='static')")
    if wanted == "compiled":
        if cannot_compile is not None:
            raise PlanError(f"warmup='compiled' compiles the step, but {cannot_compile}; use warmup='static' or "
                            "'eager', or leave warmup to intelrt")
        if no_compile:
            raise PlanError("warmup='compiled' compiles the step, but compile='none' forbids it; drop one of them")
        backend = compiler or default_compiler
        return Warmup("compiled", graphs, backend, f"step compiled with {backend} at its first call "
                                                   "(warmup='compiled')" + _captured(graphs, why_no_graphs))
    if no_compile or compiler is None:
        why = "compile='none'" if no_compile else why_no_compiler
        if graphs is None:
            return Warmup("eager", None, None, f"the step runs eagerly ({why}; {why_no_graphs})")
        return Warmup("static", graphs, None, f"the step captured in {_graph(graphs)}, not compiled ({why})")
    named = f" (compile={request.compile!r})" if request.compile not in ("auto", "none") else ""
    if work == "one-shot" and named:
        return Warmup("compiled", graphs, compiler, f"one-shot work with a compiler named{named}: the step compiled "
                                                    f"with {compiler} at its first call" + _captured(graphs, why_no_graphs))
    if work == "one-shot":
        if graphs is None:
            return Warmup("eager", None, None, "one-shot work: compiling (about a minute cold) costs more than it "
                                               f"saves on one short generate; the step runs eagerly ({why_no_graphs})")
        return Warmup("static", graphs, None, f"one-shot work: the step captured in {_graph(graphs)} and not "
                                              "compiled — compiling (about a minute cold) costs more than it saves "
                                              "on one short generate")
    if work in ("server", "batch"):
        return Warmup("compiled", graphs, compiler, f"{work} work: the step compiled with {compiler}{named} at its "
                                                    "first call (the compile pays over many calls; its artifacts are "
                                                    "kept for the next process)" + _captured(graphs, why_no_graphs))
    first = f"captured in {_graph(graphs)}" if graphs else "eagerly" + _captured(None, why_no_graphs)
    kind = "of unknown length"
    if why_no_worker is not None:
        cached = "at once when intelrt's compile cache holds it, else " if compiler == "inductor" else ""
        return Warmup("adaptive", graphs, compiler, f"work {kind}{named}: the step decodes from the first call {first}; "
                      f"no compile worker can run beside this process ({why_no_worker}), so its compiled form "
                      f"({compiler}) is built in this process only once that pays: {cached}after "
                      "DecodeTuning.compile_after_tokens tokens (workload='server' or 'batch' compiles at the first "
                      "call)")
    return Warmup("adaptive", graphs, compiler, f"work {kind}{named}: the step decodes from the first call {first}, "
                  f"never waiting for a compile: a compile worker (a process of its own, holding none of this "
                  f"process's interpreter) builds its compiled form ({compiler}), which takes over at a step boundary "
                  "once built (the same KV cache: the same tokens, no pause); with the compile cache holding it (an "
                  "earlier process compiled it) the first call runs compiled (workload='server' or 'batch' compiles "
                  "at the first call, warmup='compiled' waits for it)", worker=True)


def _graph(graphs: str) -> str:
    kind = graphs.upper()
    article = "an" if kind[0] in "AEFHILMNORSX" else "a"  # as the letter is said: an XPU, an HPU, a CUDA graph
    return f"{article} {kind} graph (one launch per token, no host sync per token)"


def _captured(graphs: str | None, why_not: str = "") -> str:
    return f", captured in {_graph(graphs)}" if graphs else ", no device graph" + (f" ({why_not})" if why_not else "")


QUANTIZED_LAYERS = {
    "bitsandbytes": "bitsandbytes projections (Linear4bit) dequantize their weights",
    "torchao": "torchao's quantized weight tensors run their own matmul (a tensor subclass inside each nn.Linear)",
}
"""What a quantized projection does in the model's own forward, per method (the others: their
quantizer's own linear modules)."""


def quantized(decided: Decided) -> bool:
    """Whether the plan's weights are quantized in memory (a quantization dequantized while
    loading leaves plain projections, which the compact step takes)."""
    return decided.quantization is not None and not decided.quantization.dequantized


def quantized_step(choice: QuantizationChoice) -> str:
    """What a quantized projection runs when the fast loop's step is the model's own forward (the
    kernel the plan's quantization names, ``Cell.kernel``)."""
    what = QUANTIZED_LAYERS.get(choice.method, f"{choice.method} layers run their own kernels")
    kernel = choice.details.get("kernel")
    return (f"{what} in the model's own forward, which the step runs over the loop's static KV cache"
            + (f"; the kernel: {kernel}" if kernel else ""))


COMPACT_QUANTIZED = ("torchao", "auto-round", "gptq", "awq", "compressed-tensors")
"""Methods whose layers the compact step takes (``decoding/quantized_linears.py``): torchao's
weights fused by rows like plain ones, the others' layers run as themselves. bitsandbytes 4-bit
stays on the model's own forward, where the fast loop is proven with it."""


def quantized_compact_step(model: ModelInfo, task: str | None, choice: QuantizationChoice) -> tuple[str, str]:
    """(``compact`` or ``model``, why) for a model whose weights ``choice`` quantizes: the compact
    step where it serves the family and takes the method's layers, with the kernel each quantized
    projection runs (``Cell.kernel``); else the model's own forward (``quantized_step``)."""
    if choice.method not in COMPACT_QUANTIZED:
        return "model", quantized_step(choice)
    step, reason = compact_step(model, task)
    if step != "compact":
        return step, f"{reason}; {quantized_step(choice)}"
    kernel = choice.details.get("kernel")
    return step, (f"{reason}; its {choice.method} {choice.scheme or ''} projections in the compact step".replace("  ", " ")
                  + (f", the kernel: {kernel}" if kernel else ""))


def compact_step(model: ModelInfo, task: str | None) -> tuple[str, str]:
    """(``compact`` or ``model``, why): which forward the fast loop's step runs for this model.

    ``compact`` is intelrt's compact step (``decoding/compact.py``) for the families of
    ``decoding/families.py``;
    ``model`` is the model's own forward. Decided from the config; the loaded modules are checked
    again at the first call (adapters or replaced projections fall back, with a note)."""
    name, module, config = decoder_of(model, task)
    blocker = (compact_blocker(name, module, config) if name else
               "the model's class is unknown; the step runs the model's own forward")
    if blocker is None:
        layers = f"{model.model_type} layers" if task != VISION_LANGUAGE else \
            f"after the image prefill, its language model's {config.get('model_type')} layers"
        return "compact", (f"{layers} run as intelrt's compact step (q/k/v and gate/up "
                           "projections fused, grouped-query attention without expanding K/V, its own KV cache)")
    return "model", blocker


def step_attention(backend: Backend, s: Situation, step: str) -> tuple[str, str]:
    """How the engine's steps attend here (``STEP_ATTENTIONS``) and why: Triton's where this run
    executes intelrt's Triton kernels (``Backend.runs_triton``: ``Backend.step_attention``, the CPU under
    Triton's interpreter) with Triton installed, for the compact step of a model whose layers keep
    per-head keys and values of a power-of-two size, and never with ``attention_kernel='off'`` (the
    user's word against intelrt's Triton kernels)."""
    if not backend.runs_triton(s):
        return "torch", f"steps attend in torch operations ({backend.step_attention_reason})"
    if not triton_installed():
        return "torch", "steps attend in torch operations (Triton is not installed)"
    if s.request.attention_kernel == "off":
        return "torch", "steps attend in torch operations (attention_kernel='off')"
    if step != "compact":
        return "torch", "steps attend in torch operations (the model's own forward, with its own attention)"
    blocker = unified_attention_blocker(s.model, s.decided.task)
    if blocker is not None:
        return "torch", f"steps attend in torch operations ({blocker})"
    return "triton", ("decoding rows and prompt chunks of a step attend in one Triton kernel per layer over the "
                      f"paged cache, as vLLM's unified attention does ({backend.step_attention_reason})")


def fast_decode(backend: Backend, s: Situation, graphs: str | None, compile_backend: str | None, reason: str, *,
                claim: str | None = None, notes: tuple[str, ...] = (),
                compile_options: Mapping[str, object] | None = None, step: str = "model",
                attention_kernel: bool = False, warmup: str | None = None,
                compile_worker: bool = False) -> Decision:
    """The decision for intelrt's fast decode loop (``compile_options``: inductor settings;
    ``step``: ``compact`` or ``model``, see ``compact_step``; ``attention_kernel``: see
    ``decode_attention_kernel``; ``warmup`` and ``compile_worker``: see ``decode_warmup``), with the engine's step size
    (``sizing.step_tokens``) and step attention (:func:`step_attention`) for ``backend``'s device."""
    options = dict(compile_options) if compile_options and compile_backend == "inductor" else None
    tokens, tokens_reason = step_tokens(backend, s.model)
    attention, attention_reason = step_attention(backend, s, step)
    value = DecodeChoice("fast", cache="static", graphs=graphs, compile=compile_backend, step=step,
                         compile_options=options, attention_kernel=attention_kernel,  # type: ignore[arg-type]
                         warmup=warmup, step_tokens=tokens, step_attention=attention,
                         compile_worker=compile_worker)
    if attention_kernel:
        reason += "; decode attention as intelrt's one Triton kernel per layer"
    return Decision(value, reason, claim=claim, notes=(*notes, tokens_reason, attention_reason))


QUANTIZED_COMPILE = ("{method} weights: torch.compile over their kernels is not measured (compile='on' asks for it); "
                     "a failing graph capture falls back to an uncaptured step, with a note")
UNTUNED_INDUCTOR = ("inductor settings tuned on CUDA (coordinate-descent tuning) are not applied: unmeasured on "
                    "{backend}")


def decide_decode(backend: Backend, s: Situation) -> Decision:
    """The decode decision on ``backend`` — intelrt's one rule over the facts a backend declares
    (``Backend.fast_decode``, ``compact_decode``, ``graph_kind``, ``decode_compiler`` …; its
    ``graphs_missing``, ``compile_missing``, ``decode_problem`` and ``runs_triton`` for this run):
    the fast loop where the backend runs it and the model and plan fit it, its step, graphs, compile,
    warm-up and attention kernel as those facts and the user's options say; else transformers'
    ``generate``, with why. A forced option the plan cannot keep is refused (``PlanError``)."""
    request, model, decided = s.request, s.model, s.decided
    blocker = decode_blockers(model, decided, four_bit=backend.fast_decode_4bit) or (
        backend.decode_problem(s) if backend.fast_decode else
        f"{backend.name} declares no fast decode path (Backend.fast_decode), so transformers' generate decodes")
    if blocker is not None:
        for option in ("graphs", "attention_kernel"):
            if getattr(request, option) == "on":
                raise PlanError(f"{option}='on' needs intelrt's fast decode loop, but {blocker}")
        return plain_generate(blocker)
    choice = decided.quantization if quantized(decided) else None
    if not backend.compact_decode:
        step, step_reason = "model", quantized_step(choice) if choice is not None else \
            f"the step is the model's own forward (intelrt's compact step is not measured on {backend.name})"
    elif choice is not None:
        step, step_reason = quantized_compact_step(model, decided.task, choice)
    else:
        step, step_reason = compact_step(model, decided.task)
    graphs, why_no_graphs = _step_graphs(backend, s)
    # torchao's tensor subclasses compile inside the compact step (torch.compile traces their F.linear); other
    # quantizers' modules keep their kernels uncompiled where compiling over them is not measured
    compiled_ok = choice is None or backend.compiles_quantized or (step == "compact" and choice.method == "torchao")
    cannot_compile = backend.compile_missing(s)
    compiler = decode_compile(request, backend.decode_compiler) if compiled_ok and cannot_compile is None else None
    why_no_compiler = (cannot_compile or (QUANTIZED_COMPILE.format(method=choice.method) if choice is not None
                                          and not compiled_ok else f"compile warm-up outweighs its gain on the {backend.name} backend"))
    warm = decode_warmup(request, graphs, compiler, why_no_graphs, why_no_compiler, backend.compiler,
                         why_no_worker=backend.compile_worker_missing, cannot_compile=cannot_compile)
    parts = ["static KV cache", step_reason, warm.reason]
    if warm.graphs and request.graphs == "auto" and backend.graphs_default_from:
        parts.append(f"{warm.graphs.upper()} graphs by default from torch {backend.graphs_default_from}")
    notes: tuple[str, ...] = ()
    if warm.compile == "inductor" and backend.decode_compile_options:
        parts.append("inductor settings: " + ", ".join(f"{k}={v}" for k, v in backend.decode_compile_options.items()))
    elif warm.compile == "inductor":
        notes = (UNTUNED_INDUCTOR.format(backend=backend.name),)
    if backend.decode_source:
        parts.append(f"defaults as upstream: {backend.decode_source}")
    runs = backend.runs_triton(s) and triton_installed()
    why_not = "Triton is not installed" if backend.runs_triton(s) else backend.step_attention_reason
    misfit = kernel_blocker(model, decided.task) if step == "compact" else None
    if runs and warm.kind == "static" and request.attention_kernel == "auto":
        kernel = False  # its first use compiles and tunes a Triton kernel: seconds a short call would not win back
        parts.append("decode attention in torch operations (the Triton kernel's first-use compile and tuning "
                     "would not pay for one short call)")
    else:
        kernel = decode_attention_kernel(request, runs, why_not, step, misfit)
        if runs and misfit:
            parts.append(f"decode attention in torch operations (the one-kernel attention does not serve it: {misfit})")
    planned = fast_decode(backend, s, warm.graphs, warm.compile, "; ".join(parts), notes=notes,
                          compile_options=backend.decode_compile_options, step=step, attention_kernel=kernel,
                          warmup=warm.kind, compile_worker=warm.worker)
    return replace(planned, claim=backend.decode_claim(planned.value))  # type: ignore[arg-type]


def _step_graphs(backend: Backend, s: Situation) -> tuple[str | None, str]:
    """(the device graphs the step is captured in by default, or ``None``; why not): the backend's
    ``graph_kind`` unless this run cannot capture them (``graphs_missing``: ``graphs='on'`` is then
    refused), the user turned them off, or they are opt-in before ``graphs_default_from``."""
    request, kind = s.request, backend.graph_kind
    if request.graphs == "off":
        return None, "graphs='off'"
    missing = backend.graphs_missing(s)
    if missing is not None or kind is None:
        why = missing or f"{backend.name} has no device graphs"
        if request.graphs == "on":
            raise PlanError(f"graphs='on', but {why}; leave graphs to intelrt (auto) or turn them off")
        return None, why
    since = backend.graphs_default_from
    if request.graphs == "auto" and since is not None and not at_least(backend.versions.get("torch"), since):
        return None, (f"{kind.upper()} graphs are opt-in below torch {since} (this is torch "
                      f"{backend.versions.get('torch')}); graphs='on' captures the step anyway")
    return kind, ""


def plain_generate(reason: str, notes: tuple[str, ...] = ()) -> Decision:
    """The decision to let transformers' ``generate`` decode."""
    return Decision(DecodeChoice.plain_generate(), reason, notes=notes)


def fast_decode_planned(decided: Decided) -> bool:
    """Whether the decode decision made so far is intelrt's fast loop (batching rules ask)."""
    return decided.decode is not None and decided.decode.fast


CONTINUOUS_ATTENTION = ("sdpa", "eager", "paged|eager")
"""What transformers' continuous batching runs besides flash implementations
(``ContinuousBatchingManager.switch_to_cb_friendly_attn``: eager becomes ``paged|eager``)."""


def continuous_batching_blocker(decided: Decided) -> str | None:
    """Why transformers' continuous batching cannot run the plan's attention or inputs (``None`` when it can)."""
    if decided.task == VISION_LANGUAGE:
        return "its prompts carry images, and continuous batching (generate_batch) takes token ids only"
    attention = str(decided.attention or "sdpa")
    if attention in CONTINUOUS_ATTENTION or "flash" in attention:
        return None
    return f"attention {attention!r}: it runs 'sdpa', 'eager', 'paged|eager' or a flash implementation"


def padded_generate_instead(request: Request, model: ModelInfo, decided: Decided,
                            max_batch: int = Backend.max_padded_batch) -> Decision | None:
    """The batching decision when transformers' continuous batching cannot run the model while the
    fast loop is off, or cannot run the plan's attention at all (``None`` when it can): padded
    batches, through the fast loop when it is planned, else through transformers' ``generate``.
    ``batching='continuous'`` forced for such a model is refused. A backend's batching rule asks this
    before answering continuous batching."""
    fast = fast_decode_planned(decided)
    blocker = continuous_batching_blocker(decided) or (None if fast else sharded_blocker(decided)
                                                       or continuous_blocker(model))
    if blocker is None:
        return None
    if request.batching == "continuous":
        raise PlanError(f"batching='continuous': transformers' continuous batching cannot run this model ({blocker}); "
                        "use batching='padded' or leave batching to intelrt")
    through = (f"lists through the fast decode loop's engine, up to {max_batch} rows at once" if fast else
               f"padded batches of up to {max_batch} prompts through transformers' generate")
    return Decision(BatchingChoice.padded("fast" if fast else "generate", max_batch),
                    f"{through}: transformers' continuous batching cannot run "
                    f"this model ({blocker})" + ("" if fast else " and the fast decode loop is off"))


def decide_batching(backend: Backend, s: Situation) -> Decision:
    """The batching decision on ``backend`` — intelrt's one rule over the facts a backend declares
    (``Backend.max_padded_batch``, ``engine_batching``, ``continuous_graphs``, ``async_batching``,
    ``kv_sizing``): padded batches where transformers' continuous batching cannot run the model or
    ``batching='padded'`` asks; a list through the fast loop's engine where the backend measured it
    better and the loop is planned; else transformers' continuous batching as the backend's facts
    and the user's ``graphs=`` say (SPEC X7)."""
    request, decided, size = s.request, s.decided, backend.max_padded_batch
    fast = fast_decode_planned(decided)
    if request.batching == "padded":
        return Decision(BatchingChoice.padded("fast" if fast else "generate", size),
                        f"padded batches of up to {size} prompts "
                        f"through {'the fast decode loop' if fast else 'transformers generate'}")
    fallback = padded_generate_instead(request, s.model, decided, size)
    if fallback is not None:
        return fallback
    instead = "batching='continuous' uses transformers' generate_batch instead"
    if request.batching == "auto" and fast and backend.engine_batching:
        return Decision(BatchingChoice.padded("fast", size),
                        f"lists through the fast decode loop's engine, up to {size} rows at once (more prompts join "
                        f"as rows free up): one step decodes every row, reading the weights once, and skips "
                        f"transformers' continuous batching's per-step scheduling (docs/performance.md)",
                        notes=(instead,))
    forced = {"on": True, "off": False}.get(request.graphs)
    graphs = forced if forced is not None else backend.continuous_graphs
    reason = ("transformers' continuous batching (generate_batch)" if request.batching == "continuous" or not fast
              else "transformers' continuous batching (generate_batch) schedules many prompts better than one "
                   "padded batch here")
    if fast is False and request.batching == "auto" and backend.fast_decode:
        reason = f"the fast decode loop is off; {reason}"
    kind = (backend.graph_kind or "device").upper()
    if graphs is None:
        attention = str(decided.attention or "sdpa")
        auto = ("on: flash attention needs no attention mask" if "flash" in attention else
                f"off: attention={attention} needs an attention mask, which graphs would pad")
        said = f"{kind} graphs left to transformers' auto, which turns them {auto}"
    else:
        said = f"{kind} graphs {'on' if graphs else 'off'}" + (f" (graphs={request.graphs})" if forced is not None
                                                               else "")
    async_said = ("async double-buffering left to transformers' auto" if backend.async_batching is None else
                  f"async double-buffering {'on' if backend.async_batching else 'off'}")
    sized = {"memory": "free memory", "requests": "the requests"}.get(backend.kv_sizing, backend.kv_sizing)
    notes: tuple[str, ...] = (f"{said}; {async_said}; KV cache sized from {sized}",)
    if fast and request.batching == "auto":
        notes += ("batching='padded' sends a list through the fast decode loop's engine instead",)
    return Decision(BatchingChoice.continuous(use_graphs=graphs, use_async_batching=backend.async_batching,
                                              kv_sizing=backend.kv_sizing), reason, claim="X7", notes=notes)
