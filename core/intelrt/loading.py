"""Plan → Loaded: apply the environment, load with the plan's choices, compile."""

from __future__ import annotations

import logging
import os
from collections.abc import MutableMapping
from typing import Any

from .compiling import compile as compile_with_plan
from .compiling import install_compile_wrapper
from .environment import apply_env
from .loaded import Loaded
from .model_source import require_weights, resolve_model
from .plan_data import Plan
from .planning import make_plan
from .plugins import PluginHost, get_host
from .pretrained_kwargs import from_pretrained_kwargs
from .redaction import redact
from .request import AUTO, Request

log = logging.getLogger(__name__)

AUTO_CLASSES = {
    "text-generation": "AutoModelForCausalLM",
    "feature-extraction": "AutoModel",
    "sequence-classification": "AutoModelForSequenceClassification",
}


def setup_env(plan: Plan, environ: MutableMapping[str, str] | None = None) -> list[str]:
    """Write the plan's environment into ``environ`` (default ``os.environ``); returns the names set.

    Call it before ``import torch`` touches a device: visibility masks only take effect before the
    driver loads (SPEC C2). Values the user already set are kept.
    """
    return apply_env(plan.env, environ)


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
    return Loaded(model=model, tokenizer=tokenizer, plan=plan)


def load(model: str | os.PathLike[str], *, backend: str = AUTO, devices: object = None, dtype: str = AUTO,
         attention: str = AUTO, kernels: str | bool = AUTO, quantization: str | None = None,
         compile: str | bool = AUTO, task: str = AUTO, batching: str = AUTO, graphs: str | bool = AUTO,
         trust_remote_code: bool = False, allow_pickle: bool = False, strict: bool = False,
         **from_pretrained_kwargs: Any) -> Loaded:
    """Plan and load ``model`` (a local directory or a hub id); see :func:`intelrt.plan`.

    Unlike planning, loading a hub id that is not cached downloads it (unless ``HF_HUB_OFFLINE``).
    """
    request = Request.build(model, backend=backend, devices=devices, dtype=dtype, attention=attention,
                            kernels=kernels, quantization=quantization, compile=compile, task=task,
                            batching=batching, graphs=graphs, trust_remote_code=trust_remote_code, allow_pickle=allow_pickle, strict=strict,
                            **from_pretrained_kwargs)
    host = get_host()
    info = resolve_model(request.model, download=True)
    require_weights(info)
    plan = make_plan(request, host=host, model=info)
    return apply_plan(plan, host)
