"""``intelrt.pipeline(task, model, **options)``: transformers' own ``Pipeline``, built from the
plan's model, tokenizer and device — the seeds' other entry point, ``pipeline()`` picking the
Intel device by itself (SPEC X6, H6)."""

from __future__ import annotations

import os
from typing import Any

from ..errors import ConfigurationError
from ..hooks.options import AUTO
from .loaded import PIPELINE_TASKS
from .loading import load


def pipeline(task: str, model: str | os.PathLike[str], **options: Any) -> Any:
    """Plan and load ``model`` for ``task`` (``text-generation``, ``feature-extraction``,
    ``text-classification``), then return ``transformers.pipeline(task, ...)`` on it.

    ``options`` are ``load``'s: request options (``backend=``, ``dtype=`` …) and ``from_pretrained``
    keywords; the plan decides the device, so there is no ``device=``.
    """
    planned = PIPELINE_TASKS.get(task)
    if planned is None:
        raise ConfigurationError(f"pipeline task {task!r}: intelrt loads models for "
                                 f"{', '.join(PIPELINE_TASKS)}; for other tasks build transformers.pipeline "
                                 "with intelrt.load(...).model")
    if options.get("task", AUTO) not in (AUTO, planned):
        raise ConfigurationError(f"pipeline({task!r}) loads the model for {planned!r}, not task={options['task']!r}; "
                                 "leave task= out")
    options.pop("task", None)
    if "device" in options:
        raise ConfigurationError("pipeline(): the plan chooses the device; pass backend= or devices= instead of device=")
    return load(model, task=planned, **options).pipeline(task)
