"""What planning knows about a model, read from local files only: its files and config
(:class:`ModelInfo`) and the transformers class it loads as (:class:`Architecture`).

Plain data, part of the hook contract: hooks receive a ``ModelInfo``. Finding the files and
resolving the class is planning's work (``planning/model_source.py``,
``planning/architecture.py``).
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Any

SAFE_WEIGHTS = (".safetensors",)
PICKLE_WEIGHTS = (".bin", ".pt", ".pth", ".ckpt", ".pkl")
#: Attention implementations every class runs (transformers' own eager attention).
ALWAYS = ("eager",)


@dataclass(frozen=True)
class Architecture:
    """The class ``from_pretrained`` will instantiate, and what it supports."""

    name: str
    """Class name (``Qwen3ForCausalLM``)."""
    module: str
    """The module that defines it (``transformers.models.qwen3.modeling_qwen3``)."""
    supports_sdpa: bool
    supports_flash_attn: bool
    supports_flex_attn: bool
    stateful: bool
    """A recurrent state carried between steps (RWKV, Mamba …: ``_is_stateful``)."""
    takes_cache: bool
    """Its forward takes a KV cache (``cache`` / ``past_key_values``) intelrt's loop can hand it."""
    takes_positions: bool = True
    """Its forward takes ``position_ids``: each row's positions, which a batch of rows at different
    lengths needs (BART's and BigBird-Pegasus' decoders count them from the cache's length instead)."""
    static_cache: bool = False
    """transformers declares it runs with a static KV cache under ``torch.compile``
    (``_can_compile_fullgraph``): the cache intelrt's loop hands a model's own forward."""
    attention_backend: bool = False
    """Its attention goes through transformers' attention interface (``_supports_attention_backend``),
    which continuous batching's paged attention plugs into."""
    layer_types: tuple[str, ...] = ()
    """The kind of each decoder layer as transformers' config class reads it (``layer_types``:
    ``full_attention``, ``sliding_attention``, ``linear_attention`` …; empty when it names none)."""
    tensor_parallel: bool = False
    """transformers has a tensor parallel plan for it (the class's ``_tp_plan`` or its config's
    ``base_model_tp_plan``, what ``DistributedConfig(tp_plan="auto")`` applies)."""
    auto_class: str | None = None
    """The auto class of transformers that picks it for the task (``AutoModelForSeq2SeqLM``), which
    ``load`` calls; ``None``: the class ``config.architectures`` names, loaded as itself."""
    sub_models: tuple[tuple[str, str, tuple[str, ...]], ...] = ()
    """Its sub-models, as ``(sub-config key, class, the attention implementations it supports)``
    (``("backbone_config", "RTDetrResNetBackbone", ("eager",))``): transformers gives each its own
    attention (``PreTrainedConfig._attn_implementation`` takes a dict by sub-config key)."""
    text_model_type: str | None = None
    """The model type of its text decoder when that is a sub-config (a vision-language model's
    language model: ``qwen2`` in a LLaVA), else ``None``: what a decode loop over the language
    model would check its family by."""
    language_model: str | None = None
    """The causal-LM class transformers maps that text decoder's config to
    (``MODEL_FOR_CAUSAL_LM_MAPPING``: ``Qwen2ForCausalLM`` for a LLaVA over Qwen2), or ``None``
    (no text sub-config, or one no causal-LM class takes: Qwen2-VL's ``qwen2_vl_text``): the class
    whose decode the fast loop runs after a vision-language model's prefill."""

    @property
    def from_transformers(self) -> bool:
        """Defined by transformers itself (not a look-alike from remote code)."""
        return self.module.startswith("transformers.models.")

    def supports(self, implementation: str) -> bool:
        """Whether ``attn_implementation=implementation`` is accepted by this class."""
        base = implementation.removeprefix("paged|")
        if base in ALWAYS:
            return True
        if base == "sdpa":
            return self.supports_sdpa
        if base.startswith("flash_attention"):
            return self.supports_flash_attn
        if base == "flex_attention":
            return self.supports_flex_attn
        return True  # a hub kernel id: transformers checks it when the model loads

    @property
    def attention(self) -> tuple[str, ...]:
        """The implementations it supports, transformers' default first."""
        return implementations(self.supports_sdpa, self.supports_flash_attn, self.supports_flex_attn)

    def to_dict(self) -> dict[str, Any]:
        return {"name": self.name, "module": self.module, "attention": list(self.attention),
                "stateful": self.stateful, "takes_cache": self.takes_cache, "static_cache": self.static_cache,
                "tensor_parallel": self.tensor_parallel, "auto_class": self.auto_class,
                "text_model_type": self.text_model_type, "language_model": self.language_model,
                "sub_models": [{"key": k, "class": c, "attention": list(a)} for k, c, a in self.sub_models]}


def implementations(sdpa: bool, flash: bool, flex: bool) -> tuple[str, ...]:
    """Attention implementations a class supports, transformers' default first."""
    return tuple(n for n, ok in (("sdpa", sdpa), ("eager", True), ("flash_attention_2", flash),
                                 ("flex_attention", flex)) if ok)



@dataclass(frozen=True)
class ModelInfo:
    """What planning knows about a model, read from local files only."""

    source: str
    """What the user passed (a path or a hub id)."""
    local_dir: str | None
    """Directory holding config.json (a local path or a hub-cache snapshot)."""
    config: dict[str, Any]
    weight_files: tuple[str, ...]
    has_tokenizer: bool
    """Tokenizer files (``tokenizer.json``, ``tokenizer_config.json``, a vocabulary) lie beside the model."""
    base: ModelInfo | None = None
    """For a PEFT adapter directory (``adapter_config.json``, no ``config.json``): the base model
    it adapts; ``config`` is the base's. transformers loads the base, then the adapter."""
    architecture: Architecture | None = None
    """The transformers class ``load`` will instantiate (set by planning once the task is decided;
    ``None`` for remote code, or a model transformers has no class for)."""
    processor_files: tuple[str, ...] = ()
    """Processor files beside the model (:data:`PROCESSOR_FILES`: an image processor's or feature
    extractor's ``preprocessor_config.json``, a multimodal ``processor_config.json``, a chat template)."""

    @property
    def has_processor(self) -> bool:
        """An image processor, feature extractor or multimodal processor is saved beside the model."""
        return any(f.endswith(".json") and "processor" in f for f in self.processor_files)

    @property
    def model_type(self) -> str:
        return str(self.config.get("model_type", "unknown"))

    @property
    def architectures(self) -> tuple[str, ...]:
        return tuple(self.config.get("architectures") or ())

    @property
    def weights_format(self) -> str:
        """``safetensors``, ``pickle``, or ``none`` (not on disk yet)."""
        if any(f.endswith(SAFE_WEIGHTS) for f in self.weight_files):
            return "safetensors"
        if any(f.endswith(PICKLE_WEIGHTS) for f in self.weight_files):
            return "pickle"
        return "none"

    @property
    def weight_bytes(self) -> int:
        """Bytes of the weights: measured from the files, else estimated from the config."""
        if self.local_dir and self.weight_files:
            total = sum(os.path.getsize(os.path.join(self.local_dir, f)) for f in self.weight_files
                        if f.endswith(SAFE_WEIGHTS if self.weights_format == "safetensors" else PICKLE_WEIGHTS))
            if total:
                return total + (self.base.weight_bytes if self.base else 0)
        return estimate_parameters(self.config) * 2  # bf16 bytes when nothing is on disk

    @property
    def parameter_count(self) -> int:
        return estimate_parameters(self.config)

    def to_dict(self) -> dict[str, Any]:
        return {"source": self.source, "local_dir": self.local_dir, "model_type": self.model_type,
                "architectures": list(self.architectures), "weights_format": self.weights_format,
                "weight_bytes": self.weight_bytes, "has_tokenizer": self.has_tokenizer,
                "processor_files": list(self.processor_files),
                "adapter_of": self.base.source if self.base else None,
                "class": self.architecture.to_dict() if self.architecture else None}


def _count(value: Any) -> int:
    """A size field as one int: a per-layer list is its mean, a per-part dict (LXMERT's
    ``num_hidden_layers`` = ``{"language": 9, "vision": 5, "cross_encoder": 5}``) its sum; 0 if neither."""
    if isinstance(value, bool):
        return 0
    if isinstance(value, int):
        return value
    if isinstance(value, float) and value.is_integer():
        return int(value)
    if isinstance(value, list):
        counts = [_count(v) for v in value]
        return sum(counts) // max(len(counts), 1)
    if isinstance(value, dict):
        return sum(_count(v) for v in value.values())
    return 0


def estimate_parameters(config: dict[str, Any]) -> int:
    """A rough decoder/encoder parameter count from the usual config fields (0 if unknown)."""
    text = config.get("text_config") or config
    if not isinstance(text, dict):
        return 0
    hidden = _count(text.get("hidden_size") or text.get("d_model"))
    layers = _count(text.get("num_hidden_layers") or text.get("n_layer"))
    vocab = _count(text.get("vocab_size"))
    inter = _count(text.get("intermediate_size")) or 4 * hidden
    if not hidden or not layers:
        return 0
    per_layer = 4 * hidden * hidden + 3 * hidden * inter
    embeddings = vocab * hidden * (1 if text.get("tie_word_embeddings", True) else 2)
    return layers * per_layer + embeddings
