"""Every ``intelrt_*`` hook: typed and documented (pytest's hookspec style).

A plugin takes part in three ways:

* it contributes **backends** — :class:`~intelrt.plugin.Backend` subclasses, one per kind of
  device — with :func:`intelrt_backends`; the host asks the chosen backend for each decision, then
  intelrt's generic rules;
* it **overrides one decision** of any backend with a selection hook (``intelrt_select_<concern>``,
  one per concern of :data:`~intelrt.hooks.concerns.CONCERNS`, each written out below); mark it ``tryfirst=True`` to answer
  before other plugins. A selection hook answers ``None`` for "not mine": it is asked for every
  backend, so it says itself which backends and models it is for;
* it **adds** variables, training keywords or doctor findings for any backend with the collecting
  hooks (:func:`intelrt_setup_env`, :func:`intelrt_launch_env`, :func:`intelrt_training_arguments`,
  :func:`intelrt_diagnose`).

Conventions: hooks are called with keyword arguments and an implementation may accept any subset
of them. Selection hooks are *firstresult* (the first non-``None`` answer wins); the others collect
every plugin's answers. A hook raises :class:`~intelrt.plugin.PlanError` (or another
``IntelrtError``) to refuse a request with a message for the user; any other exception is reported
as a fault of the plugin. ``env`` is the environment the plan is made for: read it, never write
``os.environ``. Hooks must not import torch, transformers or a vendor stack at module import time.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from .backend import Backend
from .concerns import Decided
from .markers import PROJECT, hookspec
from .model import ModelInfo
from .plan import Plan
from .request import Request
from .types import BackendStatus, Decision, EnvVar, Finding, Setting

__all__ = ["PROJECT", "hookspec"]


@hookspec
def intelrt_backends() -> Sequence[type[Backend]] | None:
    """The backends this plugin contributes: :class:`~intelrt.plugin.Backend` subclasses.

    Called once when the host starts. The host calls each class's ``detect(env)`` to learn whether
    it is available here, and asks the chosen one for every decision it declares; two plugins
    contributing backends of one name is an error naming both.

    :returns: the backend classes, or ``None`` for none.
    """


@hookspec
def intelrt_setup_env(backend: Backend, request: Request, env: Mapping[str, str]
                      ) -> Sequence[EnvVar | Finding] | None:
    """Environment variables the run needs before the device driver loads, and warnings about the
    ones already in ``env`` — on top of what the chosen backend's ``run_environment`` asks for.

    The host keeps every value the user already set (SPEC C2) unless ``EnvVar.overwrite_user``
    says the user asked for this one in the same call, and reports each change.

    :param backend: the backend chosen for the run.
    :param request: what the user asked for.
    :param env: the environment the plan is made for.
    :returns: ``EnvVar`` items to set and ``Finding`` items to report, or ``None``.
    """


@hookspec
def intelrt_launch_env(backend: Backend, plan: Plan, nproc: int, env: Mapping[str, str]
                       ) -> Sequence[EnvVar | Finding] | None:
    """Extra environment for the processes ``intelrt launch`` starts, and warnings about the launch,
    on top of the plan's environment and the backend's ``launch_environment``.

    :param backend: the backend chosen for the run.
    :param plan: the launch's backend-only plan.
    :param nproc: how many processes are started.
    :param env: the environment the processes start from.
    :returns: ``EnvVar`` and ``Finding`` items, or ``None``.
    """


@hookspec
def intelrt_training_arguments(backend: Backend, plan: Plan, overrides: Mapping[str, Any]
                               ) -> Sequence[Setting] | None:
    """``TrainingArguments`` keywords this plugin contributes, each with its reason, on top of the
    generic ones and the backend's ``training_arguments``.

    :param backend: the backend chosen for the run.
    :param plan: the plan training follows.
    :param overrides: the user's own keywords: they win; raise ``PlanError`` when one cannot work.
    :returns: ``Setting`` items, or ``None``.
    """


@hookspec
def intelrt_diagnose(backends: Sequence[BackendStatus], env: Mapping[str, str], probe: bool
                     ) -> Sequence[Finding] | None:
    """Findings for ``intelrt doctor``: what is wrong or worth knowing, each with its fix — on top
    of each backend's ``diagnose``.

    :param backends: every backend detected, available or not.
    :param env: the environment to judge.
    :param probe: True for ``intelrt doctor --probe``: only then may a plugin run vendor tools
        (``hl-smi``, ``xpu-smi``); detection and planning never do.
    :returns: ``Finding`` items, or ``None``.
    """


# -- the selection hooks: one per concern of the registry (hooks/concerns.py ``Decided``), in its order --------
# Each is asked before the chosen backend's select_<concern>; a test holds every concern to its hookspec.

@hookspec(firstresult=True)
def intelrt_select_dtype(backend: Backend, request: Request, model: ModelInfo, env: Mapping[str, str],
                         decided: Decided) -> Decision | None:
    """Choose the weights dtype (``"float32"``, ``"bfloat16"``, ``"float16"``).

    ``request.dtype`` is ``"auto"`` or the user's choice; a forced choice is the user's: the host
    answers it after the backend's ``check_dtype`` (which may refuse it with ``PlanError``).

    Asked before the chosen backend's ``select_dtype``: answer ``None`` for a backend, a model or a
    request this plugin is not for. Stops at the first non-``None`` result.

    :param backend: the backend chosen for the run.
    :param request: what the user asked for (``request.is_forced(option)`` tells a forced option).
    :param model: the model's config and files.
    :param env: the environment the plan is made for.
    :param decided: the decisions made before this one.
    :returns: a ``Decision`` whose value goes to from_pretrained(dtype=); TrainingArguments(bf16= /
        fp16=), or ``None``.
    """


@hookspec(firstresult=True)
def intelrt_select_quantization(backend: Backend, request: Request, model: ModelInfo, env: Mapping[str, str],
                                decided: Decided) -> Decision | None:
    """Decide quantization: value ``None`` (none) or a :class:`~intelrt.plugin.QuantizationChoice`
    (``method``, ``bits``, the ``scheme``, the ``package`` and ``extra`` that run it, the ``dtype`` the
    method loads in, the builder's ``details``); intelrt builds transformers' ``quantization_config``
    from it (``intelrt.quantization.builders``).

    Decided even when nothing is asked: a checkpoint whose config.json holds a ``quantization_config``
    is quantized already (``source="checkpoint"``), and the plan says whether it runs on the backend.
    ``request.quantization`` is ``None`` or one of ``QUANTIZATION_REQUESTS`` (``4bit``, ``8bit``,
    ``int4``, ``int8``, ``int8-dynamic``, ``autoround``, ``fp8``); a forced one is proposed like an
    automatic value — the backend's ``select_quantization``, else the generic rule (intelrt's method ×
    backend table, ``intelrt.quantization.decide``) — and must carry it out (``requested`` equal to it).
    A ``dtype`` the method forces replaces the plan's dtype decision (transformers'
    ``HfQuantizer.update_dtype``).

    Asked before the chosen backend's ``select_quantization``: answer ``None`` for a backend, a model or
    a request this plugin is not for. Stops at the first non-``None`` result.

    :param backend: the backend chosen for the run.
    :param request: what the user asked for (``request.is_forced(option)`` tells a forced option).
    :param model: the model's config and files.
    :param env: the environment the plan is made for.
    :param decided: the decisions made before this one.
    :returns: a ``Decision`` whose value goes to from_pretrained(quantization_config=BitsAndBytesConfig
        / TorchAoConfig / AutoRoundConfig …); a checkpoint's own quantization_config; AutoRound and INC
        FP8 after loading, or ``None``.
    """


@hookspec(firstresult=True)
def intelrt_select_parallelism(backend: Backend, request: Request, model: ModelInfo, env: Mapping[str, str],
                               decided: Decided) -> Decision | None:
    """Decide how the run spreads over processes, one per device: value a
    :class:`~intelrt.plugin.ParallelismChoice` — the training strategy (``none``, ``ddp``, ``fsdp``,
    ``deepspeed``) with the ``fsdp_config`` or DeepSpeed config it hands ``TrainingArguments``, the
    inference strategy (``none``, ``tensor``) with the ``distributed_config`` it hands
    ``from_pretrained``, the world size it was planned for, and the launch command when this process is
    not yet one of the ranks.

    ``request.sharding`` (training) and ``request.parallel`` (inference) are ``"auto"`` or the user's
    choice; refuse a strategy your backend's collective library cannot run with ``PlanError`` saying the
    way out. The generic rule (:func:`~intelrt.plugin.decide_parallelism`) reads the backend's
    :class:`~intelrt.plugin.ShardingSupport`. Decided for backend-only plans too (``model`` then has no
    weights).

    Asked before the chosen backend's ``select_parallelism``: answer ``None`` for a backend, a model or
    a request this plugin is not for. Stops at the first non-``None`` result.

    :param backend: the backend chosen for the run.
    :param request: what the user asked for (``request.is_forced(option)`` tells a forced option).
    :param model: the model's config and files.
    :param env: the environment the plan is made for.
    :param decided: the decisions made before this one.
    :returns: a ``Decision`` whose value goes to intelrt launch (one process per device);
        TrainingArguments(fsdp=, fsdp_config=, deepspeed=); from_pretrained(distributed_config=), or
        ``None``.
    """


@hookspec(firstresult=True)
def intelrt_select_placement(backend: Backend, request: Request, model: ModelInfo, env: Mapping[str, str],
                             decided: Decided) -> Decision | None:
    """Choose where the weights go: value a :class:`~intelrt.plugin.Placement` — the ``device_map`` for
    ``from_pretrained`` (``"xpu"``, ``"xpu:2"``, ``"auto"``, ``"cpu"`` …), plus ``max_memory`` when
    accelerate may use only some of the devices this process sees.

    In a launched rank, or when the weights are sharded as they load,
    :func:`~intelrt.plugin.rank_placement` answers.

    Asked before the chosen backend's ``select_placement``: answer ``None`` for a backend, a model or a
    request this plugin is not for. Stops at the first non-``None`` result.

    :param backend: the backend chosen for the run.
    :param request: what the user asked for (``request.is_forced(option)`` tells a forced option).
    :param model: the model's config and files.
    :param env: the environment the plan is made for.
    :param decided: the decisions made before this one.
    :returns: a ``Decision`` whose value goes to from_pretrained(device_map=, max_memory=), or ``None``.
    """


@hookspec(firstresult=True)
def intelrt_select_attention(backend: Backend, request: Request, model: ModelInfo, env: Mapping[str, str],
                             decided: Decided) -> Decision | None:
    """Choose ``attn_implementation`` (``"sdpa"``, ``"eager"``, ``"flash_attention_2"`` …).

    ``request.attention`` is ``"auto"`` or the user's choice; a forced choice is answered by the host
    after the backend's ``check_attention`` (refuse an impossible one with ``PlanError`` naming the
    reason).

    Asked before the chosen backend's ``select_attention``: answer ``None`` for a backend, a model or a
    request this plugin is not for. Stops at the first non-``None`` result.

    :param backend: the backend chosen for the run.
    :param request: what the user asked for (``request.is_forced(option)`` tells a forced option).
    :param model: the model's config and files.
    :param env: the environment the plan is made for.
    :param decided: the decisions made before this one.
    :returns: a ``Decision`` whose value goes to from_pretrained(attn_implementation=), or ``None``.
    """


@hookspec(firstresult=True)
def intelrt_select_kernels(backend: Backend, request: Request, model: ModelInfo, env: Mapping[str, str],
                           decided: Decided) -> Decision | None:
    """Decide hub kernels: value a :class:`~intelrt.plugin.KernelChoice` (``use_kernels``, the
    ``kernel_mapping`` layer → {device: kernel}, ``use_local_kernel``); intelrt builds transformers'
    ``KernelConfig`` from it. ``kernels=False`` is answered by the host; ``kernels=True`` is proposed by
    the backend (which kernels, from where) and must turn them on.

    Asked before the chosen backend's ``select_kernels``: answer ``None`` for a backend, a model or a
    request this plugin is not for. Stops at the first non-``None`` result.

    :param backend: the backend chosen for the run.
    :param request: what the user asked for (``request.is_forced(option)`` tells a forced option).
    :param model: the model's config and files.
    :param env: the environment the plan is made for.
    :param decided: the decisions made before this one.
    :returns: a ``Decision`` whose value goes to from_pretrained(use_kernels=,
        kernel_config=KernelConfig(...)), or ``None``.
    """


@hookspec(firstresult=True)
def intelrt_select_compile(backend: Backend, request: Request, model: ModelInfo, env: Mapping[str, str],
                           decided: Decided) -> Decision | None:
    """Decide ``torch.compile``: value a :class:`~intelrt.plugin.CompileChoice` (``enabled``, ``compiler``,
    ``mode``). ``request.compile`` is ``"auto"``, ``"none"``, ``"on"`` (the backend's ``compiler``) or a
    ``torch.compile`` backend name; a forced one is answered by the host and checked by the backend's
    ``check_compile``.

    Asked before the chosen backend's ``select_compile``: answer ``None`` for a backend, a model or a
    request this plugin is not for. Stops at the first non-``None`` result.

    :param backend: the backend chosen for the run.
    :param request: what the user asked for (``request.is_forced(option)`` tells a forced option).
    :param model: the model's config and files.
    :param env: the environment the plan is made for.
    :param decided: the decisions made before this one.
    :returns: a ``Decision`` whose value goes to torch.compile after loading;
        TrainingArguments(torch_compile=, torch_compile_backend=), or ``None``.
    """


@hookspec(firstresult=True)
def intelrt_select_decode(backend: Backend, request: Request, model: ModelInfo, env: Mapping[str, str],
                          decided: Decided) -> Decision | None:
    """Decide how ``Loaded.generate`` decodes: value a :class:`~intelrt.plugin.DecodeChoice` (``method``
    ``fast`` or ``generate``, ``cache``, ``graphs``, ``compile``, ``step``, ``compile_options``,
    ``attention_kernel``, ``warmup``).

    ``"fast"`` is intelrt's decode loop (static KV cache, one step function per token with no host
    synchronisation, optionally compiled and captured into the device graph kind named by ``graphs``;
    the backend that names a graph kind also answers ``graph_capturer``). ``"generate"`` is
    transformers' plain ``model.generate``; say why in the reason. ``request.graphs``,
    ``request.attention_kernel``, ``request.warmup`` and ``request.compile`` are the user's word: honour
    them or raise ``PlanError``.

    Asked before the chosen backend's ``select_decode``: answer ``None`` for a backend, a model or a
    request this plugin is not for. Stops at the first non-``None`` result.

    :param backend: the backend chosen for the run.
    :param request: what the user asked for (``request.is_forced(option)`` tells a forced option).
    :param model: the model's config and files.
    :param env: the environment the plan is made for.
    :param decided: the decisions made before this one.
    :returns: a ``Decision`` whose value goes to Loaded.generate of one prompt, or ``None``.
    """


@hookspec(firstresult=True)
def intelrt_select_batching(backend: Backend, request: Request, model: ModelInfo, env: Mapping[str, str],
                            decided: Decided) -> Decision | None:
    """Decide how a list of prompts is generated: value a :class:`~intelrt.plugin.BatchingChoice`
    (``method`` ``continuous`` or ``padded``; for continuous batching ``use_graphs`` /
    ``use_async_batching``, where ``None`` leaves the choice to transformers, SPEC X7).
    ``request.batching`` and ``request.graphs`` are ``"auto"`` or forced.

    Asked before the chosen backend's ``select_batching``: answer ``None`` for a backend, a model or a
    request this plugin is not for. Stops at the first non-``None`` result.

    :param backend: the backend chosen for the run.
    :param request: what the user asked for (``request.is_forced(option)`` tells a forced option).
    :param model: the model's config and files.
    :param env: the environment the plan is made for.
    :param decided: the decisions made before this one.
    :returns: a ``Decision`` whose value goes to Loaded.generate of a list of prompts, or ``None``.
    """


@hookspec(firstresult=True)
def intelrt_select_buckets(backend: Backend, request: Request, model: ModelInfo, env: Mapping[str, str],
                           decided: Decided) -> Decision | None:
    """Decide the input shapes of a device that compiles one graph per shape: value a
    :class:`~intelrt.plugin.Buckets` (prompt batch sizes and lengths, decode batch sizes and KV-cache
    blocks, the block size, whether every bucket is warmed up at load), or ``None`` — shapes are not
    padded. A backend without such graphs answers ``None`` and the decision is left out.

    ``request.buckets`` is ``"auto"``, ``"on"`` or ``"off"``; ``"off"`` must be answered with value
    ``None`` (every new shape then compiles mid-run), ``"on"`` with buckets or ``PlanError``.

    Asked before the chosen backend's ``select_buckets``: answer ``None`` for a backend, a model or a
    request this plugin is not for. Stops at the first non-``None`` result.

    :param backend: the backend chosen for the run.
    :param request: what the user asked for (``request.is_forced(option)`` tells a forced option).
    :param model: the model's config and files.
    :param env: the environment the plan is made for.
    :param decided: the decisions made before this one.
    :returns: a ``Decision`` whose value goes to the decode engine and the server: prompt passes and
        decode steps padded to buckets; every bucket run at load when warmup, or ``None``.
    """


@hookspec(firstresult=True)
def intelrt_select_collective(backend: Backend, request: Request, model: ModelInfo, env: Mapping[str, str],
                              decided: Decided) -> Decision | None:
    """Choose the ``torch.distributed`` backend (``"gloo"``, ``"nccl"``, ``"xccl"``, ``"hccl"``); a backend
    without one answers ``None`` (the decision is then left out).

    Asked before the chosen backend's ``select_collective``: answer ``None`` for a backend, a model or a
    request this plugin is not for. Stops at the first non-``None`` result.

    :param backend: the backend chosen for the run.
    :param request: what the user asked for (``request.is_forced(option)`` tells a forced option).
    :param model: the model's config and files.
    :param env: the environment the plan is made for.
    :param decided: the decisions made before this one.
    :returns: a ``Decision`` whose value goes to TrainingArguments(ddp_backend=) in launched ranks;
        intelrt launch, or ``None``.
    """
