"""The conformance checks: call a plugin's hooks the way intelrt does, on simulated machines, and
record every rule it breaks.

Each hook of the plugin under test is called directly (so a violation is attributed to it, not
to whichever plugin answered first) with the arguments the host would pass, and the plugin is
also planned with for real, next to every other installed plugin, so the checks see what a user
would see.
"""

from __future__ import annotations

import importlib
import json
import os
import subprocess
import sys
import tempfile
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from importlib import metadata
from pathlib import Path
from types import ModuleType
from typing import Any

import pluggy

from ...errors import IntelrtError, PluginError
from ...hooks import hookspecs
from ...hooks.payloads import CompileChoice, Payload
from ...hooks.types import BackendStatus, Decision, EnvVar, Finding, Setting
from ...host.manager import PluginHost
from ...host.settings import ALLOW_VAR, BLOCK_VAR, ENTRY_POINT_GROUP
from ...planning.concerns import CONCERNS
from ...planning.detection import detect_backends
from ...planning.model_source import resolve_model
from ...planning.planner import make_plan
from ...planning.request import Request
from .models import write_models
from .report import Report
from .scenarios import Scenario, default_scenarios

#: Modules a plugin must not import when it is imported (SPEC C3): the host imports every
#: installed plugin for ``intelrt plugins``, which must stay fast.
HEAVY_MODULES = ("torch", "transformers", "accelerate", "habana_frameworks", "intel_extension_for_pytorch",
                 "bitsandbytes", "kernels", "peft", "datasets", "triton", "deepspeed")
#: Hooks that report rather than decide: they must not raise at all.
NEVER_RAISE = ("intelrt_detect", "intelrt_diagnose")
#: Selection hook → the concern it decides (the registry: what is verbatim, what the value's type is).
SELECTION = {c.hook: c for c in CONCERNS if c.hook is not None}
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

def _valid_type(hook: str, result: Any) -> str | None:
    shape, types = hookspecs.RESULT_TYPES[hook]
    if shape == "one":
        ok = isinstance(result, types)
        wanted = " or ".join(t.__name__ for t in types)
        if ok and hook in SELECTION:
            return _valid_value(hook, result.value)
    elif shape == "callable":
        ok = callable(result)
        wanted = "a callable"
    else:
        ok = isinstance(result, (list, tuple)) and all(isinstance(r, types) for r in result)
        wanted = "a list of " + " / ".join(t.__name__ for t in types)
    return None if ok else f"returned {type(result).__name__} ({result!r:.100}); expected {wanted} or None"


def _valid_value(hook: str, value: Any) -> str | None:
    """A decision's value fits its concern: plain JSON, or the concern's payload (a dict with the
    payload's keys is accepted, as the host converts it)."""
    payload = SELECTION[hook].payload
    if payload is None:
        return (f"returned a Decision holding a {type(value).__name__}; {SELECTION[hook].name} takes a plain JSON "
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
    """Calls one plugin's hook implementations directly and checks every answer."""

    def __init__(self, plugin: _Plugin, report: Report) -> None:
        self.report = report
        pm = pluggy.PluginManager(hookspecs.PROJECT)
        pm.add_hookspecs(hookspecs)
        pm.register(plugin.obj, name=plugin.name)
        self.impls = {hook: impl for hook in hookspecs.RESULT_TYPES
                      for impl in getattr(pm.hook, hook).get_hookimpls() if impl.plugin_name == plugin.name}
        report.hooks = tuple(sorted(self.impls))
        self.skipped: set[str] = set()

    def has(self, hook: str) -> bool:
        return hook in self.impls

    def call(self, hook: str, scenario: str, **kwargs: Any) -> tuple[bool, Any]:
        """Return (answered without refusing, result); record violations."""
        impl = self.impls.get(hook)
        if impl is None:
            return False, None
        missing = [a for a in impl.argnames if a not in kwargs]
        if missing:
            if hook not in self.skipped:
                self.skipped.add(hook)
                self.report.notes.append(f"{hook}: not exercised, the suite does not know argument(s) {missing}")
            return False, None
        before = dict(os.environ)
        try:
            result = impl.function(*[kwargs[a] for a in impl.argnames])
        except IntelrtError as exc:
            if hook in NEVER_RAISE:
                self.report.add("raises", f"raised {type(exc).__name__}: {exc}; report problems as results "
                                          "(available=False with the reason, or a Finding)", hook, scenario)
            return False, None
        except Exception as exc:  # noqa: BLE001 - the violation names it
            self.report.add("raises", f"raised {type(exc).__name__}: {exc} — refuse with an intelrt error "
                                      "(e.g. PlanError) that says what to do, or return None", hook, scenario)
            return False, None
        finally:
            changed = sorted(k for k in set(before) | set(os.environ) if before.get(k) != os.environ.get(k))
            if changed:
                self.report.add("environ", f"wrote os.environ ({', '.join(changed)}); return EnvVar items "
                                           "instead and let intelrt apply them", hook, scenario)
                os.environ.clear()
                os.environ.update(before)
        if result is None:
            return True, None
        problem = _valid_type(hook, result)
        if problem:
            self.report.add("result-types", problem, hook, scenario)
            return False, None
        self.report.answered.add(hook)
        _check_reasons(self.report, hook, result, scenario)
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


def _variants(backend: BackendStatus) -> Iterator[tuple[str, dict[str, Any]]]:
    yield "auto", {}
    yield "forced", {"dtype": "float32", "attention": "eager", "compile": "none"}
    forced: dict[str, Any] = {"dtype": "bfloat16", "attention": "sdpa"}
    if backend.device_type != "cpu" and backend.devices:
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


def _exercise_backend(caller: _Caller, plugin: _Plugin, report: Report, host: PluginHost, without: PluginHost,
                      env: dict[str, str], backend: BackendStatus, models: Sequence[Any], scenario: str) -> None:
    def compile_fn(model: Any = None, **kwargs: Any) -> Any:
        return model

    for info in models:
        for variant, options in _variants(backend):
            where = f"{scenario}, backend {backend.name}, model {info.model_type}, {variant} request"
            request = Request.build(info.local_dir or info.source, backend=backend.name, **options)
            devices_asked = request.devices is not None
            ok, items = caller.call("intelrt_setup_env", where, backend=backend, request=request, env=env)
            _check_env_items(report, "intelrt_setup_env", _items(items), devices_asked, where)
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
                      "compile_fn": compile_fn, "nproc": 2, "kind": backend.device_type, "backends": plan.detected}
            for hook in caller.impls:
                if hook in SELECTION:
                    decisions = {k: v for k, v in values.items() if k != SELECTION[hook].name}
                    _, decision = caller.call(hook, where, decisions=decisions, **kwargs)
                    if isinstance(decision, Decision):
                        _check_forced(report, hook, request, decision, where)
            if variant == "auto":
                for hook in ("intelrt_wrap_compile", "intelrt_decode_graph"):
                    caller.call(hook, where, **kwargs)
                _, items = caller.call("intelrt_launch_env", where, **kwargs)
                _check_env_items(report, "intelrt_launch_env", _items(items), devices_asked, where)
                _check_training_arguments(caller, report, kwargs, where)


def _check_user_env(caller: _Caller, plugin: _Plugin, report: Report, host: PluginHost, env: dict[str, str],
                    backend: BackendStatus, request: Any, info: Any, items: list[Any], where: str) -> None:
    """Plan again with the plugin's variables already set by the user: the user's values must stay."""
    wanted = [i for i in items if isinstance(i, EnvVar) and i.name not in env]
    if not wanted:
        return
    user_env = {**env, **{var.name: USER_VALUE for var in wanted}}
    _, again = caller.call("intelrt_setup_env", where + " (variables set by the user)", backend=backend,
                           request=request, env=user_env)
    _check_env_items(report, "intelrt_setup_env", _items(again), False, where + " (variables set by the user)")
    plan = _plan(request, user_env, host, info, plugin.name, report, where + " (variables set by the user)", "user-env")
    if plan is None:
        return
    for setting in plan.env:
        if setting.name in {v.name for v in wanted} and setting.value != USER_VALUE:
            report.add("user-env", f"the user set {setting.name}={USER_VALUE!r} and the plan gives the run "
                                   f"{setting.name}={setting.value!r} ({setting.action} by {setting.plugin})",
                       "intelrt_setup_env", where)


def _check_training_arguments(caller: _Caller, report: Report, kwargs: dict[str, Any], where: str) -> None:
    ok, settings = caller.call("intelrt_training_arguments", where, overrides={}, **kwargs)
    if not ok or not settings:
        return
    overrides = {s.name: s.value for s in settings}
    _, again = caller.call("intelrt_training_arguments", where + " (user overrides)", overrides=overrides, **kwargs)
    for s in _items(again):
        if isinstance(s, Setting) and s.name in overrides:
            report.add("forced", f"the user passed {s.name}={overrides[s.name]!r} and the plugin still contributes "
                                 f"{s.name}={s.value!r}; the user's keywords win", "intelrt_training_arguments", where)


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
        caller.call("intelrt_detect", scenario.name, env=env)
        host = _host_with(plugin, env, report, scenario.name)
        if host is None:
            return
        try:
            detected = detect_backends(host, env)
        except PluginError as exc:
            if exc.plugin == plugin.name:
                report.add(_rule_of(exc), f"detection failed: {exc}", "intelrt_detect", scenario.name)
            else:
                report.notes.append(f"{scenario.name}: another plugin failed in detection: {exc}")
            return
        caller.call("intelrt_diagnose", scenario.name, backends=detected, env=env, probe=False)
        without = PluginHost({**env, BLOCK_VAR: plugin.name} if plugin.installed else env, on_error="record")
        for backend in detected:
            if not backend.available:
                continue
            if backend.device_type == "cpu":
                if seen_cpu:
                    continue
                seen_cpu.append(True)
            _exercise_backend(caller, plugin, report, host, without, env, backend, models, scenario.name)


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
