"""The model's transformers class, resolved from its config the way ``transformers.pipeline`` resolves
it for a task (the task's auto classes in order, then the classes ``config.architectures`` names:
``pipelines/base.py: load_model``), without loading weights; and the task its config names (SPEC T1).

What the class supports — attention implementations (``_supports_sdpa`` …), a recurrent state
(``_is_stateful``), a KV cache in its forward — decides the attention and decode plans, so they
hold for every architecture transformers ships, not for one family. Remote code is never run here:
a model with ``auto_map`` has no resolved class (its code runs only when it loads).
"""

from __future__ import annotations

import inspect
import logging
import os
from typing import Any

from ..errors import ModelSourceError
from ..hooks.model import Architecture, ModelInfo, implementations

log = logging.getLogger(__name__)

#: The forward argument a KV cache is passed in (``cache`` since transformers 5.2x, before that
#: ``past_key_values``).
CACHE_ARGUMENTS = frozenset({"cache", "past_key_values"})


def _class_attention(cls: Any) -> tuple[str, ...]:
    return implementations(bool(getattr(cls, "_supports_sdpa", False)),
                           bool(getattr(cls, "_supports_flash_attn", False)
                                or getattr(cls, "_supports_flash_attn_2", False)),
                           bool(getattr(cls, "_supports_flex_attn", False)))


def sub_models(config: Any) -> tuple[tuple[str, str, tuple[str, ...]], ...]:
    """``(key, class, attention implementations)`` of each sub-config's model class (a backbone's from
    ``MODEL_FOR_BACKBONE_MAPPING``, others' from ``MODEL_MAPPING``; ``("", ())`` when none maps it)."""
    from transformers.models.auto.modeling_auto import MODEL_FOR_BACKBONE_MAPPING, MODEL_MAPPING

    found = []
    for key in getattr(config, "sub_configs", None) or {}:
        sub = getattr(config, key, None)
        if sub is None or not hasattr(sub, "model_type"):
            continue
        order = (MODEL_FOR_BACKBONE_MAPPING, MODEL_MAPPING) if "backbone" in key else (MODEL_MAPPING,
                                                                                       MODEL_FOR_BACKBONE_MAPPING)
        cls: Any = None
        for model_mapping in order:
            try:
                cls = model_mapping[type(sub)]
                break
            except (KeyError, ValueError, ImportError):
                continue
        if isinstance(cls, (list, tuple)):
            cls = cls[0]
        found.append((key, cls.__name__ if cls is not None else "", _class_attention(cls) if cls is not None else ()))
    return tuple(found)


def mapping(name: str) -> dict[str, Any]:
    """One of transformers' ``*_MAPPING_NAMES`` (model_type → class name(s)); imports no model code."""
    from transformers.models.auto import modeling_auto

    return dict(getattr(modeling_auto, name))


def task_of(architectures: tuple[str, ...], model_type: str,
            auto_map: dict[str, Any] | None = None) -> tuple[str, str] | None:
    """(task, why) from the config's ``architectures`` (or its ``auto_map``) and transformers' auto
    mappings (:func:`intelrt.planning.tasks.task_of_checkpoint`), or ``None``.

    A name transformers does not define that ends like a causal LM's (``MyLlamaForCausalLM``) of a
    model type ``AutoModelForCausalLM`` maps is ``text-generation``; a ``…ForConditionalGeneration``
    is never taken for a causal LM (BART's is a seq2seq model, LLaVA's a vision-language one)."""
    from .tasks import task_of_checkpoint

    found = task_of_checkpoint(architectures, auto_map)
    if found is not None:
        return found
    if model_type in mapping("MODEL_FOR_CAUSAL_LM_MAPPING_NAMES") and architectures and \
            architectures[0].endswith(("LMHeadModel", "ForCausalLM")):
        return "text-generation", (f"config.architectures names {architectures[0]}; transformers' "
                                   f"AutoModelForCausalLM has a class for {model_type}")
    return None


def task_for(model: ModelInfo) -> tuple[str, str] | None:
    """:func:`task_of` for a model's files (its base model's config for an adapter)."""
    info = model.base or model
    return task_of(info.architectures, info.model_type, info.config.get("auto_map"))


def choose_class(config: Any, task: str) -> tuple[Any, str | None]:
    """(class, the auto class that chose it or ``None``) for ``task``, as ``transformers.pipeline``
    chooses: the first of the task's auto classes whose mapping holds the config's type, else the
    first class of transformers ``config.architectures`` names that is a class of the task (or any,
    for :data:`~intelrt.planning.tasks.CHECKPOINT_CLASS`). ``(None, None)``: transformers has none."""
    import transformers
    from transformers.models.auto.auto_factory import _get_model_class

    from .tasks import CHECKPOINT_CLASS, class_names, get

    for auto in get(task).auto_classes:
        model_mapping = getattr(transformers, auto)._model_mapping
        if type(config) in model_mapping:
            return _get_model_class(config, model_mapping), auto
    for arch in getattr(config, "architectures", None) or ():
        cls = getattr(transformers, arch, None)
        # transformers' pipeline would try any class the config names; one that is not a class of
        # the task (a causal LM for image-classification) only fails later, far from the cause
        if cls is not None and (task == CHECKPOINT_CLASS or arch in class_names(task)):
            return cls, None
    return None, None


def _text_config(config: Any) -> Any:
    """The decoder's text config (composite models: ``text_config`` / ``decoder``; MusicGen has a text
    encoder and a decoder, which a bare ``get_text_config()`` refuses as ambiguous)."""
    try:
        return config.get_text_config(decoder=True)
    except (ValueError, AttributeError):
        return config


def resolve(model: ModelInfo, task: str) -> Architecture | None:
    """The class ``load`` will instantiate for ``task``, or ``None`` when it cannot be known without
    running the model's own code (``auto_map``) or transformers has no class for it."""
    from ..errors import ConfigurationError

    info = model.base or model
    if info.config.get("auto_map") or not info.local_dir:
        return None
    from huggingface_hub.errors import StrictDataclassError
    from transformers import AutoConfig

    try:
        config = AutoConfig.from_pretrained(info.local_dir)
        cls, auto = choose_class(config, task)
    except StrictDataclassError as exc:  # transformers' configs are strict dataclasses (huggingface_hub.dataclasses)
        raise ModelSourceError(f"{os.path.join(info.local_dir, 'config.json')} holds a value transformers refuses: "
                               f"{' '.join(str(exc).split())}. Correct it in config.json, or save the model again "
                               "with save_pretrained()") from None
    except (KeyError, ValueError, OSError, ImportError, ConfigurationError) as exc:
        log.debug("no transformers class for %s (%s): %s", model.source, task, exc)
        return None
    if cls is None:
        log.debug("no transformers class for %s (%s)", model.source, task)
        return None
    parameters = inspect.signature(cls.forward).parameters
    text = _text_config(config)
    text_type = str(text.model_type) if text.model_type != config.model_type else None
    return Architecture(
        name=cls.__name__, module=cls.__module__,
        supports_sdpa=bool(getattr(cls, "_supports_sdpa", False)),
        supports_flash_attn=bool(getattr(cls, "_supports_flash_attn", False)
                                 or getattr(cls, "_supports_flash_attn_2", False)),
        supports_flex_attn=bool(getattr(cls, "_supports_flex_attn", False)),
        stateful=bool(getattr(cls, "_is_stateful", False)),
        takes_cache=bool(CACHE_ARGUMENTS & set(parameters)), takes_positions="position_ids" in parameters,
        static_cache=bool(getattr(cls, "_can_compile_fullgraph", False)),
        attention_backend=bool(getattr(cls, "_supports_attention_backend", False)),
        layer_types=tuple(str(t) for t in getattr(text, "layer_types", None) or ()),
        tensor_parallel=bool(getattr(cls, "_tp_plan", None) or getattr(config, "base_model_tp_plan", None)
                             or getattr(text, "base_model_tp_plan", None)),
        auto_class=auto, sub_models=sub_models(config), text_model_type=text_type,
        language_model=_causal_class(text_type) if text_type is not None else None)


def _causal_class(model_type: str) -> str | None:
    """The causal-LM class transformers maps ``model_type`` to (``None``: none)."""
    from transformers.models.auto.modeling_auto import MODEL_FOR_CAUSAL_LM_MAPPING_NAMES

    name = MODEL_FOR_CAUSAL_LM_MAPPING_NAMES.get(model_type)
    return name if isinstance(name, str) else None
