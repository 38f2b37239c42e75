"""The conformance checks: call a plugin's hooks and its backends' methods the way intelrt does, on
simulated machines, and record every rule it breaks.

Each hook implementation of the plugin under test, and each method its backend classes override,
is called directly (so a violation is attributed to it, not to whichever plugin answered first)
with the arguments the host would pass, and the plugin is also planned with for real, next to
every other installed plugin, so the checks see what a user would see. What a hook or a method
must return is read from its annotation in the contract (``hookspecs.py``, ``Backend``).
"""

from __future__ import annotations

import collections.abc
import importlib
import json
import os
import subprocess
import sys
import tempfile
import types
import typing
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from importlib import metadata
from pathlib import Path
from types import ModuleType
from typing import Any

import pluggy

from ...errors import IntelrtError, PluginError
from ...hooks import hookspecs
from ...hooks.backend import Backend, Situation
from ...hooks.concerns import CONCERNS, Decided
from ...hooks.payloads import CompileChoice, Payload
from ...hooks.plan import Plan
from ...hooks.request import Request
from ...hooks.types import BackendStatus, Decision, EnvVar, Finding, Setting
from ...host.manager import HOOK_NAMES, PluginHost, takes_graph_kind
from ...host.settings import ALLOW_VAR, BLOCK_VAR, ENTRY_POINT_GROUP
from ...planning.detection import detect_backends
from ...planning.model_source import resolve_model
from ...planning.planner import make_plan
from .models import write_models
from .report import Report
from .scenarios import Scenario, default_scenarios

#: Modules a plugin must not import when it is imported (SPEC C3): the host imports every
#: installed plugin for ``intelrt plugins``, which must stay fast.
HEAVY_MODULES = ("torch", "transformers", "accelerate", "habana_frameworks", "intel_extension_for_pytorch",
                 "bitsandbytes", "kernels", "peft", "datasets", "triton", "deepspeed")
#: Hooks and backend methods that report rather than decide: they must not raise at all.
NEVER_RAISE = ("intelrt_diagnose", "detect", "diagnose")
#: Selection hook (and backend ``select_``/``check_`` method) → the concern it decides (the registry).
SELECTION = {c.hook: c for c in CONCERNS if c.hook is not None}
CONCERN_OF_METHOD = {f"{kind}_{c.name}": c for c in CONCERNS for kind in ("select", "check")
                     if hasattr(Backend, f"{kind}_{c.name}")}
#: The backend methods a plugin may override (every public callable of the contract's Backend).
BACKEND_METHODS = tuple(name for name, value in vars(Backend).items()
                        if not name.startswith("_") and (callable(value) or isinstance(value, classmethod)))
USER_VALUE = "set-by-the-user"
_WEAK_REASONS = {"todo", "tbd", "n/a", "none", "ok", "because", "reason", "default", "auto"}


@dataclass
class _Plugin:
    name: str
    obj: object
    distribution: str | None
    installed: bool
    """Discoverable through the ``intelrt`` entry-point group (allow/block lists apply)."""
    import_code: str | None
    """Python that imports the plugin in a fresh interpreter, or None when it cannot be."""


def installed_plugin_names() -> list[str]:
    """Names of every plugin installed in the ``intelrt`` entry-point group."""
    return sorted({ep.name for ep in metadata.entry_points(group=ENTRY_POINT_GROUP)})


def _resolve(spec: object, name: str | None, report: Report) -> _Plugin | None:
    if not isinstance(spec, str):
        module_name = getattr(spec, "__name__", None)
        importable = isinstance(spec, ModuleType) and module_name in sys.modules and getattr(spec, "__file__", None)
        plugin_name = name or str(module_name or type(spec).__name__).rsplit(".", 1)[-1]
        code = f"import importlib; importlib.import_module({module_name!r})" if importable else None
        return _Plugin(plugin_name, spec, None, False, code)
    for ep in metadata.entry_points(group=ENTRY_POINT_GROUP):
        dist = ep.dist.name if ep.dist is not None else None
        if spec in (ep.name, dist):
            try:
                obj = ep.load()
            except Exception as exc:  # noqa: BLE001 - the violation names the cause
                report.add("loads", f"entry point {ep.name} = {ep.value} failed to import: {type(exc).__name__}: {exc}")
                return None
            code = ("from importlib import metadata; "
                    f"next(e for e in metadata.entry_points(group={ENTRY_POINT_GROUP!r}) if e.name == {ep.name!r}).load()")
            return _Plugin(name or ep.name, obj, dist, True, code)
    try:
        module = importlib.import_module(spec)
    except Exception as exc:  # noqa: BLE001 - the violation names the cause
        report.add("loads", f"no installed plugin is named {spec!r} (entry-point group {ENTRY_POINT_GROUP!r}), and "
                            f"importing it as a module failed: {type(exc).__name__}: {exc}")
        return None
    return _Plugin(name or spec.rsplit(".", 1)[-1], module, None, False,
                   f"import importlib; importlib.import_module({spec!r})")


def _base_env() -> dict[str, str]:
    """This process's environment without the plugin and backend switches (the checks set those)."""
    switches = (ALLOW_VAR, BLOCK_VAR, "INTELRT_BACKEND")
    return {k: v for k, v in os.environ.items() if k not in switches}


# -- result checks ----------------------------------------------------------------------------

def _return_annotation(label: str) -> Any:
    """What the contract says ``label`` (a hook, or ``Class.method`` of a backend) returns."""
    name = label.rsplit(".", 1)[-1]
    target = getattr(Backend, name) if "." in label else getattr(hookspecs, label)
    namespace = {"Plan": Plan, "Situation": Situation, "Backend": Backend, "Decided": Decided}
    return typing.get_type_hints(getattr(target, "__func__", target), localns=namespace)["return"]


def conforms(value: Any, annotation: Any) -> bool:
    """Whether ``value`` is of the annotated type (unions, sequences, callables, ``type[X]``)."""
    origin, args = typing.get_origin(annotation), typing.get_args(annotation)
    if annotation is Any:
        return True
    if annotation is type(None):
        return value is None
    if origin in (typing.Union, types.UnionType):
        return any(conforms(value, a) for a in args)
    if origin in (collections.abc.Sequence, list, tuple):
        return isinstance(value, (list, tuple)) and all(conforms(v, args[0]) for v in value)
    if origin is collections.abc.Callable:
        return callable(value)
    if origin is type:
        return isinstance(value, type) and issubclass(value, args[0])
    return isinstance(value, origin or annotation)


def _describe(annotation: Any) -> str:
    text = str(annotation).replace("collections.abc.", "").replace("intelrt.hooks.types.", "")
    return text.replace("intelrt.hooks.backend.", "").replace("intelrt.hooks.", "")


def _valid_type(label: str, result: Any) -> str | None:
    annotation = _return_annotation(label)
    if not conforms(result, annotation):
        return f"returned {type(result).__name__} ({result!r:.100}); expected {_describe(annotation)}"
    concern = SELECTION.get(label) or CONCERN_OF_METHOD.get(label.rsplit(".", 1)[-1] if "." in label else "")
    if isinstance(result, Decision) and concern is not None:
        return _valid_value(concern.name, concern.payload, result.value)
    return None


def _valid_value(name: str, payload: type[Payload] | None, value: Any) -> str | None:
    """A decision's value fits its concern: plain JSON, or the concern's payload (a dict with the
    payload's keys is accepted, as the host converts it)."""
    if payload is None:
        return (f"returned a Decision holding a {type(value).__name__}; {name} takes a plain JSON "
                "value") if isinstance(value, Payload) else None
    if value is None or isinstance(value, payload):
        return None
    if isinstance(value, Mapping):
        try:
            payload.from_dict(value)
        except TypeError as exc:
            return f"returned a Decision whose value is not a {payload.__name__}: {exc}"
        return None
    return f"returned a Decision holding {type(value).__name__} ({value!r:.80}); expected a {payload.__name__} or None"


def _weak(reason: str, value: object = None) -> bool:
    text = reason.strip()
    return (len(text) < 8 or len(text.split()) < 2 or text.lower().rstrip(".") in _WEAK_REASONS
            or (value is not None and text == str(value)))


def _items(result: Any) -> list[Any]:
    if result is None:
        return []
    return list(result) if isinstance(result, (list, tuple)) else [result]


def _check_reasons(report: Report, hook: str, result: Any, scenario: str) -> None:
    for item in _items(result):
        if isinstance(item, Decision) and _weak(item.reason, item.value):
            report.add("reasons", f"Decision {item.value!r:.60} gives the reason {item.reason!r}, which does not "
                                  "say why", hook, scenario)
        elif isinstance(item, (EnvVar, Setting)) and _weak(item.reason, item.value):
            report.add("reasons", f"{type(item).__name__} {item.name} gives the reason {item.reason!r}, which does "
                                  "not say why", hook, scenario)
        elif isinstance(item, BackendStatus) and _weak(item.reason):
            report.add("reasons", f"backend {item.name!r} gives the reason {item.reason!r}, which does not say "
                                  "why it is (un)available", hook, scenario)
        elif isinstance(item, Finding) and item.severity != "info" and (
                not item.detail.strip() or not item.fix.strip()):
            report.add("reasons", f"{item.severity} finding {item.title!r} needs a detail and a fix a user can act on",
                       hook, scenario)


class _Caller:
    """Calls one plugin's hook implementations, and the methods its backend classes override,
    directly; checks every answer."""

    def __init__(self, plugin: _Plugin, report: Report) -> None:
        self.report = report
        pm = pluggy.PluginManager(hookspecs.PROJECT)
        pm.add_hookspecs(hookspecs)
        pm.register(plugin.obj, name=plugin.name)
        self.impls = {hook: impl for hook in HOOK_NAMES
                      for impl in getattr(pm.hook, hook).get_hookimpls() if impl.plugin_name == plugin.name}
        self.skipped: set[str] = set()
        self.classes: list[type[Backend]] = []
        ok, contributed = self.call("intelrt_backends", "start")
        if ok and contributed:
            self.classes = [c for c in contributed if isinstance(c, type) and issubclass(c, Backend)]
        methods = [f"{cls.__name__}.{m}" for cls in self.classes for m in self.overridden(cls)]
        report.hooks = tuple(sorted(self.impls)) + tuple(methods)

    @staticmethod
    def overridden(cls: type[Backend]) -> list[str]:
        """The contract's methods ``cls`` implements itself (``detect`` always)."""
        return [m for m in BACKEND_METHODS if getattr(cls, m) is not getattr(Backend, m)]

    def owns(self, backend: Backend) -> bool:
        return type(backend) in self.classes

    def has(self, hook: str) -> bool:
        return hook in self.impls

    def call(self, hook: str, scenario: str, **kwargs: Any) -> tuple[bool, Any]:
        """Call a hook implementation; return (answered without refusing, result); record violations."""
        impl = self.impls.get(hook)
        if impl is None:
            return False, None
        missing = [a for a in impl.argnames if a not in kwargs]
        if missing:
            if hook not in self.skipped:
                self.skipped.add(hook)
                self.report.notes.append(f"{hook}: not exercised, the suite does not know argument(s) {missing}")
            return False, None
        return self._checked(hook, hook, scenario, impl.function, *[kwargs[a] for a in impl.argnames])

    def method(self, backend: Backend | type[Backend], name: str, scenario: str, *args: Any) -> tuple[bool, Any]:
        """Call a backend method the class overrides (``None`` answers otherwise)."""
        cls = backend if isinstance(backend, type) else type(backend)
        if name not in self.overridden(cls):
            return False, None
        return self._checked(f"{cls.__name__}.{name}", name, scenario, getattr(backend, name), *args)

    def _checked(self, label: str, kind: str, scenario: str, function: Callable[..., Any], *args: Any
                 ) -> tuple[bool, Any]:
        before = dict(os.environ)
        try:
            result = function(*args)
        except IntelrtError as exc:
            if kind in NEVER_RAISE:
                self.report.add("raises", f"raised {type(exc).__name__}: {exc}; report problems as results "
                                          "(available=False with the reason, or a Finding)", label, scenario)
            return False, None
        except Exception as exc:  # noqa: BLE001 - the violation names it
            self.report.add("raises", f"raised {type(exc).__name__}: {exc} — refuse with an intelrt error "
                                      "(e.g. PlanError) that says what to do, or return None", label, scenario)
            return False, None
        finally:
            changed = sorted(k for k in set(before) | set(os.environ) if before.get(k) != os.environ.get(k))
            if changed:
                self.report.add("environ", f"wrote os.environ ({', '.join(changed)}); return EnvVar items "
                                           "instead and let intelrt apply them", label, scenario)
                os.environ.clear()
                os.environ.update(before)
        if result is None:
            return True, None
        problem = _valid_type(label, result)
        if problem:
            self.report.add("result-types", problem, label, scenario)
            return False, None
        self.report.answered.add(label)
        _check_reasons(self.report, label, result, scenario)
        return True, result


def _rule_of(exc: PluginError) -> str:
    """A hook that raised breaks ``raises``; one that returned the wrong thing, ``result-types``."""
    return "raises" if exc.__cause__ is not None else "result-types"


def _plan(request: Any, env: Mapping[str, str], host: PluginHost, model: Any, plugin: str, report: Report,
          scenario: str, rule: str | None = None) -> Any:
    """Plan with every plugin; a failure of the plugin under test is a violation, a refusal is not."""
    before = dict(os.environ)
    try:
        return make_plan(request, env=env, host=host, model=model)
    except PluginError as exc:
        if exc.plugin == plugin:
            report.add(rule or _rule_of(exc), f"planning {request.backend} failed: {exc}", None, scenario)
        else:
            report.notes.append(f"{scenario}: another plugin failed while planning: {exc}")
        return None
    except IntelrtError:
        return None  # a refusal with a message is allowed
    finally:
        if dict(os.environ) != before:
            changed = sorted(k for k in set(before) | set(os.environ) if before.get(k) != os.environ.get(k))
            report.add("environ", f"planning with the plugin wrote os.environ ({', '.join(changed)}); hooks must "
                       "return EnvVar items instead", None, scenario)
            os.environ.clear()
            os.environ.update(before)


def _variants(backend: Backend) -> Iterator[tuple[str, dict[str, Any]]]:
    yield "auto", {}
    yield "forced", {"dtype": "float32", "attention": "eager", "compile": "none"}
    forced: dict[str, Any] = {"dtype": "bfloat16", "attention": "sdpa"}
    if backend.ranks_are_devices and backend.devices:
        forced["devices"] = [0]
    yield "forced+devices" if "devices" in forced else "forced-2", forced


def _check_env_items(report: Report, hook: str, items: Sequence[Any], devices_asked: bool, scenario: str) -> None:
    for item in items:
        if isinstance(item, EnvVar) and item.overwrite_user and not devices_asked:
            report.add("user-env", f"EnvVar {item.name} has overwrite_user=True although the user asked for no "
                                   "device selection in this call; a value the user set must win", hook, scenario)


def _check_forced(report: Report, hook: str, request: Any, decision: Decision, scenario: str) -> None:
    declared = SELECTION[hook]
    option = declared.option
    if declared.verbatim and option and request.is_forced(option) and decision.value != getattr(request, option):
        report.add("forced", f"the user forced {option}={getattr(request, option)!r} and the plugin answered "
                             f"{decision.value!r}; return it unchanged, None, or raise PlanError", hook, scenario)
    value = decision.value
    compiled = CompileChoice.from_dict(value) if isinstance(value, Mapping) else value
    if declared.name == "compile" and request.compile == "none" and isinstance(compiled, CompileChoice) \
            and compiled.enabled:
        report.add("forced", "the user turned compile off (compile='none') and the plugin enabled it", hook, scenario)


def _exercise(caller: _Caller, plugin: _Plugin, report: Report, host: PluginHost, without: PluginHost,
              env: dict[str, str], backend: Backend, models: Sequence[Any], scenario: str) -> None:
    """Plan on ``backend`` for every model and request variant, asking the plugin's hooks — and, when
    ``backend`` is one of the plugin's, its methods — on each plan's situation."""
    def compile_fn(model: Any = None, **kwargs: Any) -> Any:
        return model

    ours = caller.owns(backend)
    for info in models:
        for variant, options in _variants(backend):
            where = f"{scenario}, backend {backend.name}, model {info.model_type}, {variant} request"
            request = Request.build(info.local_dir or info.source, backend=backend.name, **options)
            devices_asked = request.devices is not None
            bare = Situation(request, info, env)
            ok, items = caller.call("intelrt_setup_env", where, backend=backend, request=request, env=env)
            _check_env_items(report, "intelrt_setup_env", _items(items), devices_asked, where)
            if ours:
                own_ok, own = caller.method(backend, "run_environment", where, bare)
                ok, items = ok or own_ok, _items(items) + _items(own)
                _check_env_items(report, f"{type(backend).__name__}.run_environment", _items(own), devices_asked,
                                 where)
            plan = _plan(request, env, host, info, plugin.name, report, where)
            if variant == "auto" and ok and info is models[0]:
                _check_user_env(caller, plugin, report, host, env, backend, request, info, _items(items), where)
            if plan is None:
                # Refused. The refusal may be intelrt's own (the plugin changed a forced choice):
                # ask the plugin again on the plan the other plugins make without it.
                plan = _plan(request, env, without, info, plugin.name, report, where)
            if plan is None:
                continue
            values = {name: d.value for name, d in plan.decisions.items()}
            kwargs = {"backend": backend, "request": request, "model": info, "env": env, "plan": plan,
                      "nproc": 2, "backends": plan.detected}
            for concern in CONCERNS:
                if concern.hook is None:
                    continue
                earlier = Decided.of({k: v for k, v in values.items() if k != concern.name})
                _, decision = caller.call(concern.hook, where, decided=earlier, **kwargs)
                if isinstance(decision, Decision):
                    _check_forced(report, concern.hook, request, decision, where)
                if not ours:
                    continue
                s = Situation(request, info, env, earlier)
                caller.method(backend, f"select_{concern.name}", where, s)
                if concern.name in plan.decisions and plan.decisions[concern.name].forced \
                        and hasattr(Backend, f"check_{concern.name}"):
                    caller.method(backend, f"check_{concern.name}", where, plan.decisions[concern.name].value, s)
            if variant == "auto":
                _, items = caller.call("intelrt_launch_env", where, **kwargs)
                _check_env_items(report, "intelrt_launch_env", _items(items), devices_asked, where)
                if ours:
                    _, own = caller.method(backend, "launch_environment", where, plan, 2, env)
                    _check_env_items(report, f"{type(backend).__name__}.launch_environment", _items(own),
                                     devices_asked, where)
                    caller.method(backend, "compile_wrapper", where, compile_fn)
                    if takes_graph_kind(backend):  # intelrt 0.1's form, deprecated: still checked as it runs
                        caller.method(backend, "graph_capturer", where, backend.graph_kind or backend.device_type)
                    else:
                        caller.method(backend, "graph_capturer", where)
                _check_training_arguments(caller, report, backend, plan, kwargs, where, ours)


def _check_user_env(caller: _Caller, plugin: _Plugin, report: Report, host: PluginHost, env: dict[str, str],
                    backend: Backend, request: Any, info: Any, items: list[Any], where: str) -> None:
    """Plan again with the plugin's variables already set by the user: the user's values must stay."""
    wanted = [i for i in items if isinstance(i, EnvVar) and i.name not in env]
    if not wanted:
        return
    user_env = {**env, **{var.name: USER_VALUE for var in wanted}}
    again_where = where + " (variables set by the user)"
    _, again = caller.call("intelrt_setup_env", again_where, backend=backend, request=request, env=user_env)
    _check_env_items(report, "intelrt_setup_env", _items(again), False, again_where)
    if caller.owns(backend):
        _, own = caller.method(backend, "run_environment", again_where, Situation(request, info, user_env))
        _check_env_items(report, f"{type(backend).__name__}.run_environment", _items(own), False, again_where)
    plan = _plan(request, user_env, host, info, plugin.name, report, again_where, "user-env")
    if plan is None:
        return
    for setting in plan.env:
        if setting.name in {v.name for v in wanted} and setting.value != USER_VALUE:
            report.add("user-env", f"the user set {setting.name}={USER_VALUE!r} and the plan gives the run "
                                   f"{setting.name}={setting.value!r} ({setting.action} by {setting.plugin})",
                       "intelrt_setup_env", where)


def _check_training_arguments(caller: _Caller, report: Report, backend: Backend, plan: Plan, kwargs: dict[str, Any],
                              where: str, ours: bool) -> None:
    """The plugin's training keywords, asked again with each of them set by the user: the user's win."""
    asks: list[tuple[str, Callable[[dict[str, Any], str], tuple[bool, Any]]]] = [
        ("intelrt_training_arguments",
         lambda overrides, at: caller.call("intelrt_training_arguments", at, overrides=overrides, **kwargs))]
    if ours:
        asks.append((f"{type(backend).__name__}.training_arguments",
                     lambda overrides, at: caller.method(backend, "training_arguments", at, plan, overrides)))
    for label, ask in asks:
        ok, settings = ask({}, where)
        if not ok or not settings:
            continue
        overrides = {s.name: s.value for s in settings}
        _, again = ask(overrides, where + " (user overrides)")
        for s in _items(again):
            if isinstance(s, Setting) and s.name in overrides:
                report.add("forced", f"the user passed {s.name}={overrides[s.name]!r} and the plugin still "
                                     f"contributes {s.name}={s.value!r}; the user's keywords win", label, where)


# -- the parts of the check -----------------------------------------------------------------

def _check_loads(plugin: _Plugin, report: Report) -> bool:
    host = PluginHost(_base_env(), entry_points=False, builtins=False)
    try:
        host.register(plugin.obj, plugin.name, distribution=plugin.distribution or "local")
    except PluginError as exc:
        report.add("loads", str(exc))
        return False
    return True


def _check_import_cost(plugin: _Plugin, report: Report) -> None:
    if plugin.import_code is None:
        report.notes.append("import-cost: the plugin is not an importable module; not checked")
        return
    code = "\n".join([
        "import json, os, sys",
        "before = dict(os.environ)",
        "import intelrt, intelrt.plugin",
        f"heavy = {HEAVY_MODULES!r}",
        "core = [m for m in heavy if m in sys.modules]",
        plugin.import_code,
        "changed = sorted(k for k in set(before) | set(os.environ) if before.get(k) != os.environ.get(k))",
        "print(json.dumps({'core': core, 'heavy': [m for m in heavy if m in sys.modules and m not in core],"
        " 'changed': changed}))",
    ])
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(p for p in sys.path if p and os.path.isdir(p))
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=120)
    if proc.returncode != 0:
        report.add("loads", f"importing the plugin in a fresh interpreter failed: {proc.stderr.strip()[-600:]}")
        return
    found = json.loads(proc.stdout.strip().splitlines()[-1])
    if found["heavy"]:
        report.add("import-cost", f"importing the plugin imports {', '.join(found['heavy'])}; import them inside "
                                  "the hook that needs them")
    if found["changed"]:
        report.add("import-cost", f"importing the plugin changes os.environ ({', '.join(found['changed'])}); "
                                  "return EnvVar items from intelrt_setup_env instead")
    if found["core"]:
        report.notes.append(f"import-cost: intelrt itself imported {found['core']} (not the plugin's fault)")


def _host_with(plugin: _Plugin, env: Mapping[str, str], report: Report, scenario: str) -> PluginHost | None:
    """Every installed plugin, plus the plugin under test when it is not installed."""
    try:
        host = PluginHost(env, on_error="record")
        if not plugin.installed:
            host.register(plugin.obj, plugin.name, distribution="local")
        elif not any(r.name == plugin.name and r.status == "enabled" for r in host.records):
            report.add("loads", f"the host did not enable it: {[r.to_dict() for r in host.records if r.name == plugin.name]}",
                       None, scenario)
            return None
    except IntelrtError as exc:
        report.notes.append(f"{scenario}: could not build a plugin host: {exc}")
        return None
    return host


def _run_scenario(caller: _Caller, plugin: _Plugin, report: Report, scenario: Scenario,
                  models: Sequence[Any], seen_cpu: list[bool]) -> None:
    with scenario.start():
        env = _base_env()
        for cls in caller.classes:
            caller.method(cls, "detect", scenario.name, env)
        host = _host_with(plugin, env, report, scenario.name)
        if host is None:
            return
        try:
            detected = detect_backends(host, env)
        except PluginError as exc:
            if exc.plugin == plugin.name:
                report.add(_rule_of(exc), f"detection failed: {exc}", "detect", scenario.name)
            else:
                report.notes.append(f"{scenario.name}: another plugin failed in detection: {exc}")
            return
        caller.call("intelrt_diagnose", scenario.name, backends=[b.status for b in detected], env=env, probe=False)
        for backend in detected:
            if caller.owns(backend):
                caller.method(backend, "diagnose", scenario.name, env, False)
        without = PluginHost({**env, BLOCK_VAR: plugin.name} if plugin.installed else env, on_error="record")
        for backend in detected:
            if not backend.available:
                continue
            if not caller.owns(backend) and not backend.ranks_are_devices:
                if seen_cpu:
                    continue  # the CPU is the same machine in every scenario: exercise the hooks there once
                seen_cpu.append(True)
            _exercise(caller, plugin, report, host, without, env, backend, models, scenario.name)


def _check_allow_block(plugin: _Plugin, report: Report, scenarios: Sequence[Scenario], models: Sequence[Any]) -> None:
    # Failing alone would only repeat a result-types/raises violation: check it once those pass.
    alone = not report.broken_rules() & {"result-types", "raises"}
    if not alone:
        report.notes.append("allow-block: the 'alone' check waits until result-types and raises pass")
    for scenario in scenarios:
        with scenario.start():
            base = _base_env()
            # Blocked, or not on the allow-list: not loaded, so it reports and decides nothing.
            if plugin.installed:
                cases = [({**base, BLOCK_VAR: plugin.name}, "blocked"), ({**base, ALLOW_VAR: ""}, "not allowed")]
            else:
                cases = [({**base, BLOCK_VAR: plugin.name}, "blocked")]
            for env, expected in cases:
                switch = f"{BLOCK_VAR}={plugin.name}" if BLOCK_VAR in env else f"{ALLOW_VAR}=''"
                host = PluginHost(env, entry_points=plugin.installed, on_error="record")
                if not plugin.installed:
                    host.register(plugin.obj, plugin.name)
                statuses = [r.status for r in host.records if r.name == plugin.name]
                if expected not in statuses or "enabled" in statuses:
                    report.add("allow-block", f"with {switch} the plugin is {statuses}, expected {expected!r}",
                               None, scenario.name)
                    continue
                try:
                    owners = {b.plugin for b in detect_backends(host, env)}
                except IntelrtError:
                    owners = set()
                if plugin.name in owners:
                    report.add("allow-block", f"with {switch} a backend is still reported by the plugin", None,
                               scenario.name)
            if not alone:
                continue
            # Alone: only the built-ins and this plugin. It must not need another plugin to be present.
            env = {**base, ALLOW_VAR: plugin.name} if plugin.installed else base
            where = f"{scenario.name}, every other plugin off"
            try:
                host = PluginHost(env, entry_points=plugin.installed, on_error="record")
                if not plugin.installed:
                    host.register(plugin.obj, plugin.name)
                detected = detect_backends(host, env)
                host.diagnose(detected, env)
            except PluginError as exc:
                if exc.plugin == plugin.name:
                    report.add("allow-block", f"alone, detection or diagnosis failed: {exc}", None, where)
                continue
            others = [r.name for r in host.records if r.status == "enabled" and not r.builtin and r.name != plugin.name]
            if others:
                report.add("allow-block", f"with {ALLOW_VAR}={plugin.name} other plugins were enabled too: {others}",
                           None, where)
            for backend in detected:
                if backend.available:
                    request = Request.build(models[0].local_dir or models[0].source, backend=backend.name)
                    _plan(request, env, host, models[0], plugin.name, report, where, "allow-block")


def _warm_up(model: Any) -> None:
    """Plan once with intelrt's own backends only, leaving the environment as it was: the first plan
    imports transformers' modeling code, and libraries it pulls in may set variables of their own
    (torch's inductor sets ``TORCHINDUCTOR_CACHE_DIR`` when torchao is installed), which must not
    count as the plugin's writes."""
    before = dict(os.environ)
    try:
        make_plan(Request.build(model.local_dir or model.source, backend="cpu"), env=_base_env(),
                  host=PluginHost(_base_env(), entry_points=False), model=model)
    except IntelrtError:
        pass  # a refusal still imported what planning imports
    finally:
        os.environ.clear()
        os.environ.update(before)


def check_plugin(plugin: object, *, name: str | None = None, scenarios: Sequence[Scenario] | None = None,
                 extra_scenarios: Sequence[Scenario] = (), models: Sequence[str | os.PathLike[str]] = (),
                 import_check: bool = True) -> Report:
    """Check that ``plugin`` follows every rule in :data:`RULES`; return the :class:`Report`.

    :param plugin: an installed plugin's entry-point (or distribution) name, a module path, or
        the plugin module/object itself.
    :param name: the name to register it under (default: the entry-point name or module name).
    :param scenarios: machines to plan on (default :func:`default_scenarios`: none, ``xpu:4``,
        ``hpu:8``); ``extra_scenarios`` adds to them — e.g. the simulation of your own runtime.
    :param models: extra model directories to plan for, besides the built-in Qwen3, Gemma 2 and
        BERT configs.
    :param import_check: import the plugin in a fresh interpreter (rule ``import-cost``).
    """
    report = Report(plugin=name or (plugin if isinstance(plugin, str) else str(getattr(plugin, "__name__", "plugin"))))
    report.checked.add("loads")
    resolved = _resolve(plugin, name, report)
    if resolved is None:
        return report
    report.plugin = resolved.name
    if not _check_loads(resolved, report):
        return report
    if import_check:
        _check_import_cost(resolved, report)
        report.checked.add("import-cost")
    caller = _Caller(resolved, report)
    chosen = list(default_scenarios() if scenarios is None else scenarios) + list(extra_scenarios)
    with tempfile.TemporaryDirectory(prefix="intelrt-conformance-") as tmp:
        paths = write_models(Path(tmp)) + [Path(m) for m in models]
        infos = [resolve_model(str(p)) for p in paths]
        _warm_up(infos[0])
        seen_cpu: list[bool] = []
        for scenario in chosen:
            _run_scenario(caller, resolved, report, scenario, infos, seen_cpu)
        report.checked.update({"result-types", "raises", "reasons", "user-env", "environ", "forced"})
        _check_allow_block(resolved, report, chosen, infos)
        report.checked.add("allow-block")
    silent = [h for h in report.hooks if h not in report.answered and h not in caller.skipped]
    if silent:
        report.notes.append(f"never answered (returned None every time): {', '.join(silent)} — add a scenario "
                            "where the plugin's backend is available")
    return report
