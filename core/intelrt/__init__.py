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
    TrainingDivergedError,
    UnsafeModelError,
)
from .hooks.markers import hookimpl
from .support import redaction as _redaction  # noqa: F401 - every IntelrtError's text masked
from .support import startup as _startup  # noqa: F401 - the environment at import: the user's (SPEC C2)

if TYPE_CHECKING:
    from .hooks.plan import Plan
    from .hooks.types import BackendStatus, Decision, DeviceInfo, EnvVar, Finding, Setting
    from .planning.detection import Detection, detect
    from .planning.planner import plan
    from .runtime.compiling import compile
    from .runtime.environment import setup_env
    from .runtime.loaded import Loaded
    from .runtime.loading import load
    from .runtime.pipeline import pipeline
    from .runtime.quantizing import quantize
    from .serving import serve
    from .training.arguments import training_arguments
    from .training.launching import launch

_LAZY = {
    "load": "runtime.loading", "setup_env": "runtime.environment", "plan": "planning.planner",
    "detect": "planning.detection", "compile": "runtime.compiling", "Plan": "hooks.plan",
    "Loaded": "runtime.loaded", "Detection": "planning.detection",
    "BackendStatus": "hooks.types", "Decision": "hooks.types", "DeviceInfo": "hooks.types",
    "EnvVar": "hooks.types", "Finding": "hooks.types", "Setting": "hooks.types",
    "training_arguments": "training.arguments", "launch": "training.launching", "serve": "serving",
    "pipeline": "runtime.pipeline", "quantize": "runtime.quantizing",
}

__all__ = [
    "__version__", "hookimpl", "load", "pipeline", "plan", "detect", "setup_env", "compile",
    "Plan", "Loaded", "Detection", "BackendStatus", "Decision", "DeviceInfo", "EnvVar", "Finding", "Setting",
    "IntelrtError", "ConfigurationError", "BackendUnavailableError", "PlanError", "PluginError",
    "ModelSourceError", "UnsafeModelError", "SaveError", "TrainingDivergedError",
    "training_arguments", "launch", "serve", "quantize",
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
