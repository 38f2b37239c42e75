"""Plan → Loaded: apply the environment, load with the plan's choices, compile."""

from __future__ import annotations

import logging
import os
import re
from collections.abc import Mapping
from typing import Any

from ..errors import ConfigurationError, IntelrtError, ModelSourceError, PluginError
from ..hooks.model import ModelInfo
from ..hooks.options import AUTO
from ..hooks.payloads import ParallelismChoice
from ..hooks.plan import Plan
from ..hooks.request import Request, split_credentials
from ..host.manager import PluginHost, get_host
from ..planning.model_source import (
    TOKENIZER_TEXT_FILES,
    damaged_text_file,
    require_weights,
    resolve_model,
)
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
from .processors import Processors
from .quantized_load import after_load, conversion_refused
from .warmup import warm_prompt_buckets

log = logging.getLogger(__name__)


def _load_tokenizer(plan: Plan, source: str, credentials: dict[str, Any]) -> Any:
    if not plan.model.has_tokenizer:
        return None
    from transformers import AutoTokenizer

    try:
        return AutoTokenizer.from_pretrained(source, trust_remote_code=plan.request.trust_remote_code, **credentials)
    except (ValueError, UnicodeDecodeError, OSError) as exc:  # a JSONDecodeError is a ValueError
        if isinstance(exc, IntelrtError) or not os.path.isdir(source):
            raise
        damaged = damaged_text_file(source, TOKENIZER_TEXT_FILES)
        why = damaged or (f"transformers could not build it ({' '.join(str(exc).split())[:300]})"
                          + ("; tokenizer.json is missing" if not os.path.isfile(os.path.join(source, "tokenizer.json"))
                             else ""))
        raise ModelSourceError(f"{plan.model.source}: its tokenizer cannot be loaded: {why}. Copy the tokenizer's files "
                               "again, or save the tokenizer again (tokenizer.save_pretrained)") from exc


def model_class(plan: Plan) -> Any:
    """What ``from_pretrained`` is called on (SPEC T1): the auto class that picks the planned class
    (it also loads a PEFT adapter onto its base), the planned class itself when no auto class maps
    it (``config.architectures`` names it), or — for remote code, whose class only its own code
    knows, and a model type this transformers does not know — the task's first auto class, which
    runs ``auto_map`` or says the model type needs a newer transformers."""
    import importlib

    import transformers

    from ..planning import tasks

    arch = plan.model.architecture
    if arch is not None and arch.auto_class:
        return getattr(transformers, arch.auto_class)
    if arch is not None:
        return getattr(importlib.import_module(arch.module), arch.name)
    task = tasks.get(plan.task)
    info = plan.model.base or plan.model
    if task.auto_classes and (info.config.get("auto_map") or info.model_type not in transformers.CONFIG_MAPPING):
        # remote code, or a model type this transformers does not know: its auto class says which
        return getattr(transformers, task.auto_classes[0])
    raise no_class_for(plan.model, plan.task)


def no_class_for(model: ModelInfo, task: str) -> ConfigurationError:
    """The error for a task transformers has no class of this model for, naming the tasks its class serves."""
    from ..planning import tasks

    info = model.base or model
    autos = ", ".join(tasks.get(task).auto_classes) or "-"
    serves = ", ".join(tasks.tasks_of_class(info.architectures[0])) if info.architectures else ""
    return ConfigurationError(
        f"{model.source} ({info.model_type}) has no class of transformers for task {task!r} (its auto classes "
        f"{autos} do not map {info.model_type!r})"
        + (f"; its checkpoint class {info.architectures[0]} serves {serves}" if serves else "")
        + ". Pass a task its class serves, or leave task= to intelrt.")


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


ACCELERATE_DEVICE_MAPS = ("auto", "balanced", "balanced_low_0", "sequential")
"""``device_map`` strings accelerate spreads a model with (``infer_auto_device_map``); any other
string names one device, which torch must know."""


def check_devices(plan: Plan, host: PluginHost | None = None) -> None:
    """The plan's device type and ``device_map`` are devices torch knows; else the plugin that put
    them in the plan is named (transformers' own refusal blames the model's files)."""
    import torch

    describe = (host or get_host()).describe
    placement = plan.decided.placement
    decision = plan.decisions.get("placement")
    for value, plugin, what in (
            (plan.backend.device_type, plan.backend.plugin, f"contributes backend {plan.backend.name!r} with the "
                                                            "device type"),
            (placement.device_map if placement is not None else None, decision.plugin if decision else "defaults",
             "chose the device_map")):
        if value is None or value in ACCELERATE_DEVICE_MAPS:
            continue
        try:
            torch.device(value)
        except (RuntimeError, ValueError) as exc:
            other = "" if plan.device == "cpu" else ", pass backend='cpu' (CLI: --backend cpu)"
            raise PluginError(
                f"{describe(plugin)} {what} {value!r}, which is not a device this torch knows "
                f"({' '.join(str(exc).split())}). Install that device's torch build or runtime{other}, or block the "
                f"plugin with INTELRT_DISABLE_PLUGINS={plugin}",
                plugin=plugin, distribution=(host or get_host()).distribution_of(plugin)) from None


def prepare(plan: Plan, host: PluginHost | None = None) -> None:
    """What a plan needs before a model is built: its environment, the device (the backend takes it,
    saying what holds it when it cannot), the backend's compile wrapper and attention implementation
    (registered in transformers)."""
    apply_in_process(plan)
    (host or get_host()).acquire_device(plan.backend, plan)
    install_compile_wrapper(plan.backend, host)
    register_attention(plan, host)


def apply_plan(plan: Plan, host: PluginHost | None = None, credentials: dict[str, Any] | None = None, *,
               quantize: bool = True) -> Loaded:
    """Load the model exactly as ``plan`` says. ``credentials`` (``token=`` …) go to
    ``from_pretrained`` here and nowhere else: a plan never holds them. ``quantize=False`` loads
    the weights as they are on disk, for a quantizer that runs on them (``intelrt.quantize``)."""
    check_ranks(plan)
    check_devices(plan, host)
    prepare(plan, host)
    credentials = dict(credentials or {})
    cls = model_class(plan)
    source = plan.model.local_dir or plan.model.source
    kwargs = from_pretrained_kwargs(plan)
    if not quantize:
        kwargs.pop("quantization_config", None)
    log.info("loading %s with %s%s", source,
             redact({k: v for k, v in kwargs.items() if k not in ("kernel_config", "distributed_config")}),
             f" and credentials {sorted(credentials)}" if credentials else "")
    try:
        with conversion_refused(plan, plan.model.architecture.name if plan.model.architecture else cls.__name__):
            model = cls.from_pretrained(source, **kwargs, **credentials)
    except OSError as exc:  # the hub's connection errors name HF_ENDPOINT, password included
        if isinstance(exc, IntelrtError):
            raise
        raise ModelSourceError(f"loading {plan.model.source} failed: {redact_text(str(exc))}") from None
    except TypeError as exc:
        refused = unknown_keyword(exc, plan.request.from_pretrained_kwargs)
        if refused is None:
            raise
        raise refused from None
    tokenizer = _load_tokenizer(plan, source, credentials)
    if quantize:
        model = after_load(model, tokenizer, plan, cls, {**kwargs, **credentials})
    processors = Processors(source, trust_remote_code=plan.request.trust_remote_code, credentials=credentials)
    return adopt(model, tokenizer, plan, host, processors)


_UNEXPECTED = re.compile(r"unexpected keyword argument '(\w+)'")


def unknown_keyword(exc: TypeError, given: Mapping[str, Any]) -> ConfigurationError | None:
    """A keyword of ``load()`` that nobody takes, as the error saying so: intelrt hands keywords that
    are not options to ``from_pretrained``, which sets those its config has and passes the rest to
    the model class, whose ``__init__`` refuses them (transformers' ``PreTrainedModel.from_pretrained``)."""
    match = _UNEXPECTED.search(str(exc))
    if match is None or match.group(1) not in given:
        return None
    import difflib
    import inspect

    from transformers import PreTrainedModel

    from ..hooks.request import OPTION_NAMES

    name = match.group(1)
    known = [*OPTION_NAMES, *(p for p in inspect.signature(PreTrainedModel.from_pretrained).parameters
                              if p not in ("cls", "args", "kwargs"))]
    close = difflib.get_close_matches(name, known, n=3)
    hint = f" Did you mean {' or '.join(f'{c}=' for c in close)}?" if close else ""
    return ConfigurationError(
        f"load() got {name}={given[name]!r:.80}, which is not an intelrt option (see intelrt.plan's options), a "
        f"keyword of from_pretrained, or a field of the model's config: transformers refused it ({exc}).{hint} "
        "Remove it, or spell it as from_pretrained takes it.")


def adopt(model: Any, tokenizer: Any, plan: Plan, host: PluginHost | None = None,
          processors: Processors | None = None) -> Loaded:
    """A model built under ``plan`` after ``prepare(plan)`` (the benchmarks build random weights in
    memory from a config), finished as ``apply_plan`` finishes a loaded one: eval mode, the plan's
    compile, and the warm-up of its prompt buckets when the plan has buckets to warm.
    ``processors``: the checkpoint's, loaded when first used."""
    model.eval()
    model = compile_with_plan(model, plan)
    buckets = plan.decided.buckets
    if buckets is not None and buckets.warmup and plan.task == "text-generation":
        warm_prompt_buckets(model, buckets)  # before the model serves: each shape compiles now, not mid-run
    return Loaded(model=model, tokenizer=tokenizer, plan=plan, host=host, processors=processors)


def plan_for_load(model: str | os.PathLike[str], **options: Any) -> Plan:
    """The plan :func:`load` applies (``options``: as for ``load``). Unlike ``plan``, a hub id
    that is not cached yet has its ``config.json`` downloaded (unless ``HF_HUB_OFFLINE``)."""
    _, credentials = split_credentials(options)
    request = Request.build(model, **options)
    if os.path.isdir(os.path.expanduser(request.model)):  # a final save killed mid-swap: the previous model back
        from ..training.saving import recover_interrupted_save

        recover_interrupted_save(os.path.expanduser(request.model))
    info = resolve_model(request.model, fetch=config_fetcher(credentials.get("token")))
    require_weights(info)
    return make_plan(request, host=get_host(), model=info)


def load(model: str | os.PathLike[str], *,
         # <request option parameters: python -m intelrt.hooks.signature --write>
         backend: str = AUTO, devices: object = None, dtype: str = AUTO, attention: str = AUTO,
         kernels: str | bool = AUTO, quantization: str | None = None, compile: str | bool = AUTO,
         task: str = AUTO, batching: str = AUTO, graphs: str | bool = AUTO,
         attention_kernel: str | bool = AUTO, workload: str = AUTO, warmup: str = AUTO,
         buckets: str | bool = AUTO, sharding: str = AUTO, parallel: str = AUTO,
         trust_remote_code: bool = False, allow_pickle: bool = False, strict: bool = False,
         # </request option parameters>
         gpu_memory_utilization: float | None = None, max_batch_tokens: int | None = None,
         prefix_caching: bool | None = None, **from_pretrained_kwargs: Any) -> Loaded:
    """Plan and load ``model`` (a local directory or a hub id); see :func:`intelrt.plan`.

    Unlike planning, loading a hub id that is not cached downloads it (unless ``HF_HUB_OFFLINE``).
    Credentials (``token=`` …) are handed to the download and to ``from_pretrained`` only: the
    plan records their names, never their values.

    ``gpu_memory_utilization``, ``max_batch_tokens``, ``prefix_caching``: the decode engine's
    settings (``Loaded.decode_tuning``; ``None``: its default), checked before anything loads.
    They change no plan decision, so they are load options, not request options.
    """
    from ..decoding.tuning import DecodeTuning, with_engine_options

    tuning = with_engine_options(DecodeTuning(), gpu_memory_utilization=gpu_memory_utilization,
                                 max_batch_tokens=max_batch_tokens, prefix_caching=prefix_caching)
    plan = plan_for_load(model,
                         # <request option keywords: python -m intelrt.hooks.signature --write>
                         backend=backend, devices=devices, dtype=dtype, attention=attention,
                         kernels=kernels, quantization=quantization, compile=compile, task=task,
                         batching=batching, graphs=graphs, attention_kernel=attention_kernel,
                         workload=workload, warmup=warmup, buckets=buckets, sharding=sharding,
                         parallel=parallel, trust_remote_code=trust_remote_code,
                         allow_pickle=allow_pickle, strict=strict,
                         # </request option keywords>
                         **from_pretrained_kwargs)
    _, credentials = split_credentials(from_pretrained_kwargs)
    loaded = apply_plan(plan, get_host(), credentials)
    loaded.decode_tuning = tuning
    return loaded
