"""The model's transformers class, resolved from its config the way ``from_pretrained`` resolves it
(the auto class's mapping), without loading weights; and the task its config names.

What the class supports — attention implementations (``_supports_sdpa`` …), a recurrent state
(``_is_stateful``), a KV cache in its forward — decides the attention and decode plans, so they
hold for every architecture transformers ships, not for one family. Remote code is never run here:
a model with ``auto_map`` has no resolved class (its code runs only when it loads).
"""

from __future__ import annotations

import inspect
import logging
from typing import Any

from ..hooks.model import Architecture, ModelInfo

log = logging.getLogger(__name__)

#: Task → the auto class ``load`` uses and the name of its mapping in ``transformers.models.auto``.
AUTO_CLASSES = {
    "text-generation": ("AutoModelForCausalLM", "MODEL_FOR_CAUSAL_LM_MAPPING_NAMES"),
    "sequence-classification": ("AutoModelForSequenceClassification", "MODEL_FOR_SEQUENCE_CLASSIFICATION_MAPPING_NAMES"),
    "feature-extraction": ("AutoModel", "MODEL_MAPPING_NAMES"),
}
#: The forward argument a KV cache is passed in (``cache`` since transformers 5.2x, before that
#: ``past_key_values``).
CACHE_ARGUMENTS = frozenset({"cache", "past_key_values"})


def mapping(name: str) -> dict[str, Any]:
    """One of transformers' ``*_MAPPING_NAMES`` (model_type → class name(s)); imports no model code."""
    from transformers.models.auto import modeling_auto

    return dict(getattr(modeling_auto, name))


def _names(value: Any) -> tuple[str, ...]:
    return tuple(value) if isinstance(value, (list, tuple)) else (str(value),)


def task_of(architectures: tuple[str, ...], model_type: str) -> tuple[str, str] | None:
    """(task, why) from the config's ``architectures`` and transformers' auto mappings, or ``None``."""
    for task, (auto, names) in (("text-generation", AUTO_CLASSES["text-generation"]),
                                ("sequence-classification", AUTO_CLASSES["sequence-classification"]),
                                ("feature-extraction", AUTO_CLASSES["feature-extraction"])):
        classes = {n for value in mapping(names).values() for n in _names(value)}
        for arch in architectures:
            if arch in classes:
                return task, f"config.architectures names {arch}, a class of transformers' {auto}"
    if model_type in mapping(AUTO_CLASSES["text-generation"][1]) and architectures and \
            architectures[0].endswith(("ForConditionalGeneration", "LMHeadModel", "ForCausalLM")):
        return "text-generation", (f"config.architectures names {architectures[0]}; transformers' "
                                   f"AutoModelForCausalLM has a class for {model_type}")
    return None


def resolve(model: ModelInfo, task: str) -> Architecture | None:
    """The class ``load`` will instantiate for ``task``, or ``None`` when it cannot be known without
    running the model's own code (``auto_map``) or transformers has no class for it."""
    info = model.base or model
    if info.config.get("auto_map") or not info.local_dir or task not in AUTO_CLASSES:
        return None
    import transformers
    from transformers import AutoConfig
    from transformers.models.auto.auto_factory import _get_model_class

    auto = getattr(transformers, AUTO_CLASSES[task][0])
    try:
        config = AutoConfig.from_pretrained(info.local_dir)
        cls = _get_model_class(config, auto._model_mapping)
    except (KeyError, ValueError, OSError, ImportError) as exc:
        log.debug("no transformers class for %s (%s): %s", model.source, task, exc)
        return None
    parameters = inspect.signature(cls.forward).parameters
    return Architecture(
        name=cls.__name__, module=cls.__module__,
        supports_sdpa=bool(getattr(cls, "_supports_sdpa", False)),
        supports_flash_attn=bool(getattr(cls, "_supports_flash_attn", False)
                                 or getattr(cls, "_supports_flash_attn_2", False)),
        supports_flex_attn=bool(getattr(cls, "_supports_flex_attn", False)),
        stateful=bool(getattr(cls, "_is_stateful", False)),
        takes_cache=bool(CACHE_ARGUMENTS & set(parameters)),
        static_cache=bool(getattr(cls, "_can_compile_fullgraph", False)),
        attention_backend=bool(getattr(cls, "_supports_attention_backend", False)),
        layer_types=tuple(str(t) for t in getattr(config.get_text_config(), "layer_types", None) or ()),
        tensor_parallel=bool(getattr(cls, "_tp_plan", None) or getattr(config, "base_model_tp_plan", None)
                             or getattr(config.get_text_config(), "base_model_tp_plan", None)))
