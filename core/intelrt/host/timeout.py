"""Hook calls under a time limit: a plugin that hangs (on a device, a lock) cannot hang intelrt."""

from __future__ import annotations

import queue
import threading
from collections.abc import Callable
from typing import Any

from ..errors import ConfigurationError, PluginError
from .settings import BLOCK_VAR, TIMEOUT_VAR

DEFAULT_HOOK_TIMEOUT = 120.0
"""Seconds a single hook call may take (device detection on real hardware can take several)."""


def parse_timeout(value: str | None) -> float:
    """``INTELRT_HOOK_TIMEOUT`` as seconds (unset or blank: the default; ``inf``: no limit)."""
    if value is None or not value.strip():
        return DEFAULT_HOOK_TIMEOUT
    try:
        seconds = float(value)
    except ValueError:
        raise ConfigurationError(f"{TIMEOUT_VAR}={value!r} is not a number of seconds") from None
    if not seconds > 0:
        raise ConfigurationError(f"{TIMEOUT_VAR}={value!r} must be a positive number of seconds (inf: no limit)")
    return seconds


def _wait_for(seconds: float) -> float | None:
    """``seconds`` as ``Event.wait`` takes it: ``None`` (no limit) past what it can wait (``inf``,
    ``1e300``: ``threading.TIMEOUT_MAX``, beyond which it raises ``OverflowError``)."""
    return None if seconds >= threading.TIMEOUT_MAX else seconds


class HookTimeoutError(PluginError):
    """A hook did not return within ``INTELRT_HOOK_TIMEOUT`` seconds."""


class _HookThread:
    """A daemon thread that runs hook calls one after another. Reused between calls (a new thread
    per call cost ~0.2 ms, and a plan makes about forty calls); a daemon, so a hook that never
    returns cannot keep the process from exiting."""

    def __init__(self) -> None:
        self.jobs: queue.SimpleQueue[Callable[[], None]] = queue.SimpleQueue()
        threading.Thread(target=self._serve, name="intelrt-hook", daemon=True).start()

    def _serve(self) -> None:
        _inside.hook = True
        while True:
            self.jobs.get()()


_idle_lock = threading.Lock()
_idle: list[_HookThread] = []
_inside = threading.local()


def call_with_timeout(function: Callable[..., Any], args: list[Any], timeout: float, what: str) -> Any:
    """Run a hook on a worker thread so a hanging plugin cannot hang intelrt; re-raise its error.

    A hook that calls hooks itself runs them inline: its own time limit covers them."""
    if getattr(_inside, "hook", False):
        return function(*args)
    outcome: dict[str, Any] = {}
    done = threading.Event()

    def job() -> None:
        try:
            outcome["result"] = function(*args)
        except BaseException as exc:  # noqa: BLE001 - handed to the calling thread unchanged
            outcome["error"] = exc
        finally:
            done.set()

    with _idle_lock:
        worker = _idle.pop() if _idle else None
    worker = worker or _HookThread()
    worker.jobs.put(job)
    if not done.wait(_wait_for(timeout)):  # the worker is stuck in the hook: it is left behind, never reused
        raise HookTimeoutError(
            f"{what} did not return within {timeout:g} s; the plugin may be waiting on a device or lock. "
            f"Raise {TIMEOUT_VAR} if it is only slow, or skip the plugin with {BLOCK_VAR}.",
            plugin=what.split("'")[1] if "'" in what else what, distribution=None)
    with _idle_lock:
        _idle.append(worker)
    if "error" in outcome:
        raise outcome["error"]
    return outcome.get("result")
