"""The tasks a model is loaded for, read from the installed transformers (SPEC T1, T2).

Two sources, nothing declared by hand but the few names transformers does not give:

* every task ``transformers.pipeline`` accepts — its registry
  (``transformers.pipelines.PIPELINE_REGISTRY``: ``SUPPORTED_TASKS`` and ``TASK_ALIASES``), each with the
  auto classes its pipeline loads, in the order ``pipelines/base.py: load_model`` tries them;
* every head transformers has an auto class for but no pipeline (``AutoModelForQuestionAnswering``,
  ``AutoModelForMultipleChoice``, ``AutoModelForSeq2SeqLM`` …): the task is the class's name in
  kebab case (``question-answering``, ``multiple-choice``), ``text2text-generation`` for
  ``AutoModelForSeq2SeqLM`` (its pipeline's name until transformers 5 removed it).

Plus :data:`CHECKPOINT_CLASS`: a checkpoint whose class no auto class maps (``XLNetForQuestionAnswering``,
``LukeForEntityClassification`` …) is loaded as that class, never as a bare base model.

The task of a checkpoint whose task is not given is the first of :data:`AUTO_ORDER` whose auto classes
hold the class its ``config.json`` names (``architectures``): the specific heads before the umbrella
``feature-extraction`` (``AutoModel``), so a head is never dropped.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from functools import cache
from typing import Any

from ..errors import ConfigurationError

AUTO = "auto"
CHECKPOINT_CLASS = "checkpoint-class"
"""The task of a checkpoint whose class no auto class of transformers maps: it loads as that class."""
SEQ2SEQ = "text2text-generation"
EXTRA_NAMES = {"AutoModelForSeq2SeqLM": SEQ2SEQ}
"""Auto classes without a pipeline whose task is not their kebab-case name."""
ALIASES = {"sequence-classification": "text-classification",  # intelrt's name before issue 26
           "summarization": SEQ2SEQ, "translation": SEQ2SEQ}  # pipelines transformers 5 removed
"""Names ``load(task=)`` accepts besides transformers' own aliases (``ner``, ``sentiment-analysis`` …)."""
GENERATIVE = frozenset({"text-generation", SEQ2SEQ, "image-text-to-text", "automatic-speech-recognition",
                        "text-to-audio", "any-to-any", "visual-question-answering"})
"""Tasks whose models ``Loaded.generate`` decodes (``model.generate``)."""
AUTO_ORDER = (
    "text-generation", "image-text-to-text", "automatic-speech-recognition", SEQ2SEQ, "text-to-audio",
    "any-to-any", "text-classification", "token-classification", "question-answering", "fill-mask",
    "multiple-choice", "table-question-answering", "document-question-answering", "image-classification",
    "object-detection", "image-segmentation", "depth-estimation", "video-classification",
    "audio-classification", "zero-shot-image-classification", "zero-shot-object-detection",
    "keypoint-matching", "mask-generation", "feature-extraction",
)
"""The order a checkpoint's class is looked up in when its task is not given (then every other
task, ``decision`` last): a class several tasks load gets the first — ``Gemma3ForConditionalGeneration``
is a causal LM before an image-text-to-text model (text prompts keep the fast decode loop),
``VoxtralForConditionalGeneration`` a speech recogniser before a seq2seq model."""
LAST = ("decision",)


@dataclass(frozen=True)
class Task:
    """One task: its name, the auto classes that load a model for it (in order), whether
    ``transformers.pipeline`` runs it, and its pipeline's input kind."""

    name: str
    auto_classes: tuple[str, ...]
    pipeline: bool
    modality: str
    """``text``, ``image``, ``audio``, ``video``, ``multimodal`` (transformers' ``type``), ``""`` without a pipeline."""

    @property
    def generative(self) -> bool:
        return self.name in GENERATIVE


def _kebab(auto_class: str) -> str:
    head = auto_class.removeprefix("AutoModelFor")
    return re.sub(r"(?<=[a-z0-9])(?=[A-Z])|(?<=[A-Z])(?=[A-Z][a-z])", "-", head).lower()


@cache
def _registry() -> tuple[dict[str, Task], dict[str, str]]:
    """(task name → Task, alias → task name) from the installed transformers."""
    import transformers
    from transformers.pipelines import PIPELINE_REGISTRY

    found: dict[str, Task] = {}
    used: set[str] = set()
    for name, entry in PIPELINE_REGISTRY.supported_tasks.items():
        autos = tuple(cls.__name__ for cls in entry.get("pt", ()))
        used.update(autos)
        found[name] = Task(name, autos, True, str(entry.get("type", "")))
    for auto in sorted(n for n in dir(transformers) if n.startswith("AutoModelFor") and n not in used):
        if getattr(getattr(transformers, auto, None), "_model_mapping", None) is None:
            continue
        name = EXTRA_NAMES.get(auto, _kebab(auto))
        found.setdefault(name, Task(name, (auto,), False, ""))
    found[CHECKPOINT_CLASS] = Task(CHECKPOINT_CLASS, (), False, "")
    aliases = {**dict(PIPELINE_REGISTRY.task_aliases), **ALIASES}
    return found, aliases


def pipeline_tasks() -> tuple[str, ...]:
    """Every task ``transformers.pipeline`` accepts in the installed version, aliases included
    (``PIPELINE_REGISTRY.get_supported_tasks()``)."""
    from transformers.pipelines import PIPELINE_REGISTRY

    return tuple(PIPELINE_REGISTRY.get_supported_tasks())


def load_tasks() -> tuple[str, ...]:
    """Every task ``load(task=)`` accepts: the pipeline tasks, the heads without a pipeline,
    :data:`CHECKPOINT_CLASS`, and the aliases of all of them."""
    found, aliases = _registry()
    return tuple(sorted({*found, *aliases}))


def canonical(task: str) -> str:
    """The task ``task`` names (an alias resolved), or a :class:`ConfigurationError` listing them."""
    found, aliases = _registry()
    name = aliases.get(task, task)
    if name not in found:
        raise ConfigurationError(f"task={task!r} is not a task of the installed transformers; one of: "
                                 f"{', '.join(load_tasks())}")
    return name


def get(task: str) -> Task:
    """The :class:`Task` named ``task`` (an alias resolved)."""
    return _registry()[0][canonical(task)]


def normalize_task(value: object) -> str:
    """``load(task=)``'s normaliser: ``"auto"``, or the canonical name of a task (SPEC T2).
    ``"auto"`` imports nothing (``import intelrt`` stays light, SPEC C3)."""
    if not isinstance(value, str) or not value:
        raise ConfigurationError(f"task must be a non-empty string, got {value!r}")
    return value if value == AUTO else canonical(value)


def _names(value: Any) -> tuple[str, ...]:
    return tuple(value) if isinstance(value, (list, tuple)) else (str(value),)


@cache
def class_names(task: str) -> frozenset[str]:
    """Every class the auto classes of ``task`` map to, for any model type."""
    import transformers

    names: set[str] = set()
    for auto in get(task).auto_classes:
        mapping = getattr(transformers, auto)._model_mapping._model_mapping  # model_type → class name(s)
        for value in mapping.values():
            names.update(_names(value))
    return frozenset(names)


def auto_order() -> tuple[str, ...]:
    """Every task, in the order a checkpoint's class is looked up in (:data:`AUTO_ORDER`)."""
    found, _ = _registry()
    rest = sorted(n for n in found if n not in AUTO_ORDER and n not in LAST and n != CHECKPOINT_CLASS)
    return tuple(n for n in (*AUTO_ORDER, *rest, *LAST) if n in found)


def tasks_of_class(name: str) -> tuple[str, ...]:
    """The tasks whose auto classes load class ``name``, in :func:`auto_order`."""
    return tuple(task for task in auto_order() if name in class_names(task))


def task_of_checkpoint(architectures: tuple[str, ...], auto_map: dict[str, Any] | None = None
                       ) -> tuple[str, str] | None:
    """(task, why) for a checkpoint whose task is not given, or ``None`` when nothing says it.

    Remote code (``auto_map``): the first task whose auto class ``auto_map`` names (the class
    transformers would run). Otherwise the first task of :func:`auto_order` whose auto classes load
    the class ``architectures`` names; a class of transformers that no auto class maps is
    :data:`CHECKPOINT_CLASS`."""
    if auto_map:
        for task in auto_order():
            auto = next((a for a in get(task).auto_classes if a in auto_map), None)
            if auto is not None:
                return task, f"config.json's auto_map names its own class for transformers' {auto}"
    for arch in architectures:
        found = tasks_of_class(arch)
        if found:
            autos = ", ".join(get(found[0]).auto_classes)
            also = f" (it also serves {', '.join(found[1:])})" if len(found) > 1 else ""
            return found[0], f"config.architectures names {arch}, a class of transformers' {autos}{also}"
    import transformers

    for arch in architectures:
        if getattr(transformers, arch, None) is not None:
            return CHECKPOINT_CLASS, (f"config.architectures names {arch}, which no auto class of transformers "
                                      "maps: it loads as that class")
    return None
