"""Request → Plan: pure; asks the host, touches no device, writes no environment, downloads nothing.

The concerns are decided in the order of :data:`~intelrt.hooks.concerns.CONCERNS`, each by the
host (a third-party hook, the chosen backend, or the generic rule; the task by intelrt itself,
from the model's config); later decisions see earlier values. A request without a model (training
arguments, launching) gets a backend-only plan: the same concerns, those that need no model.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Mapping
from dataclasses import replace
from typing import Any

from ..errors import PlanError
from ..hooks.backend import Backend, Situation
from ..hooks.concerns import CONCERNS, Decided
from ..hooks.model import ModelInfo
from ..hooks.options import AUTO
from ..hooks.payloads import DecisionValue, DecodeChoice, QuantizationChoice
from ..hooks.plan import EnvSetting, Plan, PlannedDecision
from ..hooks.request import NO_MODEL, Request
from ..hooks.types import EnvVar, Finding
from ..host.manager import USERS, PluginHost, get_host
from . import tasks
from .architecture import resolve, task_for
from .detection import choose_backend, detect_backends, skipped_plugins
from .diagnosis import floor_findings
from .environment import resolve_env
from .model_source import check_safety, resolve_model

log = logging.getLogger(__name__)

#: Stands in for the model in a backend-only plan: no config, no weights, no tokenizer.
NO_MODEL_INFO = ModelInfo(source=NO_MODEL, local_dir=None, config={}, weight_files=(), has_tokenizer=False)


def decide_task(request: Request, model: ModelInfo) -> PlannedDecision:
    """The task (SPEC T1): the user's, by its canonical name (an alias resolved, an unknown name
    refused with the list), else the first task whose auto classes hold the class the config's
    ``architectures`` names (``planning/tasks.py``, read from the installed transformers)."""
    if request.task != AUTO:
        return PlannedDecision("task", tasks.canonical(request.task), "requested by the user", "intelrt", True)
    found = task_for(model)
    if found is not None:
        return PlannedDecision("task", found[0], found[1], "intelrt", False)
    archs = (model.base or model).architectures
    if archs:
        return PlannedDecision("task", "feature-extraction",
                               f"{archs[0]} is not a class of any of transformers' auto mappings; loaded with "
                               "AutoModel", "intelrt", False)
    raise PlanError(f"{model.source}: config.json names no architectures, so the task is unknown; pass task= one "
                    f"of {', '.join(tasks.load_tasks())}")


def decide_all(host: PluginHost, *, backend: Backend, request: Request, model: ModelInfo,
               env: Mapping[str, str]) -> tuple[dict[str, PlannedDecision], ModelInfo]:
    """Every concern the request calls for, in registry order (later decisions see earlier values);
    and the model with its class resolved once the task is known."""
    decisions: dict[str, PlannedDecision] = {}
    values: dict[str, DecisionValue] = {}
    for concern in CONCERNS:
        if concern.needs_model and not request.has_model:
            continue
        decided: PlannedDecision | None
        if concern.hook is None:
            decided = decide_task(request, model)
            model = replace(model, architecture=resolve(model, str(decided.value)))
        else:
            decided = host.decide(concern, backend, Situation(request, model, env, Decided.of(values)))
        if decided is not None:
            check_class_support(host, decided, model)
            decided = check_warmup(host, decided, request)
            decisions[concern.name] = decided
            values[concern.name] = decided.value
            loaded_in = quantizer_dtype(decisions.get("dtype"), decided)
            if loaded_in is not None:
                decisions["dtype"] = loaded_in
                values["dtype"] = loaded_in.value
    return decisions, model


def quantizer_dtype(dtype: PlannedDecision | None, decision: PlannedDecision) -> PlannedDecision | None:
    """The dtype decision as the quantization just decided leaves it: the dtype its method loads in
    on this backend (``QuantizationChoice.dtype``, what transformers' ``HfQuantizer.update_dtype``
    casts to: AWQ to float16 on CUDA and XPU …), or ``None`` when it leaves the dtype alone.

    The dtype is decided before the quantization (which reads it: bitsandbytes computes in it, and
    the quantizer's cast starts from it, as transformers resolves the dtype before its quantizer
    updates it), and no decision comes between the two, so no other decision saw the dtype it
    replaces. A dtype the user forced and the method changes is refused: transformers would cast it
    with a warning."""
    choice = decision.value
    if dtype is None or decision.name != "quantization" or not isinstance(choice, QuantizationChoice) \
            or choice.dtype is None or choice.dtype == dtype.value:
        return None
    if dtype.forced:
        raise PlanError(f"dtype={dtype.value!r}, but {decision.reason}: transformers loads it in {choice.dtype} there "
                        f"(its quantizer casts the model). Pass dtype={choice.dtype!r}, or leave dtype to intelrt")
    why = decision.reason.removeprefix(f"{USERS}; ")
    return PlannedDecision("dtype", choice.dtype, f"quantization: {why} (transformers' quantizer casts the model to "
                           f"{choice.dtype}; {dtype.value} was chosen before: {dtype.reason})", decision.plugin, False,
                           decision.claim, dtype.notes)


def check_class_support(host: PluginHost, decision: PlannedDecision, model: ModelInfo) -> None:
    """An attention implementation the model's class refuses is a plan error naming the class and who
    chose it (transformers would refuse it at load time, far from the cause)."""
    arch = model.architecture
    if decision.name != "attention" or arch is None or not isinstance(decision.value, str):
        return
    if not arch.supports(decision.value):
        who = "you asked for" if decision.forced else f"{host.describe(decision.plugin)} chose"
        raise PlanError(f"{arch.name} does not support attention={decision.value!r}, which {who}; it supports "
                        f"{', '.join(arch.attention)}. Pass attention= one of those (or leave it to intelrt).")


def check_warmup(host: PluginHost, decision: PlannedDecision, request: Request) -> PlannedDecision:
    """A forced ``warmup`` the decode decision does not give is a plan error naming who decided
    (a plugin that leaves ``DecodeChoice.warmup`` unset gives what its compile and graphs amount
    to); a ``workload`` such a plugin did not weigh is said in a note, not dropped in silence."""
    value = decision.value
    if decision.name != "decode" or not isinstance(value, DecodeChoice) or not value.fast:
        return decision
    if request.warmup != AUTO and value.prepared != request.warmup:
        raise PlanError(f"you asked for warmup={request.warmup!r}, and {host.describe(decision.plugin)} prepares the "
                        f"decode step as {value.prepared!r} ({decision.reason}); leave warmup to intelrt, or report "
                        "it to the plugin's authors")
    if request.workload != AUTO and value.warmup is None:
        note = (f"workload={request.workload!r} is not weighed by {host.describe(decision.plugin)}, which prepares "
                f"the step as {value.prepared!r} whatever the work; warmup= chooses it")
        return replace(decision, notes=(*decision.notes, note))
    return decision


def plan_env(host: PluginHost, backend: Backend, request: Request, model: ModelInfo,
             env: Mapping[str, str]) -> tuple[list[EnvSetting], list[Finding]]:
    """What the backend and the plugins want for the run's environment, merged with ``env`` (the
    user's values win)."""
    tiles = [d for d in request.devices or () if not isinstance(d, int)]
    if tiles and not backend.tile_ids:
        raise PlanError(f"devices={list(request.devices or ())}: {', '.join(map(repr, tiles))} names one tile of a card "
                        f"(card.tile, for Intel GPUs in COMPOSITE mode); the {backend.name} backend takes whole device "
                        "ids, e.g. devices=[0, 2]")
    wanted: list[tuple[str, EnvVar]] = []
    findings: list[Finding] = floor_findings("warning")
    for plugin, item in host.setup_env(backend, Situation(request, model, env)):
        if isinstance(item, EnvVar):
            wanted.append((plugin, item))
        else:
            findings.append(item)
    settings, env_findings = resolve_env(wanted, env, host.describe)
    return settings, findings + env_findings


def make_plan(request: Request, *, env: Mapping[str, str] | None = None,
              host: PluginHost | None = None, model: ModelInfo | None = None) -> Plan:
    """Build the plan for ``request`` against ``env`` (default: this process's environment).

    ``model``: the model's files, when the caller resolved them already (``load`` does, to fetch a
    hub model's config). A request without a model gets a backend-only plan.
    """
    env = dict(os.environ) if env is None else dict(env)
    host = host or get_host()
    notes: list[str] = []
    if request.has_model:
        model = model or resolve_model(request.model)
        notes += check_safety(model, trust_remote_code=request.trust_remote_code, allow_pickle=request.allow_pickle)
        if not (model.has_tokenizer or model.has_processor):
            notes.append("no tokenizer or processor files next to the model: generate() needs token ids")
    else:
        model = NO_MODEL_INFO
        notes.append("backend-only plan: no model was given")
    detected = detect_backends(host, env)
    backend, backend_reason, backend_forced = choose_backend(detected, request.backend, env,
                                                             skipped_plugins(host, env))
    settings, findings = plan_env(host, backend, request, model, env)
    decisions, model = decide_all(host, backend=backend, request=request, model=model, env=env)
    _log_plan(model, detected, backend, backend_reason, decisions)
    return Plan(request=request, model=model, backend=backend, backend_reason=backend_reason,
                backend_forced=backend_forced, decisions=decisions, env=tuple(settings),
                findings=tuple(findings), detected=tuple(b.status for b in detected), notes=tuple(notes))


def _log_plan(model: ModelInfo, detected: tuple[Backend, ...], backend: Backend, reason: str,
              decisions: Mapping[str, PlannedDecision]) -> None:
    """What was decided, at INFO (``intelrt -v``): one line per backend seen and per decision."""
    if not log.isEnabledFor(logging.INFO):
        return
    for status in detected:
        log.info("backend %s: %s (%s)", status.name, "available" if status.available else "unavailable", status.reason)
    log.info("plan for %s: backend %s — %s", model.source, backend.name, reason)
    for d in decisions.values():
        log.info("  %s = %s by %s%s — %s", d.name, d.value, d.plugin, " (forced)" if d.forced else "", d.reason)


def plan(model: str | os.PathLike[str], *,
         # <request option parameters: python -m intelrt.hooks.signature --write>
         backend: str = AUTO, devices: object = None, dtype: str = AUTO, attention: str = AUTO,
         kernels: str | bool = AUTO, quantization: str | None = None, compile: str | bool = AUTO,
         task: str = AUTO, batching: str = AUTO, graphs: str | bool = AUTO,
         attention_kernel: str | bool = AUTO, workload: str = AUTO, warmup: str = AUTO,
         buckets: str | bool = AUTO, sharding: str = AUTO, parallel: str = AUTO,
         trust_remote_code: bool = False, allow_pickle: bool = False, strict: bool = False,
         # </request option parameters>
         **from_pretrained_kwargs: Any) -> Plan:
    """Decide everything ``load`` would do for ``model``, without touching a device or the network.

    Every argument defaults to ``"auto"`` (intelrt decides); any other value is forced and shows
    as such in the plan. The options are described in :data:`intelrt.hooks.request.REQUEST_OPTIONS`
    (``intelrt plan --help`` prints them). Extra keyword arguments go to ``from_pretrained`` unchanged.
    """
    request = Request.build(model,
                            # <request option keywords: python -m intelrt.hooks.signature --write>
                            backend=backend, devices=devices, dtype=dtype, attention=attention,
                            kernels=kernels, quantization=quantization, compile=compile, task=task,
                            batching=batching, graphs=graphs, attention_kernel=attention_kernel,
                            workload=workload, warmup=warmup, buckets=buckets, sharding=sharding,
                            parallel=parallel, trust_remote_code=trust_remote_code,
                            allow_pickle=allow_pickle, strict=strict,
                            # </request option keywords>
                            **from_pretrained_kwargs)
    return make_plan(request)


def plan_backend(*, backend: str = AUTO, devices: object = None, dtype: str = AUTO, compile: str | bool = AUTO,
                 sharding: str = AUTO, strict: bool = False, env: Mapping[str, str] | None = None,
                 host: PluginHost | None = None) -> Plan:
    """A backend-only plan: the backend, its environment, dtype, compile, parallelism and collective — no model.

    Decisions that need a model (task, placement, attention, kernels, quantization, decode,
    batching) are absent, and ``plan.value()`` returns ``None`` for them.
    """
    request = Request.build(NO_MODEL, backend=backend, devices=devices, dtype=dtype, compile=compile,
                            sharding=sharding, strict=strict)
    return make_plan(request, env=env, host=host)
