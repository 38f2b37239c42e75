"""Request → Plan: pure; asks the hooks, touches no device and downloads nothing."""

from __future__ import annotations

import os
from collections.abc import Mapping
from typing import Any

from .detection import choose_backend, detect_backends
from .environment import EnvSetting, resolve_env
from .errors import PlanError
from .model_source import ModelInfo, check_safety, resolve_model
from .plan_data import Plan, PlannedDecision
from .plugins import PluginHost, get_host
from .request import AUTO, Request
from .types import BackendStatus, EnvVar, Finding, JSONValue
from .versions import floor_findings

#: Selection hooks in the order they run; later hooks see earlier values in ``decisions``.
SELECTION_HOOKS = (
    ("dtype", "intelrt_select_dtype"),
    ("quantization", "intelrt_select_quantization"),
    ("placement", "intelrt_select_placement"),
    ("attention", "intelrt_select_attention"),
    ("kernels", "intelrt_select_kernels"),
    ("compile", "intelrt_select_compile"),
    ("decode", "intelrt_select_decode"),
    ("batching", "intelrt_select_batching"),
)
#: Concerns whose forced string value a plugin must return unchanged.
VERBATIM = ("dtype", "attention")


def decide_task(request: Request, model: ModelInfo) -> PlannedDecision:
    archs = model.architectures
    if request.task != AUTO:
        return PlannedDecision("task", request.task, "requested by the user", "intelrt", True)
    for arch in archs:
        if arch.endswith(("ForCausalLM", "LMHeadModel", "ForConditionalGeneration")):
            return PlannedDecision("task", "text-generation", f"config.architectures names {arch}", "intelrt", False)
        if arch.endswith("ForSequenceClassification"):
            return PlannedDecision("task", "sequence-classification", f"config.architectures names {arch}",
                                   "intelrt", False)
    if archs:
        return PlannedDecision("task", "feature-extraction", f"{archs[0]} has no generation or classification head",
                               "intelrt", False)
    raise PlanError(f"{model.source}: config.json names no architectures, so the task is unknown; pass "
                    "task='text-generation', 'feature-extraction' or 'sequence-classification'")


def decide_concern(host: PluginHost, concern: str, hook: str, request: Request,
            kwargs: Mapping[str, Any]) -> PlannedDecision:
    result, plugin = host.call_first(hook, **kwargs)
    forced = request.is_forced(concern)
    if result is None or plugin is None:
        raise PlanError(f"no plugin decided {concern} for backend {kwargs['backend'].name!r}; "
                        "its plugin may be incomplete (see `intelrt plugins`)")
    if forced and concern in VERBATIM and result.value != getattr(request, concern):
        raise PlanError(f"{host.describe(plugin)} changed your {concern}={getattr(request, concern)!r} "
                        f"to {result.value!r}; intelrt never overrides what you set. Report it to the "
                        "plugin's authors, or block the plugin with INTELRT_DISABLE_PLUGINS.")
    return PlannedDecision(concern, result.value, result.reason, plugin, forced, result.claim, result.notes)


def decide_all(host: PluginHost, concerns: tuple[tuple[str, str], ...], *, backend: BackendStatus,
               request: Request, model: ModelInfo, env: Mapping[str, str],
               decided: Mapping[str, PlannedDecision] | None = None) -> dict[str, PlannedDecision]:
    """Ask each selection hook in ``concerns`` in order (later hooks see earlier values), then the
    collective backend; ``decided`` holds decisions made before (the task)."""
    decisions: dict[str, PlannedDecision] = dict(decided or {})
    values: dict[str, JSONValue] = {k: d.value for k, d in decisions.items()}
    for concern, hook in concerns:
        kwargs = {"backend": backend, "request": request, "model": model, "env": env, "decisions": dict(values)}
        decisions[concern] = decide_concern(host, concern, hook, request, kwargs)
        values[concern] = decisions[concern].value
    collective, decider = host.call_first("intelrt_select_collective", backend=backend, request=request, env=env)
    if collective is not None and decider is not None:
        decisions["collective"] = PlannedDecision("collective", collective.value, collective.reason, decider,
                                                  False, collective.claim, collective.notes)
    return decisions


def plan_env(host: PluginHost, backend: BackendStatus, request: Request,
             env: Mapping[str, str]) -> tuple[list[EnvSetting], list[Finding]]:
    """What ``intelrt_setup_env`` wants for the run, merged with ``env`` (the user's values win)."""
    wanted: list[tuple[str, EnvVar]] = []
    findings: list[Finding] = floor_findings("warning")
    for plugin, item in host.call_all("intelrt_setup_env", backend=backend, request=request, env=env):
        if isinstance(item, EnvVar):
            wanted.append((plugin, item))
        else:
            findings.append(item)
    settings, env_findings = resolve_env(wanted, env, host.describe)
    return settings, findings + env_findings


def make_plan(request: Request, *, env: Mapping[str, str] | None = None,
              host: PluginHost | None = None, model: ModelInfo | None = None) -> Plan:
    """Build the plan for ``request`` against ``env`` (default: this process's environment)."""
    env = dict(os.environ) if env is None else dict(env)
    host = host or get_host()
    model = model or resolve_model(request.model)
    notes = check_safety(model, trust_remote_code=request.trust_remote_code, allow_pickle=request.allow_pickle)
    if not model.has_tokenizer:
        notes.append("no tokenizer or processor files next to the model: generate() needs token ids")
    detected = detect_backends(host, env)
    backend, backend_reason, backend_forced = choose_backend(detected, request.backend, env)

    settings, findings = plan_env(host, backend, request, env)

    decisions = decide_all(host, SELECTION_HOOKS, backend=backend, request=request, model=model, env=env,
                           decided={"task": decide_task(request, model)})
    return Plan(request=request, model=model, backend=backend, backend_reason=backend_reason,
                backend_forced=backend_forced, decisions=decisions, env=tuple(settings),
                findings=tuple(findings), detected=detected, notes=tuple(notes))


def plan(model: str | os.PathLike[str], *, backend: str = AUTO, devices: object = None, dtype: str = AUTO,
         attention: str = AUTO, kernels: str | bool = AUTO, quantization: str | None = None,
         compile: str | bool = AUTO, task: str = AUTO, batching: str = AUTO, graphs: str | bool = AUTO,
         trust_remote_code: bool = False, allow_pickle: bool = False, strict: bool = False,
         **from_pretrained_kwargs: Any) -> Plan:
    """Decide everything ``load`` would do for ``model``, without touching a device or the network.

    Every argument defaults to ``"auto"`` (intelrt decides); any other value is forced and shows
    as such in the plan. Extra keyword arguments go to ``from_pretrained`` unchanged.
    """
    request = Request.build(model, backend=backend, devices=devices, dtype=dtype, attention=attention,
                            kernels=kernels, quantization=quantization, compile=compile, task=task,
                            batching=batching, graphs=graphs, trust_remote_code=trust_remote_code, allow_pickle=allow_pickle, strict=strict,
                            **from_pretrained_kwargs)
    return make_plan(request)
