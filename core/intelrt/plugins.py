"""The typed facade over pluggy: discovery, allow/block lists, tracing, validation (SPEC C6).

Core code calls hooks only through :class:`PluginHost`, never through ``pm.hook`` directly, so
every result is validated and every failure names the plugin and its distribution.
"""

from __future__ import annotations

import logging
import os
import queue
import sys
import threading
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from importlib import metadata
from typing import Any

import pluggy

from . import hookspecs
from .errors import ConfigurationError, IntelrtError, PluginError

hookimpl = pluggy.HookimplMarker(hookspecs.PROJECT)
"""Decorator for hook implementations: ``@intelrt.hookimpl``."""

ENTRY_POINT_GROUP = "intelrt"
ALLOW_VAR = "INTELRT_PLUGINS"
BLOCK_VAR = "INTELRT_DISABLE_PLUGINS"
DEBUG_VAR = "INTELRT_DEBUG"
TIMEOUT_VAR = "INTELRT_HOOK_TIMEOUT"
DEFAULT_HOOK_TIMEOUT = 120.0
"""Seconds a single hook call may take (device detection on real hardware can take several)."""

trace_log = logging.getLogger("intelrt.trace")


@dataclass(frozen=True)
class PluginRecord:
    """One plugin the host knows of, loaded or not (``intelrt plugins`` prints these)."""

    name: str
    distribution: str
    version: str
    hooks: tuple[str, ...]
    status: str
    """``enabled``, ``blocked`` (block-list), ``not allowed`` (allow-list) or ``failed``."""
    builtin: bool = False
    error: str | None = None

    def to_dict(self) -> dict[str, Any]:
        return {"name": self.name, "distribution": self.distribution, "version": self.version,
                "hooks": list(self.hooks), "status": self.status, "builtin": self.builtin,
                "error": self.error}


PROBING_HOOKS = frozenset({"intelrt_detect"})
"""Hooks that may touch a device driver (and hang on a broken one): run under the time limit
even for intelrt's built-in backends. Every hook of an installed plugin always is."""


def _names(value: str | None) -> set[str] | None:
    if value is None:
        return None
    return {part.strip() for part in value.split(",") if part.strip()}


def _enable_tracing() -> None:
    if not any(getattr(h, "_intelrt_trace", False) for h in trace_log.handlers):
        handler = logging.StreamHandler(sys.stderr)
        handler.setFormatter(logging.Formatter("intelrt-trace: %(message)s"))
        handler._intelrt_trace = True  # type: ignore[attr-defined]
        trace_log.addHandler(handler)
    trace_log.setLevel(logging.DEBUG)


class PluginHost:
    """Loads plugins and calls their hooks; the only door from core code to plugins."""

    def __init__(self, env: Mapping[str, str] | None = None, *, entry_points: bool = True,
                 builtins: bool = True, on_error: str = "raise") -> None:
        if on_error not in ("raise", "record"):
            raise ValueError("on_error must be 'raise' or 'record'")
        env = os.environ if env is None else env
        self._pm = pluggy.PluginManager(hookspecs.PROJECT)
        self._pm.add_hookspecs(hookspecs)
        self._owners: dict[str, tuple[str, str]] = {}  # pluggy name -> (distribution, version)
        self._builtin: set[str] = set()
        self.records: list[PluginRecord] = []
        self._allow = _names(env.get(ALLOW_VAR))
        self._block = _names(env.get(BLOCK_VAR)) or set()
        self.tracing = env.get(DEBUG_VAR, "").lower() in ("1", "true", "yes", "on")
        self.timeout = _timeout(env.get(TIMEOUT_VAR))
        if self.tracing:
            _enable_tracing()
        if builtins:
            from .backends import BUILTIN_PLUGINS

            for name, module in BUILTIN_PLUGINS:
                self._add(name, module, "intelrt", _own_version(), builtin=True)
        if entry_points:
            self._load_entry_points(on_error)

    # -- loading ---------------------------------------------------------------------------
    def _load_entry_points(self, on_error: str) -> None:
        seen: set[str] = set()
        for ep in metadata.entry_points(group=ENTRY_POINT_GROUP):
            dist = ep.dist.name if ep.dist is not None else "unknown"
            version = ep.dist.version if ep.dist is not None else "unknown"
            if ep.name in seen:
                continue  # the same distribution visible twice on sys.path
            seen.add(ep.name)
            if self._allow is not None and ep.name not in self._allow and dist not in self._allow:
                self.records.append(PluginRecord(ep.name, dist, version, (), "not allowed"))
                continue
            if ep.name in self._block or dist in self._block:
                self.records.append(PluginRecord(ep.name, dist, version, (), "blocked"))
                continue
            try:
                try:
                    plugin = ep.load()
                except Exception as exc:  # noqa: BLE001 - reported with the plugin's name
                    raise PluginError(
                        f"plugin {ep.name!r} (distribution {dist} {version}) failed to import: "
                        f"{type(exc).__name__}: {exc}. Fix or uninstall {dist}, or skip it with "
                        f"{BLOCK_VAR}={ep.name}.", plugin=ep.name, distribution=dist) from exc
                self._add(ep.name, plugin, dist, version)
            except PluginError as exc:
                if on_error == "raise":
                    raise
                self.records.append(PluginRecord(ep.name, dist, version, (), "failed", error=str(exc)))
        if self._allow:
            known = {r.name for r in self.records} | {r.distribution for r in self.records}
            missing = sorted(self._allow - known)
            if missing and on_error == "raise":
                raise ConfigurationError(
                    f"{ALLOW_VAR} names {', '.join(missing)}, which no installed plugin provides; "
                    f"installed: {', '.join(sorted(r.name for r in self.records if not r.builtin)) or 'none'}.")

    def register(self, plugin: object, name: str, *, distribution: str = "local",
                 version: str = "0") -> None:
        """Register a plugin object or module by hand (tests, embedding frameworks)."""
        if name in self._block:
            self.records.append(PluginRecord(name, distribution, version, (), "blocked"))
            return
        self._add(name, plugin, distribution, version)

    def unregister(self, name: str) -> None:
        self._pm.unregister(name=name)
        self._owners.pop(name, None)
        self.records = [r for r in self.records if r.name != name]

    def _add(self, name: str, plugin: object, dist: str, version: str, *, builtin: bool = False) -> None:
        if builtin and name in self._block:
            self.records.append(PluginRecord(name, dist, version, (), "blocked", builtin=True))
            return
        if self._pm.has_plugin(name) or self._pm.get_plugin(name) is not None:
            other = self._owners.get(name, ("?", "?"))[0]
            raise PluginError(f"two plugins are named {name!r}: one from {other}, one from {dist}; "
                              f"uninstall one, or block one with {BLOCK_VAR}.", plugin=name, distribution=dist)
        hooks = self._check_hook_names(name, plugin, dist)
        try:
            self._pm.register(plugin, name=name)
        except pluggy.PluginValidationError as exc:
            raise PluginError(f"plugin {name!r} (distribution {dist} {version}) has an invalid hook: {exc}",
                              plugin=name, distribution=dist) from exc
        self._owners[name] = (dist, version)
        if builtin:
            self._builtin.add(name)
        self.records.append(PluginRecord(name, dist, version, hooks, "enabled", builtin=builtin))

    def _check_hook_names(self, name: str, plugin: object, dist: str) -> tuple[str, ...]:
        hooks: list[str] = []
        for attr in dir(plugin):
            opts = self._pm.parse_hookimpl_opts(plugin, attr)
            if opts is None:
                continue
            caller = getattr(self._pm.hook, attr, None)
            if caller is None or caller.spec is None:
                known = ", ".join(sorted(hookspecs.RESULT_TYPES))
                raise PluginError(f"plugin {name!r} (distribution {dist}) implements unknown hook "
                                  f"{attr!r}; known hooks: {known}", plugin=name, distribution=dist)
            if opts.get("hookwrapper") or opts.get("wrapper"):
                raise PluginError(f"plugin {name!r} (distribution {dist}): {attr} is a wrapper; intelrt "
                                  "hooks take plain implementations (use tryfirst/trylast to order them)",
                                  plugin=name, distribution=dist)
            hooks.append(attr)
        return tuple(sorted(hooks))

    # -- calling -----------------------------------------------------------------------------
    def describe(self, plugin: str) -> str:
        dist, version = self._owners.get(plugin, ("unknown", "?"))
        return f"plugin {plugin!r} (distribution {dist} {version})"

    def distribution_of(self, plugin: str) -> str:
        return self._owners.get(plugin, ("unknown", "?"))[0]

    def _implementations(self, hook: str) -> list[tuple[str, Callable[..., Any], list[str]]]:
        caller = getattr(self._pm.hook, hook)
        impls = []
        for impl in reversed(caller.get_hookimpls()):  # pluggy's own call order
            impls.append((impl.plugin_name, impl.function, list(impl.argnames)))
        return impls

    def _invoke(self, hook: str, plugin: str, function: Callable[..., Any], argnames: list[str],
                kwargs: Mapping[str, Any]) -> Any:
        try:
            args = [kwargs[a] for a in argnames]
        except KeyError as missing:
            raise PluginError(f"{self.describe(plugin)}: {hook} asks for argument {missing} that the "
                              "host does not pass", plugin=plugin, distribution=self.distribution_of(plugin)) from None
        try:
            if plugin in self._builtin and hook not in PROBING_HOOKS:
                result = function(*args)  # intelrt's own decision code: no worker thread, no time limit
            else:
                result = _call_with_timeout(function, args, self.timeout, f"{self.describe(plugin)}: {hook}")
        except IntelrtError as exc:
            exc.add_note(f"raised by {self.describe(plugin)} in {hook}")
            if self.tracing:
                trace_log.debug("%s <- %s raised %s", hook, plugin, exc)
            raise
        except Exception as exc:  # noqa: BLE001 - re-raised naming the plugin
            raise PluginError(
                f"{self.describe(plugin)} raised {type(exc).__name__} in {hook}: {exc}. "
                f"Report it to the plugin's authors, or skip the plugin with {BLOCK_VAR}={plugin}.",
                plugin=plugin, distribution=self.distribution_of(plugin)) from exc
        if self.tracing:
            trace_log.debug("%s <- %s returned %r", hook, plugin, result)
        if result is not None:
            self._validate(hook, plugin, result)
        return result

    def _validate(self, hook: str, plugin: str, result: Any) -> None:
        shape, types = hookspecs.RESULT_TYPES[hook]
        if shape == "one":
            ok = isinstance(result, types)
        elif shape == "callable":
            ok = callable(result)
        else:
            ok = isinstance(result, (list, tuple)) and all(isinstance(r, types) for r in result)
        if not ok:
            wanted = "a callable" if shape == "callable" else (
                " or ".join(t.__name__ for t in types) if shape == "one"
                else "a list of " + " / ".join(t.__name__ for t in types))
            raise PluginError(f"{self.describe(plugin)} returned {type(result).__name__} "
                              f"({result!r:.120}) from {hook}; expected {wanted} or None.",
                              plugin=plugin, distribution=self.distribution_of(plugin))

    def call_first(self, hook: str, **kwargs: Any) -> tuple[Any, str | None]:
        """Call a firstresult hook; return ``(result, plugin name)`` or ``(None, None)``."""
        if self.tracing:
            trace_log.debug("call %s(%s)", hook, ", ".join(sorted(kwargs)))
        for plugin, function, argnames in self._implementations(hook):
            result = self._invoke(hook, plugin, function, argnames, kwargs)
            if result is not None:
                return result, plugin
        return None, None

    def call_all(self, hook: str, **kwargs: Any) -> list[tuple[str, Any]]:
        """Call a collecting hook; return ``[(plugin name, item), ...]`` flattened."""
        if self.tracing:
            trace_log.debug("call %s(%s)", hook, ", ".join(sorted(kwargs)))
        results: list[tuple[str, Any]] = []
        for plugin, function, argnames in self._implementations(hook):
            result = self._invoke(hook, plugin, function, argnames, kwargs)
            if result is not None:
                results.extend((plugin, item) for item in result)
        return results

    def enabled(self) -> list[PluginRecord]:
        return [r for r in self.records if r.status == "enabled"]


def _timeout(value: str | None) -> float:
    if value is None or not value.strip():
        return DEFAULT_HOOK_TIMEOUT
    try:
        seconds = float(value)
    except ValueError:
        raise ConfigurationError(f"{TIMEOUT_VAR}={value!r} is not a number of seconds") from None
    if not seconds > 0:
        raise ConfigurationError(f"{TIMEOUT_VAR}={value!r} must be a positive number of seconds")
    return seconds


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


def _call_with_timeout(function: Callable[..., Any], args: list[Any], timeout: float, what: str) -> Any:
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
    if not done.wait(timeout):  # the worker is stuck in the hook: it is left behind, never reused
        raise HookTimeoutError(
            f"{what} did not return within {timeout:g} s; the plugin may be waiting on a device or lock. "
            f"Raise {TIMEOUT_VAR} if it is only slow, or skip the plugin with {BLOCK_VAR}.",
            plugin=what.split("'")[1] if "'" in what else what, distribution=None)
    with _idle_lock:
        _idle.append(worker)
    if "error" in outcome:
        raise outcome["error"]
    return outcome.get("result")


def _own_version() -> str:
    from ._version import __version__

    return __version__


_cache_lock = threading.Lock()
_cached: tuple[tuple[str | None, ...], PluginHost] | None = None


def get_host() -> PluginHost:
    """The process-wide host for the current allow/block/debug settings (built on first use)."""
    global _cached
    key = tuple(os.environ.get(v) for v in (ALLOW_VAR, BLOCK_VAR, DEBUG_VAR))
    with _cache_lock:
        if _cached is None or _cached[0] != key:
            _cached = (key, PluginHost())
        return _cached[1]


def reset_host() -> None:
    """Forget the cached host (after installing a plugin in-process, in tests)."""
    global _cached
    with _cache_lock:
        _cached = None


__all__ = ["PluginHost", "PluginRecord", "get_host", "hookimpl", "reset_host"]
