"""Plan → Loaded: apply the environment, load with the plan's choices, compile."""

from __future__ import annotations

import logging
import os
from typing import Any

from ..errors import ConfigurationError, IntelrtError, ModelSourceError
from ..hooks.options import AUTO
from ..hooks.payloads import ParallelismChoice
from ..hooks.plan import Plan
from ..hooks.request import Request, split_credentials
from ..host.manager import PluginHost, get_host
from ..planning.architecture import AUTO_CLASSES
from ..planning.model_source import require_weights, resolve_model
from ..planning.planner import make_plan
from ..support.distributed import is_distributed_launch, world_size
from ..support.redaction import redact, redact_text
from .attention import register_attention
from .compiling import compile as compile_with_plan
from .compiling import install_compile_wrapper
from .download import config_fetcher
from .environment import apply_in_process
from .loaded import Loaded
from .pretrained_kwargs import from_pretrained_kwargs
from .warmup import warm_prompt_buckets

log = logging.getLogger(__name__)


def _load_tokenizer(plan: Plan, source: str, credentials: dict[str, Any]) -> Any:
    if not plan.model.has_tokenizer:
        return None
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(source, trust_remote_code=plan.request.trust_remote_code, **credentials)


def check_ranks(plan: Plan) -> None:
    """Weights sharded as they load need every rank of the planned launch: refuse in a process that
    is not one of them (transformers would quietly load the whole model into it instead)."""
    choice = plan.decided.parallelism
    if not isinstance(choice, ParallelismChoice) or not choice.sharded_load:
        return
    if not is_distributed_launch():
        raise ConfigurationError(
            f"the plan shards the weights across {choice.world_size} processes as they load "
            f"({'tensor parallel' if choice.inference == 'tensor' else 'FSDP2'}), and this process is not one of them "
            f"(no LOCAL_RANK / WORLD_SIZE in its environment): start it with {choice.launch or 'intelrt launch'}")
    if world_size() != choice.world_size:
        raise ConfigurationError(f"the plan shards the weights across {choice.world_size} ranks, and this job has "
                                 f"WORLD_SIZE={world_size()}: plan in the rank itself (intelrt.load does)")


def prepare(plan: Plan, host: PluginHost | None = None) -> None:
    """What a plan needs before a model is built: its environment, the backend's compile wrapper and
    attention implementation (registered in transformers)."""
    apply_in_process(plan)
    install_compile_wrapper(plan.backend, host)
    register_attention(plan, host)


def apply_plan(plan: Plan, host: PluginHost | None = None, credentials: dict[str, Any] | None = None) -> Loaded:
    """Load the model exactly as ``plan`` says. ``credentials`` (``token=`` …) go to
    ``from_pretrained`` here and nowhere else: a plan never holds them."""
    check_ranks(plan)
    prepare(plan, host)
    import transformers

    credentials = dict(credentials or {})
    auto_class = getattr(transformers, AUTO_CLASSES[plan.task][0])
    source = plan.model.local_dir or plan.model.source
    kwargs = from_pretrained_kwargs(plan)
    log.info("loading %s with %s%s", source,
             redact({k: v for k, v in kwargs.items() if k not in ("kernel_config", "distributed_config")}),
             f" and credentials {sorted(credentials)}" if credentials else "")
    try:
        model = auto_class.from_pretrained(source, **kwargs, **credentials)
    except OSError as exc:  # the hub's connection errors name HF_ENDPOINT, password included
        if isinstance(exc, IntelrtError):
            raise
        raise ModelSourceError(f"loading {plan.model.source} failed: {redact_text(str(exc))}") from None
    return adopt(model, _load_tokenizer(plan, source, credentials), plan, host)


def adopt(model: Any, tokenizer: Any, plan: Plan, host: PluginHost | None = None) -> Loaded:
    """A model built under ``plan`` after ``prepare(plan)`` (the benchmarks build random weights in
    memory from a config), finished as ``apply_plan`` finishes a loaded one: eval mode, the plan's
    compile, and the warm-up of its prompt buckets when the plan has buckets to warm."""
    model.eval()
    model = compile_with_plan(model, plan)
    buckets = plan.decided.buckets
    if buckets is not None and buckets.warmup and plan.task == "text-generation":
        warm_prompt_buckets(model, buckets)  # before the model serves: each shape compiles now, not mid-run
    return Loaded(model=model, tokenizer=tokenizer, plan=plan, host=host)


def plan_for_load(model: str | os.PathLike[str], **options: Any) -> Plan:
    """The plan :func:`load` applies (``options``: as for ``load``). Unlike ``plan``, a hub id
    that is not cached yet has its ``config.json`` downloaded (unless ``HF_HUB_OFFLINE``)."""
    _, credentials = split_credentials(options)
    request = Request.build(model, **options)
    info = resolve_model(request.model, fetch=config_fetcher(credentials.get("token")))
    require_weights(info)
    return make_plan(request, host=get_host(), model=info)


def load(model: str | os.PathLike[str], *, backend: str = AUTO, devices: object = None, dtype: str = AUTO,
         attention: str = AUTO, kernels: str | bool = AUTO, quantization: str | None = None,
         compile: str | bool = AUTO, task: str = AUTO, batching: str = AUTO, graphs: str | bool = AUTO,
         attention_kernel: str | bool = AUTO, workload: str = AUTO, warmup: str = AUTO, buckets: str | bool = AUTO,
         sharding: str = AUTO, parallel: str = AUTO,
         trust_remote_code: bool = False, allow_pickle: bool = False,
         strict: bool = False, **from_pretrained_kwargs: Any) -> Loaded:
    """Plan and load ``model`` (a local directory or a hub id); see :func:`intelrt.plan`.

    Unlike planning, loading a hub id that is not cached downloads it (unless ``HF_HUB_OFFLINE``).
    Credentials (``token=`` …) are handed to the download and to ``from_pretrained`` only: the
    plan records their names, never their values.
    """
    plan = plan_for_load(model, backend=backend, devices=devices, dtype=dtype, attention=attention,
                         kernels=kernels, quantization=quantization, compile=compile, task=task,
                         batching=batching, graphs=graphs, attention_kernel=attention_kernel,
                         workload=workload, warmup=warmup, buckets=buckets, sharding=sharding, parallel=parallel,
                         trust_remote_code=trust_remote_code, allow_pickle=allow_pickle, strict=strict,
                         **from_pretrained_kwargs)
    _, credentials = split_credentials(from_pretrained_kwargs)
    return apply_plan(plan, get_host(), credentials)
