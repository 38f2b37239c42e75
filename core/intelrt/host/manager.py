"""The typed facade over pluggy: discovery, allow/block lists, tracing, validation (SPEC C6).

Core code reaches plugins only through :class:`PluginHost`'s typed methods — one per concern of
the contract, as tox's plugin manager has: :meth:`~PluginHost.decide` for every decision of the
concern registry, and one method each for backends, environment, launch, training and doctor —
never through ``pm.hook``, so every result is validated (a structured decision's dict converted to
its payload type) and every failure names the plugin and its distribution. A decision asks a
third-party selection hook, then the chosen backend object, then intelrt's generic rules
(``backends/generic.py``). intelrt's built-in backends (:mod:`intelrt.backends`) are registered
first.
"""

from __future__ import annotations

import inspect
import logging
import os
import sys
import threading
import warnings
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, replace
from importlib import metadata
from typing import Any, TypeVar

import pluggy

from .._version import __version__
from ..backends import BUILTIN_PLUGINS
from ..backends.generic import GENERIC, GENERIC_PLUGIN
from ..errors import ConfigurationError, IntelrtError, PlanError, PluginError
from ..hooks import hookspecs
from ..hooks.backend import Backend, Endorsement, Situation
from ..hooks.concerns import PROPOSE, Concern
from ..hooks.payloads import CompileChoice, KernelChoice, Payload
from ..hooks.plan import Plan, PlannedDecision
from ..hooks.types import BackendStatus, Decision, EnvVar, Finding, Setting
from ..support.redaction import is_secret_name, register_secret
from .settings import ALLOW_VAR, BLOCK_VAR, DEBUG_VAR, ENTRY_POINT_GROUP, TIMEOUT_VAR
from .timeout import call_with_timeout, parse_timeout

log = logging.getLogger(__name__)
T = TypeVar("T")
USERS = "requested by the user"
"""How a plan says a decision keeps what the user forced: written here only."""

trace_log = logging.getLogger("intelrt.trace")
HOOK_NAMES = tuple(sorted(name for name in dir(hookspecs) if name.startswith(f"{hookspecs.PROJECT}_")))


Select = Callable[[Backend, Situation], Decision | None]
Check = Callable[[Backend, Any, Situation], Endorsement | None]


@dataclass(frozen=True)
class ConcernCalls:
    """One concern's calls, written out so that a reader, grep and mypy follow each: the chosen
    backend's proposal (its override, if any), the generic rule's, and for a value the user forces
    or a third-party plugin answers, the backend's check and the generic one."""

    select: Select
    generic: Select
    check: Check | None = None
    generic_check: Check | None = None


CALLS: dict[str, ConcernCalls] = {
    "dtype": ConcernCalls(lambda b, s: b.select_dtype(s), GENERIC.select_dtype,
                          lambda b, v, s: b.check_dtype(v, s), GENERIC.check_dtype),
    "quantization": ConcernCalls(lambda b, s: b.select_quantization(s), GENERIC.select_quantization),
    "parallelism": ConcernCalls(lambda b, s: b.select_parallelism(s), GENERIC.select_parallelism),
    "placement": ConcernCalls(lambda b, s: b.select_placement(s), GENERIC.select_placement),
    "attention": ConcernCalls(lambda b, s: b.select_attention(s), GENERIC.select_attention,
                              lambda b, v, s: b.check_attention(v, s), GENERIC.check_attention),
    "kernels": ConcernCalls(lambda b, s: b.select_kernels(s), GENERIC.select_kernels,
                            lambda b, v, s: b.check_kernels(v, s), GENERIC.check_kernels),
    "compile": ConcernCalls(lambda b, s: b.select_compile(s), GENERIC.select_compile,
                            lambda b, v, s: b.check_compile(v, s), GENERIC.check_compile),
    "decode": ConcernCalls(lambda b, s: b.select_decode(s), GENERIC.select_decode),
    "batching": ConcernCalls(lambda b, s: b.select_batching(s), GENERIC.select_batching),
    "buckets": ConcernCalls(lambda b, s: b.select_buckets(s), GENERIC.select_buckets),
    "collective": ConcernCalls(lambda b, s: b.select_collective(s), GENERIC.select_collective),
}
"""Every concern a hook decides (:data:`~intelrt.hooks.concerns.CONCERNS`), by name; a test holds the
two to each other."""


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
    backends: tuple[str, ...] = ()
    """The backends the plugin contributes (``intelrt_backends``), by name."""

    def to_dict(self) -> dict[str, Any]:
        return {"name": self.name, "distribution": self.distribution, "version": self.version,
                "hooks": list(self.hooks), "backends": list(self.backends), "status": self.status,
                "builtin": self.builtin, "error": self.error}


def _names(value: str | None) -> set[str] | None:
    if value is None:
        return None
    return {part.strip() for part in value.split(",") if part.strip()}


def _contributed(plugin: object) -> tuple[str, ...]:
    """The names of the backends ``plugin`` contributes, for listings (a faulty answer is reported
    when the host asks for the classes, with the plugin named)."""
    contribute = getattr(plugin, "intelrt_backends", None)
    try:
        classes = contribute() if callable(contribute) else None
    except Exception:  # noqa: BLE001 - reported by PluginHost.backend_classes
        return ()
    return tuple(str(getattr(c, "name", "?")) for c in classes or ())


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
                try:  # under the time limit: an import that waits on a device or a lock cannot hang intelrt
                    plugin = call_with_timeout(ep.load, [], self.timeout,
                                               f"plugin {ep.name!r} (distribution {dist} {version}): its import")
                except PluginError:
                    raise
                except (Exception, SystemExit) as exc:  # noqa: BLE001 - reported with the plugin's name
                    # SystemExit too: a plugin that exits while importing must not end the command silently
                    raise PluginError(
                        f"plugin {ep.name!r} (distribution {dist} {version}) failed to import: "
                        f"{type(exc).__name__}: {exc}. Fix or uninstall {dist}, or skip it with "
                        f"{BLOCK_VAR}={ep.name}.", plugin=ep.name, distribution=dist) from exc
                self._add(ep.name, plugin, dist, version)
            except PluginError as exc:
                if on_error == "raise":
                    raise
                self.records.append(PluginRecord(ep.name, dist, version, (), "failed", error=str(exc)))
        known = {r.name for r in self.records} | {r.distribution for r in self.records}
        self.unknown_blocked = tuple(sorted(self._block - known))
        if self.unknown_blocked:  # a typo blocks nothing, and the plugin meant keeps loading
            log.warning("%s", self.unknown_blocked_message())
        if self._allow:
            self.unknown_allowed = tuple(sorted(self._allow - known))
            if self.unknown_allowed and on_error == "raise":
                raise ConfigurationError(self.unknown_allowed_message())
            if self.unknown_allowed:
                log.warning("%s", self.unknown_allowed_message())

    unknown_allowed: tuple[str, ...] = ()
    """Names in the allow-list that no installed plugin has (every plan refuses them; doctor reports them)."""
    unknown_blocked: tuple[str, ...] = ()
    """Names in the block-list that no plugin has (a warning, and a doctor finding: nothing is blocked by them)."""

    def unknown_blocked_message(self) -> str:
        plugins = ", ".join(sorted(r.name for r in self.records)) or "none"
        return (f"{BLOCK_VAR} names {', '.join(self.unknown_blocked)}, which no plugin has, so it blocks nothing; "
                f"plugins: {plugins}. Correct the names (a plugin's name or its distribution's).")

    def unknown_allowed_message(self) -> str:
        installed = ", ".join(sorted(r.name for r in self.records if not r.builtin)) or "none"
        return (f"{ALLOW_VAR} names {', '.join(self.unknown_allowed)}, which no installed plugin provides; "
                f"installed: {installed}. Correct the names, or unset {ALLOW_VAR} to load every installed plugin.")

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
        self.records.append(PluginRecord(name, dist, version, hooks, "enabled", builtin=builtin,
                                         backends=_contributed(plugin)))

    def _check_hook_names(self, name: str, plugin: object, dist: str) -> tuple[str, ...]:
        hooks: list[str] = []
        for attr in dir(plugin):
            opts = self._pm.parse_hookimpl_opts(plugin, attr)
            if opts is None:
                continue
            caller = getattr(self._pm.hook, attr, None)
            if caller is None or caller.spec is None:
                known = ", ".join(sorted(HOOK_NAMES))
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

    def _fault(self, plugin: str, message: str) -> PluginError:
        return PluginError(f"{self.describe(plugin)} {message}", plugin=plugin,
                           distribution=self.distribution_of(plugin))

    def _run(self, plugin: str, what: str, function: Callable[..., T], *args: Any, probing: bool = False) -> T:
        """Call a plugin's code (a hook, or a method of its backend) under the time limit — intelrt's
        own backends only when ``probing`` — naming the plugin in every failure."""
        try:
            if plugin in self._builtin and not probing:
                result = function(*args)  # intelrt's own decision code: no worker thread, no time limit
            else:
                result = call_with_timeout(function, list(args), self.timeout, f"{self.describe(plugin)}: {what}")
        except IntelrtError as exc:
            exc.add_note(f"raised by {self.describe(plugin)} in {what}")
            if self.tracing:
                trace_log.debug("%s <- %s raised %s", what, plugin, exc)
            raise
        except (Exception, SystemExit) as exc:  # noqa: BLE001 - re-raised naming the plugin (an exit too)
            raise self._fault(plugin, f"raised {type(exc).__name__} in {what}: {exc}. Report it to the plugin's "
                                      f"authors, or skip the plugin with {BLOCK_VAR}={plugin}.") from exc
        if self.tracing:
            trace_log.debug("%s <- %s returned %r", what, plugin, result)
        return result

    def _hook(self, hook: str, kwargs: Mapping[str, Any]) -> Iterator[tuple[str, Any]]:
        """Every implementation of ``hook`` in pluggy's call order: (plugin, its non-None answer)."""
        if self.tracing:
            trace_log.debug("call %s(%s)", hook, ", ".join(sorted(kwargs)))
        for impl in reversed(getattr(self._pm.hook, hook).get_hookimpls()):
            try:
                args = [kwargs[a] for a in impl.argnames]
            except KeyError as missing:
                raise self._fault(impl.plugin_name, f": {hook} asks for argument {missing} that the host does not "
                                                    "pass") from None
            result = self._run(impl.plugin_name, hook, impl.function, *args)
            if result is not None:
                yield impl.plugin_name, result

    def _items(self, plugin: str, what: str, result: object, kinds: tuple[type, ...]) -> list[Any]:
        """A collecting answer checked: a list of ``kinds`` (SPEC C6)."""
        if result is None:
            return []
        if isinstance(result, (list, tuple)) and all(isinstance(r, kinds) for r in result):
            return list(result)
        wanted = " / ".join(k.__name__ for k in kinds)
        raise self._fault(plugin, f"returned {type(result).__name__} ({result!r:.120}) from {what}; expected a list "
                                  f"of {wanted} or None.")

    def _collect(self, hook: str, kinds: tuple[type, ...], **kwargs: Any) -> list[tuple[str, Any]]:
        """Every plugin's answers to the collecting ``hook``, flattened and checked."""
        return [(plugin, item) for plugin, result in self._hook(hook, kwargs)
                for item in self._items(plugin, hook, result, kinds)]

    def _own(self, backend: Backend, method: Callable[..., Any], kinds: tuple[type, ...], *args: Any
             ) -> list[tuple[str, Any]]:
        """The chosen backend's answer to one of its collecting methods (bound: ``backend.diagnose``), checked."""
        what = f"{type(backend).__name__}.{method.__name__}"
        result = self._run(backend.plugin, what, method, *args)
        return [(backend.plugin, item) for item in self._items(backend.plugin, what, result, kinds)]

    # -- backends ----------------------------------------------------------------------------
    def backend_classes(self) -> list[tuple[str, type[Backend]]]:
        """``intelrt_backends``: every plugin's backend classes, each with the plugin contributing it."""
        classes: list[tuple[str, type[Backend]]] = []
        for plugin, result in self._hook("intelrt_backends", {}):
            good = isinstance(result, (list, tuple)) and all(
                isinstance(c, type) and issubclass(c, Backend) and isinstance(getattr(c, "name", None), str)
                and isinstance(getattr(c, "device_type", None), str) for c in result)
            if not good:
                raise self._fault(plugin, f"returned {type(result).__name__} ({result!r:.120}) from intelrt_backends; "
                                          "expected a list of Backend subclasses (intelrt.plugin.Backend, with str "
                                          "class attributes name and device_type) or None.")
            classes += [(plugin, cls) for cls in result]
        return classes

    def detect(self, env: Mapping[str, str]) -> list[Backend]:
        """Every contributed backend, detected in ``env`` (``detect`` may touch a driver: always under the
        time limit), its status naming the plugin that contributed it."""
        found: list[Backend] = []
        for plugin, cls in self.backend_classes():
            status = self._run(plugin, f"{cls.__name__}.detect", cls.detect, env, probing=True)
            if not isinstance(status, BackendStatus) or status.name != cls.name:
                raise self._fault(plugin, f"returned {status!r:.120} from {cls.__name__}.detect; expected a "
                                          f"BackendStatus named {cls.name!r}")
            found.append(cls(replace(status, plugin=plugin)))
        return found

    # -- decisions ---------------------------------------------------------------------------
    def decide(self, concern: Concern, backend: Backend, s: Situation) -> PlannedDecision | None:
        """One decision: a third-party plugin's selection hook first (firstresult), else — for a
        forced option that is a value by itself — the user's value, which the backend (then the generic
        rule) may refuse or endorse, else the backend's proposal, else the generic rule's.
        ``None``: nobody decided a concern that may stay undecided."""
        assert concern.hook is not None
        forced = concern.forced(s.request)
        kwargs = {"backend": backend, "request": s.request, "model": s.model, "env": s.env, "decided": s.decided}
        for plugin, answer in self._hook(concern.hook, kwargs):
            decision = self._decision(concern, plugin, concern.hook, answer)
            self._check_answer(concern, backend, plugin, decision, s)
            return self._planned(concern, plugin, decision, s, forced)
        if forced:
            value = concern.forced_value(s.request, s.decided, backend.compiler)
            if value is not PROPOSE:
                return self._endorsed(concern, backend, value, s)
        calls = CALLS[concern.name]
        plugin, what = backend.plugin, f"{type(backend).__name__}.select_{concern.name}"
        answer = self._run(plugin, what, calls.select, backend, s)
        if answer is None:
            # the generic rule; its answer from what the backend declares is the backend's decision
            plugin = backend.plugin if GENERIC.derives(concern.name, backend) else GENERIC_PLUGIN
            what = f"{GENERIC_PLUGIN}.select_{concern.name}"
            answer = calls.generic(backend, s)
            if self.tracing:
                trace_log.debug("%s <- %s returned %r", what, plugin, answer)
        if answer is None:
            if not concern.required:
                return None
            raise PlanError(f"no plugin decided {concern.name} for backend {backend.name!r}; its plugin may be "
                            "incomplete (see `intelrt plugins`)")
        return self._planned(concern, plugin, self._decision(concern, plugin, what, answer), s, forced)

    def _check_answer(self, concern: Concern, backend: Backend, plugin: str, decision: Decision, s: Situation) -> None:
        """A third-party plugin's value passes the checks a value the user forced passes (the backend's
        ``check_<concern>``, then the generic rule's): a value the backend refuses is the plugin's fault,
        named now rather than as a failure of the model's files when it loads."""
        calls = CALLS[concern.name]
        if decision.value is None or calls.check is None or calls.generic_check is None:
            return
        try:
            if self._run(backend.plugin, f"{type(backend).__name__}.check_{concern.name}", calls.check, backend,
                         decision.value, s) is None:
                calls.generic_check(backend, decision.value, s)
        except PlanError as exc:
            raise self._fault(plugin, f"chose {concern.name} {decision.value!r:.80} in {concern.hook}, which backend "
                                      f"{backend.name!r} refuses: {exc}. Report it to the plugin's authors, or skip "
                                      f"the plugin with {BLOCK_VAR}={plugin}.") from None

    def _endorsed(self, concern: Concern, backend: Backend, value: Any, s: Situation) -> PlannedDecision:
        """The user's forced value, checked by the backend, then (when it says nothing) the generic rule."""
        calls, check = CALLS[concern.name], f"check_{concern.name}"
        if calls.check is None or calls.generic_check is None:
            raise TypeError(f"concern {concern.name!r} takes a forced value but declares no check")
        plugin = backend.plugin
        endorsement = self._run(plugin, f"{type(backend).__name__}.{check}", calls.check, backend, value, s)
        if endorsement is None:
            plugin = GENERIC_PLUGIN
            endorsement = calls.generic_check(backend, value, s) or Endorsement()
        if not isinstance(endorsement, Endorsement):
            raise self._fault(plugin, f"returned {endorsement!r:.120} from {check}; expected an Endorsement or None")
        off = isinstance(value, CompileChoice) and not value.enabled or isinstance(value, KernelChoice) and not \
            value.use_kernels
        reason = ("turned off by the user" if off else USERS) + (f"; {endorsement.reason}" if endorsement.reason else "")
        return PlannedDecision(concern.name, value, reason, plugin, True, endorsement.claim, endorsement.notes)

    def _planned(self, concern: Concern, plugin: str, decision: Decision, s: Situation,
                 forced: bool) -> PlannedDecision:
        """A proposal checked against what the user forced, and said to be theirs when forced."""
        if not concern.keeps(s.request, decision.value):
            wanted = ", ".join(f"{o}={getattr(s.request, o)!r}" for o in concern.options if s.request.is_forced(o))
            shown = f"{decision.value!r}" if concern.verbatim else f"{concern.name}={decision.value}"
            raise PlanError(f"{self.describe(plugin)} changed your {wanted} to {shown}; intelrt never overrides what "
                            f"you set. Report it to the plugin's authors, or block the plugin with {BLOCK_VAR}.")
        reason = decision.reason
        if forced and not reason.startswith(USERS):
            reason = f"{USERS}; {reason}"
        return PlannedDecision(concern.name, decision.value, reason, plugin, forced, decision.claim, decision.notes)

    def _decision(self, concern: Concern, plugin: str, what: str, answer: object) -> Decision:
        """An answer checked: a ``Decision`` whose value is the concern's payload (a plugin's dict with
        the payload's keys converted to it), or plain JSON for plain concerns."""
        if not isinstance(answer, Decision):
            raise self._fault(plugin, f"returned {type(answer).__name__} ({answer!r:.120}) from {what}; expected a "
                                      "Decision or None.")
        value, payload = answer.value, concern.payload
        if payload is None:
            if isinstance(value, Payload):
                raise self._fault(plugin, f"returned a {type(value).__name__} as the value of its Decision from "
                                          f"{what}; expected a plain JSON value.")
            return answer
        if value is None or isinstance(value, payload):
            return answer
        if not isinstance(value, Mapping):
            raise self._fault(plugin, f"returned {type(value).__name__} {value!r:.80} as the value of its Decision "
                                      f"from {what}; expected a {payload.__name__} (or None).")
        try:
            return replace(answer, value=payload.from_dict(value))
        except TypeError as exc:
            raise self._fault(plugin, f"returned from {what} a value that is not a {payload.__name__}: {exc}") from None

    # -- environment, launch, training, doctor ----------------------------------------------------
    def setup_env(self, backend: Backend, s: Situation) -> list[tuple[str, EnvVar | Finding]]:
        """The backend's ``run_environment``, then every plugin's ``intelrt_setup_env``."""
        return _secrets_kept(self._own(backend, backend.run_environment, (EnvVar, Finding), s)
                             + self._collect("intelrt_setup_env", (EnvVar, Finding), backend=backend,
                                             request=s.request, env=s.env))

    def launch_env(self, backend: Backend, plan: Plan, nproc: int, env: Mapping[str, str]
                   ) -> list[tuple[str, EnvVar | Finding]]:
        """The backend's ``launch_environment``, then every plugin's ``intelrt_launch_env``."""
        return _secrets_kept(self._own(backend, backend.launch_environment, (EnvVar, Finding), plan, nproc, env)
                             + self._collect("intelrt_launch_env", (EnvVar, Finding), backend=backend, plan=plan,
                                             nproc=nproc, env=env))

    def written_by_stack(self, backend: Backend, env: Mapping[str, str]) -> frozenset[str]:
        """The names of ``env``'s variables the backend's vendor stack wrote (``Backend.written_by_stack``)."""
        names = self._run(backend.plugin, f"{type(backend).__name__}.written_by_stack", backend.written_by_stack, env)
        if isinstance(names, str) or not all(isinstance(n, str) for n in names or ()):
            raise self._fault(backend.plugin, f"returned {names!r:.80} from written_by_stack; expected variable names")
        return frozenset(names or ())

    def training_arguments(self, backend: Backend, plan: Plan, overrides: Mapping[str, Any]
                           ) -> list[tuple[str, Setting]]:
        """Every plugin's ``intelrt_training_arguments``, the backend's ``training_arguments``, then the
        generic keywords — in the order a keyword's first answer wins."""
        hooks = self._collect("intelrt_training_arguments", (Setting,), backend=backend, plan=plan, overrides=overrides)
        own = self._own(backend, backend.training_arguments, (Setting,), plan, overrides)  # its refusals come first
        return hooks + own + [(GENERIC_PLUGIN, item) for item in GENERIC.training_arguments(backend, plan, overrides)]

    def diagnose(self, backends: Sequence[Backend], env: Mapping[str, str], probe: bool = False
                 ) -> list[tuple[str, Finding]]:
        """Each backend's ``diagnose``, then every plugin's ``intelrt_diagnose``."""
        own = [item for backend in backends for item in self._own(backend, backend.diagnose, (Finding,), env, probe)]
        return own + self._collect("intelrt_diagnose", (Finding,), backends=[b.status for b in backends], env=env,
                                   probe=probe)

    def acquire_device(self, backend: Backend, plan: Plan) -> None:
        """The backend takes this process's device for ``plan`` (``Backend.acquire_device``)."""
        self._run(backend.plugin, f"{type(backend).__name__}.acquire_device", backend.acquire_device, plan)

    def compile_wrapper(self, backend: Backend, compile_fn: Callable[..., Any]) -> Callable[..., Any] | None:
        """The backend's process-wide ``torch.compile`` replacement, or ``None``."""
        wrapper = self._run(backend.plugin, f"{type(backend).__name__}.compile_wrapper", backend.compile_wrapper,
                            compile_fn)
        if wrapper is not None and not callable(wrapper):
            raise self._fault(backend.plugin, f"returned {wrapper!r:.80} from compile_wrapper; expected a callable")
        return wrapper

    def attention_implementation(self, backend: Backend, name: str
                                 ) -> tuple[Callable[..., Any], Callable[..., Any] | None] | None:
        """The backend's attention function (and mask function) for attention ``name``, or ``None``."""
        what = f"{type(backend).__name__}.attention_implementation"
        found = self._run(backend.plugin, what, backend.attention_implementation, name)
        if found is None:
            return None
        if not (isinstance(found, tuple) and len(found) == 2 and callable(found[0])
                and (found[1] is None or callable(found[1]))):
            raise self._fault(backend.plugin, f"returned {found!r:.80} from attention_implementation; expected "
                                              "(attention function, mask function or None)")
        return found

    def graph_capturer(self, backend: Backend, kind: str) -> Callable[..., Any] | None:
        """The backend's capturer of the plan's device graphs ``kind``, or ``None`` when they are not
        the backend's own (:attr:`~intelrt.hooks.backend.Backend.graph_kind`) or it builds none."""
        what = f"{type(backend).__name__}.graph_capturer"
        if takes_graph_kind(backend):  # intelrt 0.1's graph_capturer(kind), deprecated in 0.2
            warnings.warn(f"{what}(kind) is deprecated: declare the class attribute graph_kind = {kind!r} and "
                          "define graph_capturer(self) without arguments (docs/plugin-api.md); the old form stops "
                          "working in intelrt 0.3", DeprecationWarning, stacklevel=2)
            capturer = self._run(backend.plugin, what, backend.graph_capturer, kind)
        elif kind != backend.graph_kind:
            return None
        else:
            capturer = self._run(backend.plugin, what, backend.graph_capturer)
        if capturer is not None and not callable(capturer):
            raise self._fault(backend.plugin, f"returned {capturer!r:.80} from graph_capturer; expected a callable")
        return capturer

    def enabled(self) -> list[PluginRecord]:
        return [r for r in self.records if r.status == "enabled"]


def takes_graph_kind(backend: Backend) -> bool:
    """Whether ``backend`` overrides ``graph_capturer`` in intelrt 0.1's form, taking the graph kind."""
    parameters = inspect.signature(backend.graph_capturer).parameters.values()
    return any(p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD) for p in parameters)


def _secrets_kept(items: list[tuple[str, EnvVar | Finding]]) -> list[tuple[str, EnvVar | Finding]]:
    """A variable a plugin sets under a secret's name (``VENDOR_API_KEY``) holds a secret: its value is
    masked in every output from now on (:mod:`intelrt.support.redaction`), as the user's own are."""
    for _, item in items:
        if isinstance(item, EnvVar) and is_secret_name(item.name):
            register_secret(item.value)
    return items


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


__all__ = ["PluginHost", "PluginRecord", "get_host", "reset_host", "takes_graph_kind"]
