"""The Gaudi ``torch.compile`` replacement (SPEC H9).

On Gaudi only ``hpu_backend`` and ``eager`` work, yet modeling code calls ``torch.compile`` with
the default (``inductor``) backend, often as a decorator. transformers installs a switch itself
the first time ``is_torch_hpu_available()`` runs; intelrt owns that switch instead: its wrapper is
installed once (:func:`intelrt.compiling.install_compile_wrapper` peels transformers' wrapper and
never stacks), and warns once per call site it switches.
"""

from __future__ import annotations

import functools
import importlib.util
import logging
import warnings
from collections.abc import Callable
from typing import Any

from .facts import COMPILE_BACKENDS
from .probe import safe_in_process

log = logging.getLogger(__name__)


class GaudiCompileWarning(UserWarning):
    """A ``torch.compile`` backend was switched to ``hpu_backend`` on Gaudi."""


def _backend_name(backend: object) -> str:
    return backend if isinstance(backend, str) else getattr(backend, "__name__", repr(backend))


def make_hpu_compile(original: Callable[..., Any]) -> Callable[..., Any]:
    """Wrap ``original`` (the real ``torch.compile``) so every backend but ``hpu_backend`` /
    ``eager`` becomes ``hpu_backend``, with one :class:`GaudiCompileWarning` per switched call."""

    @functools.wraps(original)
    def hpu_compile(*args: Any, **kwargs: Any) -> Any:
        backend = kwargs.get("backend", "inductor")
        if not (isinstance(backend, str) and backend in COMPILE_BACKENDS):
            # stacklevel=2 names the caller's line: the decorator or call site to fix
            warnings.warn(GaudiCompileWarning(
                f"torch.compile(backend={_backend_name(backend)!r}) does not run on Gaudi; intelrt switched it to "
                "backend='hpu_backend' (SPEC H9). Pass backend='hpu_backend' to silence this."), stacklevel=2)
            kwargs["backend"] = "hpu_backend"
        return original(*args, **kwargs)

    return hpu_compile


def let_transformers_patch_first() -> bool:
    """Run transformers' one-time Gaudi patching now (``is_torch_hpu_available()`` wraps
    ``torch.compile`` on its first call), so it cannot wrap on top of intelrt's wrapper later.

    Only when importing the Gaudi stack here cannot break SPEC H3; returns whether it ran.
    """
    if not safe_in_process() or importlib.util.find_spec("transformers") is None:
        return False
    from transformers.utils.import_utils import is_torch_hpu_available

    return bool(is_torch_hpu_available())


def compile_wrapper(compile_fn: Callable[..., Any]) -> Callable[..., Any]:
    """H9: the ``torch.compile`` replacement for Gaudi, wrapping ``compile_fn`` (the original)."""
    if let_transformers_patch_first():
        log.debug("transformers' Gaudi torch.compile switch ran first; intelrt's replaces it")
    return make_hpu_compile(compile_fn)
