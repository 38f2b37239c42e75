"""Plan → Loaded: apply the environment, load with the plan's choices, compile."""

from __future__ import annotations

import logging
import os
from typing import Any

from ..host.manager import PluginHost, get_host
from ..planning.environment import setup_env
from ..planning.model_source import require_weights, resolve_model
from ..planning.options import AUTO
from ..planning.plan import Plan
from ..planning.planner import make_plan
from ..planning.request import Request
from ..support.redaction import redact
from .compiling import compile as compile_with_plan
from .compiling import install_compile_wrapper
from .loaded import Loaded
from .pretrained_kwargs import from_pretrained_kwargs

log = logging.getLogger(__name__)

AUTO_CLASSES = {
    "text-generation": "AutoModelForCausalLM",
    "feature-extraction": "AutoModel",
    "sequence-classification": "AutoModelForSequenceClassification",
}


def _load_tokenizer(plan: Plan, source: str) -> Any:
    if not plan.model.has_tokenizer:
        return None
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(source, trust_remote_code=plan.request.trust_remote_code)


def apply_plan(plan: Plan, host: PluginHost | None = None) -> Loaded:
    """Load the model exactly as ``plan`` says."""
    setup_env(plan)
    install_compile_wrapper(plan.backend, host)
    import transformers

    auto_class = getattr(transformers, AUTO_CLASSES[plan.task])
    source = plan.model.local_dir or plan.model.source
    kwargs = from_pretrained_kwargs(plan)
    log.info("loading %s with %s", source, redact({k: v for k, v in kwargs.items() if k != "kernel_config"}))
    model = auto_class.from_pretrained(source, **kwargs)
    model.eval()
    tokenizer = _load_tokenizer(plan, source)
    model = compile_with_plan(model, plan)
    return Loaded(model=model, tokenizer=tokenizer, plan=plan, host=host)


def plan_for_load(model: str | os.PathLike[str], **options: Any) -> Plan:
    """The plan :func:`load` applies (``options``: as for ``load``). Unlike ``plan``, a hub id
    that is not cached yet has its ``config.json`` downloaded (unless ``HF_HUB_OFFLINE``)."""
    request = Request.build(model, **options)
    info = resolve_model(request.model, download=True)
    require_weights(info)
    return make_plan(request, host=get_host(), model=info)


def load(model: str | os.PathLike[str], *, backend: str = AUTO, devices: object = None, dtype: str = AUTO,
         attention: str = AUTO, kernels: str | bool = AUTO, quantization: str | None = None,
         compile: str | bool = AUTO, task: str = AUTO, batching: str = AUTO, graphs: str | bool = AUTO,
         attention_kernel: str | bool = AUTO, trust_remote_code: bool = False, allow_pickle: bool = False,
         strict: bool = False, **from_pretrained_kwargs: Any) -> Loaded:
    """Plan and load ``model`` (a local directory or a hub id); see :func:`intelrt.plan`.

    Unlike planning, loading a hub id that is not cached downloads it (unless ``HF_HUB_OFFLINE``).
    """
    plan = plan_for_load(model, backend=backend, devices=devices, dtype=dtype, attention=attention,
                         kernels=kernels, quantization=quantization, compile=compile, task=task,
                         batching=batching, graphs=graphs, attention_kernel=attention_kernel,
                         trust_remote_code=trust_remote_code, allow_pickle=allow_pickle, strict=strict,
                         **from_pretrained_kwargs)
    return apply_plan(plan, get_host())
