"""Compile wrapping (installed once per process) and ``intelrt.compile``."""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from typing import Any, TypeVar

from .plan_data import Plan
from .plugins import PluginHost, get_host
from .types import BackendStatus

log = logging.getLogger(__name__)
T = TypeVar("T")

_WRAPPED_ATTR = "__intelrt_wrapped__"
_lock = threading.Lock()


def install_compile_wrapper(backend: BackendStatus, host: PluginHost | None = None) -> str | None:
    """Install the backend's ``torch.compile`` replacement once; return the plugin that owns it.

    Idempotent: a second call (or a wrapper already installed by us) changes nothing, so the
    wrapper is never stacked (SPEC H9).
    """
    import torch

    host = host or get_host()
    with _lock:
        current = torch.compile
        if getattr(current, _WRAPPED_ATTR, None) == backend.name:
            return str(getattr(current, "__intelrt_plugin__", ""))
        original = getattr(current, "__intelrt_original__", current)
        wrapper, plugin = host.call_first("intelrt_wrap_compile", backend=backend, compile_fn=original)
        if wrapper is None:
            return None
        setattr(wrapper, _WRAPPED_ATTR, backend.name)
        wrapper.__intelrt_original__ = original
        wrapper.__intelrt_plugin__ = plugin
        torch.compile = wrapper
        log.info("torch.compile wrapped by %s for %s", plugin, backend.name)
        return plugin


def compile(target: T, plan: Plan) -> T:  # noqa: A001 - mirrors torch.compile
    """Compile ``target`` (a model or function) as the plan decided; returns it unchanged when off."""
    value = plan.value("compile") or {}
    if not value.get("enabled"):
        return target
    import torch

    options: dict[str, Any] = {"backend": value.get("backend") or "inductor"}
    if value.get("mode"):
        options["mode"] = value["mode"]
    if isinstance(target, torch.nn.Module):
        target.compile(**options)  # in place: attributes and generate() keep working
        return target
    compiled: Callable[..., Any] = torch.compile(target, **options)  # type: ignore[call-overload]
    return compiled  # type: ignore[return-value]
