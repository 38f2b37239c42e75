"""Compile wrapping (installed once per process) and ``intelrt.compile``.

A backend may need every ``torch.compile`` call of the process rewritten (Gaudi: SPEC H9). The
replacement is installed once and never stacked: before installing, the layers already around
the real ``torch.compile`` — intelrt's own, and transformers' Gaudi switch, which
``is_torch_hpu_available()`` installs on its first call — are peeled off, and the new wrapper
wraps the real function.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from typing import Any, TypeVar

from ..hooks.backend import Backend
from ..hooks.plan import Plan
from ..host.manager import PluginHost, get_host

log = logging.getLogger(__name__)
T = TypeVar("T")

_WRAPPED_ATTR = "__intelrt_wrapped__"
_ORIGINAL_ATTR = "__intelrt_original__"
_lock = threading.Lock()

#: ``torch.compile`` wrappers installed by libraries: (module, function name, closure variable
#: holding the function they wrap). transformers' Gaudi switch is one (SPEC H9).
FOREIGN_WRAPPERS = (("transformers.utils.import_utils", "hpu_backend_compile", "original_compile"),)


def _foreign_inner(fn: Callable[..., Any]) -> Callable[..., Any] | None:
    """The function a known library wrapper wraps, or ``None`` when ``fn`` is not one."""
    code = getattr(fn, "__code__", None)
    closure = getattr(fn, "__closure__", None)
    for module, name, variable in FOREIGN_WRAPPERS:
        if (getattr(fn, "__module__", None) == module and getattr(fn, "__name__", None) == name
                and code is not None and closure and variable in code.co_freevars):
            inner = closure[code.co_freevars.index(variable)].cell_contents
            return inner if callable(inner) else None
    return None


def real_compile(fn: Callable[..., Any]) -> Callable[..., Any]:
    """Peel intelrt's and known libraries' wrappers off ``fn`` (``torch.compile``)."""
    seen: set[int] = set()
    while id(fn) not in seen:
        seen.add(id(fn))
        inner = getattr(fn, _ORIGINAL_ATTR, None) or _foreign_inner(fn)
        if inner is None:
            break
        fn = inner
    return fn


def install_compile_wrapper(backend: Backend, host: PluginHost | None = None) -> str | None:
    """Install the backend's ``torch.compile`` replacement once; return the plugin that owns it.

    Idempotent: a second call (or a wrapper already installed by us) changes nothing, so the
    wrapper is never stacked (SPEC H9); a library wrapper found around (or inside) ours is
    dropped, ours then wraps the real ``torch.compile``.
    """
    import torch

    host = host or get_host()
    with _lock:
        current = torch.compile
        if getattr(current, _WRAPPED_ATTR, None) == backend.name:
            return str(getattr(current, "__intelrt_plugin__", ""))
        original = real_compile(current)
        wrapper = host.compile_wrapper(backend, original)
        if wrapper is None:
            return None
        plugin = backend.plugin
        setattr(wrapper, _WRAPPED_ATTR, backend.name)
        setattr(wrapper, _ORIGINAL_ATTR, original)
        setattr(wrapper, "__intelrt_plugin__", plugin)  # noqa: B010 - a dunder on a function object
        torch.compile = wrapper
        log.info("torch.compile wrapped by %s for %s", plugin, backend.name)
        return plugin


def compile(target: T, plan: Plan) -> T:  # noqa: A001 - mirrors torch.compile
    """Compile ``target`` (a model or function) as the plan decided; returns it unchanged when off."""
    value = plan.decided.compile
    if value is None or not value.enabled:
        return target
    import torch

    install_compile_wrapper(plan.backend)  # no-op when installed; drops a library wrapper put on top
    options: dict[str, Any] = {"backend": value.compiler or "inductor"}
    if value.mode:
        options["mode"] = value.mode
    if isinstance(target, torch.nn.Module):
        target.compile(**options)  # in place: attributes and generate() keep working
        return target
    compiled: Callable[..., Any] = torch.compile(target, **options)  # type: ignore[call-overload]
    return compiled  # type: ignore[return-value]
