"""A plan with no model: the backend-wide decisions that training and launching need.

An embedding framework that builds its own model (or a launcher that starts a script) still
needs the backend's answers — the device, the precision, the collective backend, the
environment of the run — without a model directory to read. :func:`plan_backend` asks the same
hooks as :func:`intelrt.plan` for those concerns only, so the answers are the same ones a model
plan would hold.
"""

from __future__ import annotations

import os
from collections.abc import Mapping

from .detection import choose_backend, detect_backends
from .model_source import ModelInfo
from .plan_data import Plan
from .planning import decide_all, plan_env
from .plugins import PluginHost, get_host
from .request import AUTO, Request

#: Stands in for the model in a backend-only plan: no config, no weights, no tokenizer.
NO_MODEL = ModelInfo(source="(no model: backend-only plan)", local_dir=None, config={}, weight_files=(),
                     has_tokenizer=False)

#: The selection hooks whose answers do not depend on a model.
BACKEND_CONCERNS = (("dtype", "intelrt_select_dtype"), ("compile", "intelrt_select_compile"))


def plan_backend(*, backend: str = AUTO, devices: object = None, dtype: str = AUTO,
                 compile: str | bool = AUTO, strict: bool = False, env: Mapping[str, str] | None = None,
                 host: PluginHost | None = None) -> Plan:
    """Plan the backend, its environment, dtype, compile and collective — no model needed.

    The result is a :class:`~intelrt.plan.Plan` whose model is :data:`NO_MODEL`; decisions that
    need a model (task, placement, attention, kernels, quantization, batching) are absent, and
    ``plan.value()`` returns ``None`` for them.
    """
    request = Request.build(NO_MODEL.source, backend=backend, devices=devices, dtype=dtype, compile=compile,
                            strict=strict)
    env = dict(os.environ) if env is None else dict(env)
    host = host or get_host()
    detected = detect_backends(host, env)
    status, reason, forced = choose_backend(detected, request.backend, env)
    settings, findings = plan_env(host, status, request, env)

    decisions = decide_all(host, BACKEND_CONCERNS, backend=status, request=request, model=NO_MODEL, env=env)
    return Plan(request=request, model=NO_MODEL, backend=status, backend_reason=reason, backend_forced=forced,
                decisions=decisions, env=tuple(settings), findings=tuple(findings),
                detected=detected, notes=("backend-only plan: no model was given",))
