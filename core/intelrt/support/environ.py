"""Writing a run's variables into an environment: the one place intelrt changes ``os.environ``
(``intelrt.setup_env``, ``load()``, ``training_arguments()``) or builds a child's environment."""

from __future__ import annotations

import logging
import os
from collections.abc import Mapping, MutableMapping

log = logging.getLogger(__name__)


def write(values: Mapping[str, str], environ: MutableMapping[str, str] | None = None) -> list[str]:
    """Set ``values`` in ``environ`` (default ``os.environ``); return the names whose value changed."""
    target = os.environ if environ is None else environ
    changed = []
    for name, value in values.items():
        if target.get(name) != value:
            target[name] = value
            changed.append(name)
            log.info("set %s=%s", name, value)
    return changed


def child(values: Mapping[str, str], base: Mapping[str, str] | None = None) -> dict[str, str]:
    """The environment of a started process: ``base`` (default this process's) with ``values`` set."""
    env = dict(os.environ if base is None else base)
    env.update(values)
    return env
