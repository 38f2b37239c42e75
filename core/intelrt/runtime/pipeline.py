"""``intelrt.pipeline(task, model, **options)``: transformers' own ``Pipeline``, built from the
plan's model, its processors and device — the seeds' other entry point, ``pipeline()`` picking the
Intel device by itself (SPEC X6, H6), for every task ``transformers.pipeline`` accepts (SPEC T2)."""

from __future__ import annotations

import os
from typing import Any

from ..errors import ConfigurationError, PlanError
from ..hooks.options import AUTO
from ..hooks.request import split_credentials
from ..host.manager import get_host
from ..planning import tasks
from ..planning.architecture import resolve
from .loaded import pipeline_task
from .loading import apply_plan, load, no_class_for, plan_for_load


def pipeline(task: str, model: str | os.PathLike[str], **options: Any) -> Any:
    """Plan and load ``model`` for ``task`` (any task ``transformers.pipeline`` accepts), then return
    ``transformers.pipeline(task, ...)`` on it.

    The model loads as its checkpoint's class when that class serves ``task`` (a token classifier for
    ``token-classification``, a text classifier for ``zero-shot-classification``), else with the
    class ``transformers.pipeline`` would pick for ``task`` (``AutoModel`` for ``feature-extraction``).
    ``options`` are ``load``'s: request options (``backend=``, ``dtype=`` …) and ``from_pretrained``
    keywords; the plan decides the device, so there is no ``device=``.
    """
    name = pipeline_task(task)
    if options.get("task", AUTO) not in (AUTO, name):
        raise ConfigurationError(f"pipeline({task!r}) loads the model for {name!r}, not task={options['task']!r}; "
                                 "leave task= out")
    options.pop("task", None)
    if "device" in options:
        raise ConfigurationError("pipeline(): the plan chooses the device; pass backend= or devices= instead of device=")
    try:
        plan = plan_for_load(model, **options)
    except PlanError:  # e.g. no architectures in config.json: the task itself says which class
        return load(model, task=name, **options).pipeline(name)
    arch = plan.model.architecture
    if (arch is not None and arch.name in tasks.class_names(name)) or (arch is None and plan.task == name):
        _, credentials = split_credentials(options)
        return apply_plan(plan, get_host(), credentials).pipeline(name)
    if not plan.model.config.get("auto_map") and resolve(plan.model, name) is None:
        raise no_class_for(plan.model, name)
    return load(model, task=name, **options).pipeline(name)
