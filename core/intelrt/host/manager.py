"""The typed facade over pluggy: discovery, allow/block lists, tracing, validation (SPEC C6).

Core code calls hooks only through :class:`PluginHost`'s typed methods — one per hook, as tox's
plugin manager has — never through ``pm.hook``, so every result is validated (a structured
decision's dict converted to its payload type) and every failure names the plugin and its
distribution. intelrt's built-in backends (:mod:`intelrt.backends`) are registered first.
"""

from __future__ import annotations

import logging
import os
import sys
import threading
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, replace
from importlib import metadata
from typing import TYPE_CHECKING, Any, NoReturn

import pluggy

from .._version import __version__
from ..backends import BUILTIN_PLUGINS
from ..errors import ConfigurationError, IntelrtError, PluginError
from ..hooks import hookspecs
from ..hooks.payloads import Payload
from ..hooks.types import BackendStatus, Decision, EnvVar, Finding, Setting
from .settings import ALLOW_VAR, BLOCK_VAR, DEBUG_VAR, ENTRY_POINT_GROUP, TIMEOUT_VAR
from .timeout import call_with_timeout, parse_timeout

if TYPE_CHECKING:
    from ..planning.plan import Plan
    from ..planning.request import Request

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
        self.timeout = parse_timeout(env.get(TIMEOUT_VAR))
        if self.tracing:
            _enable_tracing()
        if builtins:
            for name, module in BUILTIN_PLUGINS:
                self._add(name, module, "intelrt", __version__, builtin=True)
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
                result = call_with_timeout(function, args, self.timeout, f"{self.describe(plugin)}: {hook}")
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

    def _call_first(self, hook: str, **kwargs: Any) -> tuple[Any, str | None]:
        """Call a firstresult hook; return ``(result, plugin name)`` or ``(None, None)``."""
        if self.tracing:
            trace_log.debug("call %s(%s)", hook, ", ".join(sorted(kwargs)))
        for plugin, function, argnames in self._implementations(hook):
            result = self._invoke(hook, plugin, function, argnames, kwargs)
            if result is not None:
                return result, plugin
        return None, None

    def _call_all(self, hook: str, **kwargs: Any) -> list[tuple[str, Any]]:
        """Call a collecting hook; return ``[(plugin name, item), ...]`` flattened."""
        if self.tracing:
            trace_log.debug("call %s(%s)", hook, ", ".join(sorted(kwargs)))
        results: list[tuple[str, Any]] = []
        for plugin, function, argnames in self._implementations(hook):
            result = self._invoke(hook, plugin, function, argnames, kwargs)
            if result is not None:
                results.extend((plugin, item) for item in result)
        return results

    # -- one typed method per hook (what each returns is checked in ``_validate``) ----------------
    def detect(self, env: Mapping[str, str]) -> list[tuple[str, BackendStatus]]:
        """``intelrt_detect``: every plugin's backends, each with the plugin that reported it."""
        return self._call_all("intelrt_detect", env=env)

    def setup_env(self, backend: BackendStatus, request: Request, env: Mapping[str, str]
                  ) -> list[tuple[str, EnvVar | Finding]]:
        """``intelrt_setup_env``: variables the run needs and findings about the environment."""
        return self._call_all("intelrt_setup_env", backend=backend, request=request, env=env)

    def select(self, hook: str, payload: type[Payload] | None = None, **kwargs: Any
               ) -> tuple[Decision, str] | None:
        """A selection hook (``intelrt_select_*``): the first answer and its plugin, or ``None``.

        ``payload``: the concern's value type; a plugin's dict is converted to it (a wrong key is a
        :class:`PluginError` naming the plugin), a value of another type refused."""
        if not hook.startswith("intelrt_select_"):
            raise ValueError(f"{hook} is not a selection hook")
        decision, plugin = self._call_first(hook, **kwargs)
        if decision is None or plugin is None:
            return None
        return self._typed(hook, plugin, decision, payload), plugin

    def _typed(self, hook: str, plugin: str, decision: Decision, payload: type[Payload] | None) -> Decision:
        value = decision.value
        if payload is None or value is None or isinstance(value, payload):
            if isinstance(value, Payload) and payload is None:
                self._refuse(hook, plugin, f"a {type(value).__name__}", "a plain JSON value")
            return decision
        if not isinstance(value, Mapping):
            return self._refuse(hook, plugin, f"{type(value).__name__} {value!r:.80}", f"a {payload.__name__} (or None)")
        try:
            return replace(decision, value=payload.from_dict(value))
        except TypeError as exc:
            raise PluginError(f"{self.describe(plugin)} returned from {hook} a value that is not a "
                              f"{payload.__name__}: {exc}", plugin=plugin,
                              distribution=self.distribution_of(plugin)) from None

    def _refuse(self, hook: str, plugin: str, got: str, wanted: str) -> NoReturn:
        raise PluginError(f"{self.describe(plugin)} returned {got} as the value of its Decision from {hook}; "
                          f"expected {wanted}.", plugin=plugin, distribution=self.distribution_of(plugin))

    def wrap_compile(self, backend: BackendStatus, compile_fn: Callable[..., Any]
                     ) -> tuple[Callable[..., Any], str] | None:
        """``intelrt_wrap_compile``: the backend's process-wide ``torch.compile`` replacement."""
        wrapper, plugin = self._call_first("intelrt_wrap_compile", backend=backend, compile_fn=compile_fn)
        return None if wrapper is None or plugin is None else (wrapper, plugin)

    def training_arguments(self, backend: BackendStatus, plan: Plan, overrides: Mapping[str, Any]
                           ) -> list[tuple[str, Setting]]:
        """``intelrt_training_arguments``: each plugin's ``TrainingArguments`` keywords."""
        return self._call_all("intelrt_training_arguments", backend=backend, plan=plan, overrides=overrides)

    def launch_env(self, backend: BackendStatus, plan: Plan, nproc: int, env: Mapping[str, str]
                   ) -> list[tuple[str, EnvVar | Finding]]:
        """``intelrt_launch_env``: the launched processes' extra variables and findings."""
        return self._call_all("intelrt_launch_env", backend=backend, plan=plan, nproc=nproc, env=env)

    def diagnose(self, backends: Sequence[BackendStatus], env: Mapping[str, str], probe: bool = False
                 ) -> list[tuple[str, Finding]]:
        """``intelrt_diagnose``: every plugin's doctor findings (``probe``: vendor tools may run)."""
        return self._call_all("intelrt_diagnose", backends=backends, env=env, probe=probe)

    def decode_graph(self, backend: BackendStatus, kind: str) -> Callable[..., Any] | None:
        """``intelrt_decode_graph``: the device-graph capturer of ``kind``, or ``None``."""
        capturer, _plugin = self._call_first("intelrt_decode_graph", backend=backend, kind=kind)
        return capturer

    def enabled(self) -> list[PluginRecord]:
        return [r for r in self.records if r.status == "enabled"]


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


__all__ = ["PluginHost", "PluginRecord", "get_host", "reset_host"]
