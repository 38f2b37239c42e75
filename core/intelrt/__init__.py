"""intelrt: take a transformers model through load, inference, training and distributed runs on
Intel GPUs (xpu), Intel Gaudi (hpu), CPU and CUDA — decisions planned, explained, overridable.

``import intelrt`` is cheap: torch and transformers are imported only when a function needs them
(SPEC C3).
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

from ._version import __version__
from .errors import (
    BackendUnavailableError,
    ConfigurationError,
    IntelrtError,
    ModelSourceError,
    PlanError,
    PluginError,
    SaveError,
    UnsafeModelError,
)
from .plugins import hookimpl

if TYPE_CHECKING:
    from .compiling import compile
    from .detection import Detection, detect
    from .launching import launch
    from .loaded import Loaded
    from .loading import load, setup_env
    from .plan_data import Plan
    from .planning import plan
    from .training import training_arguments
    from .types import BackendStatus, Decision, DeviceInfo, EnvVar, Finding, Setting

_LAZY = {
    "load": "loading", "setup_env": "loading", "plan": "planning", "detect": "detection",
    "compile": "compiling", "Plan": "plan_data", "Loaded": "loaded", "Detection": "detection",
    "BackendStatus": "types", "Decision": "types", "DeviceInfo": "types", "EnvVar": "types",
    "Finding": "types", "Setting": "types",
    "training_arguments": "training", "launch": "launching",
}

__all__ = [
    "__version__", "hookimpl", "load", "plan", "detect", "setup_env", "compile",
    "Plan", "Loaded", "Detection", "BackendStatus", "Decision", "DeviceInfo", "EnvVar", "Finding", "Setting",
    "IntelrtError", "ConfigurationError", "BackendUnavailableError", "PlanError", "PluginError",
    "ModelSourceError", "UnsafeModelError", "SaveError",
    "training_arguments", "launch",
]


def __getattr__(name: str) -> Any:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module 'intelrt' has no attribute {name!r}")
    value = getattr(importlib.import_module(f".{module}", __name__), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(_LAZY))
