"""Plan-time rules for the ``decode`` and ``batching`` decisions, shared by every backend.

Pure functions of the request, the model's config and earlier decisions: no torch, no device.
The decode engine (``decoding/``) runs what they decide.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from importlib.util import find_spec

from ..errors import PlanError
from ..hooks.backend import Backend
from ..hooks.concerns import Decided
from ..hooks.model import ModelInfo
from ..hooks.payloads import BatchingChoice, DecodeChoice, QuantizationChoice
from ..hooks.request import Request
from ..hooks.types import Decision
from .families import FAMILIES, TRANSFORMERS_MODELS, attention_kernel_blocker, compact_blocker

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


@dataclass(frozen=True)
class Warmup:
    """How the fast loop's step is prepared (``DecodeChoice.warmup``), with the graphs and compiler
    that go with it, and why."""

    kind: str
    graphs: str | None
    compile: str | None
    reason: str


def decode_warmup(request: Request, graphs: str | None, compiler: str | None, why_no_graphs: str,
                  why_no_compiler: str = "compile warm-up outweighs its gain here",
                  default_compiler: str = "inductor") -> Warmup:
    """The warm-up for a backend that can capture the step in ``graphs`` (``None``: it cannot, for
    ``why_no_graphs``) and compile it with ``compiler`` (``None``: not by default, for
    ``why_no_compiler``), both after the
    user's ``graphs=`` and ``compile=``. The user's ``warmup=`` wins; else the ``workload``:
    one-shot work is not worth a compile (static, or eager without graphs); a server or batch job
    is (compiled); unknown work starts static and compiles on a background thread (``adaptive``:
    ``decoding/background.py``; the model's own forward as the step compiles once that pays). A backend without a compiler by
    default (the CPU) runs eagerly unless compiling is asked for."""
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
        if no_compile:
            raise PlanError("warmup='compiled' compiles the step, but compile='none' forbids it; drop one of them")
        backend = compiler or default_compiler
        return Warmup("compiled", graphs, backend, f"step compiled with {backend} at its first call "
                                                   "(warmup='compiled')" + _captured(graphs))
    if no_compile or compiler is None:
        why = "compile='none'" if no_compile else why_no_compiler
        if graphs is None:
            return Warmup("eager", None, None, f"the step runs eagerly ({why}; {why_no_graphs})")
        return Warmup("static", graphs, None, f"the step captured in {_graph(graphs)}, not compiled ({why})")
    if request.compile not in ("auto", "none"):
        return Warmup("compiled", graphs, compiler, f"step compiled with {compiler} at its first call (compile="
                                                    f"{request.compile!r})" + _captured(graphs))
    if work == "one-shot":
        if graphs is None:
            return Warmup("eager", None, None, "one-shot work: compiling (about a minute cold) costs more than it "
                                               f"saves on one short generate; the step runs eagerly ({why_no_graphs})")
        return Warmup("static", graphs, None, f"one-shot work: the step captured in {_graph(graphs)} and not "
                                              "compiled — compiling (about a minute cold) costs more than it saves "
                                              "on one short generate")
    if work in ("server", "batch"):
        return Warmup("compiled", graphs, compiler, f"{work} work: the step compiled with {compiler} at its first "
                                                    "call (the compile pays over many calls; its artifacts are kept "
                                                    "for the next process)" + _captured(graphs))
    return Warmup("adaptive", graphs, compiler, "work of unknown length: the step decodes from the first call "
                  + (f"captured in {_graph(graphs)}" if graphs else "eagerly") + f" while its compiled form "
                  f"({compiler}) builds on a background thread, and the compiled step takes over at a step boundary "
                  "once built (the same KV cache: the same tokens, no pause); a step that is the model's own forward "
                  "compiles once that pays instead — at once when the compile cache holds it, else after "
                  "DecodeTuning.compile_after_tokens tokens (workload='server' or 'batch' compiles at once, "
                  "'one-shot' never)")


def _graph(graphs: str) -> str:
    return f"a {graphs.upper()} graph (one launch per token, no host sync per token)"


def _captured(graphs: str | None) -> str:
    return f", captured in {_graph(graphs)}" if graphs else ", no device graph"


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
    """Why the fast loop's step is the model's own forward for these quantized weights: the compact
    step fuses plain floating-point projections only (``decoding/compact.py``)."""
    what = QUANTIZED_LAYERS.get(choice.method, f"{choice.method} layers run their own kernels")
    return f"{what} in the model's own forward, which the step runs over the loop's static KV cache"


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


def fast_decode(graphs: str | None, compile_backend: str | None, reason: str, *, claim: str | None = None,
                notes: tuple[str, ...] = (), compile_options: Mapping[str, object] | None = None,
                step: str = "model", attention_kernel: bool = False, warmup: str | None = None) -> Decision:
    """The decision for intelrt's fast decode loop (``compile_options``: inductor settings;
    ``step``: ``compact`` or ``model``, see ``compact_step``; ``attention_kernel``: see
    ``decode_attention_kernel``; ``warmup``: see ``decode_warmup``)."""
    options = dict(compile_options) if compile_options and compile_backend == "inductor" else None
    value = DecodeChoice("fast", cache="static", graphs=graphs, compile=compile_backend, step=step,
                         compile_options=options, attention_kernel=attention_kernel,  # type: ignore[arg-type]
                         warmup=warmup)
    if attention_kernel:
        reason += "; decode attention as intelrt's one Triton kernel per layer"
    return Decision(value, reason, claim=claim, notes=notes)


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
