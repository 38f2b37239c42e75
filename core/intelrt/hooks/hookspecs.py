"""Every ``intelrt_*`` hook: one per concern, typed, documented (pytest's hookspec style).

Conventions
-----------
* Hooks are called with keyword arguments; an implementation may accept any subset of them.
* Selection hooks (``intelrt_select_*``, ``intelrt_wrap_compile``) are *firstresult*: the first
  non-``None`` answer wins, and ``None`` means "not mine". Mark an implementation
  ``tryfirst=True`` to override one decision of a built-in backend without re-implementing it.
* Other hooks collect the answers of every plugin.
* A hook raises :class:`intelrt.plugin.PlanError` (or another ``IntelrtError``) to refuse a
  request with a message for the user; any other exception is reported as a fault of the plugin.
* ``backend`` is the :class:`~intelrt.plugin.BackendStatus` chosen for the run: compare
  ``backend.name`` with the backend you own before answering.
* ``env`` is the environment the plan is made for (the caller's, or the launched process's);
  read it, never write ``os.environ``.
* Hooks must not import torch, transformers or a vendor stack at module import time.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Any

from .markers import PROJECT, hookspec
from .payloads import DecisionValue
from .types import BackendStatus, Decision, EnvVar, Finding, Setting

if TYPE_CHECKING:
    from ..planning.model_source import ModelInfo
    from ..planning.plan import Plan
    from ..planning.request import Request

__all__ = ["PROJECT", "RESULT_TYPES", "hookspec"]


@hookspec
def intelrt_detect(env: Mapping[str, str]) -> Sequence[BackendStatus] | None:
    """Report the backends this plugin owns, available or not, each with the reason.

    Called once per detection. Must not initialise devices beyond what answering "is it
    available, how many devices" needs, and must not raise for a missing stack: report
    ``available=False`` with the reason instead.

    :param env: the environment to judge (visibility masks and the like).
    :returns: one :class:`BackendStatus` per backend owned, or ``None`` for none.
    """


@hookspec
def intelrt_setup_env(backend: BackendStatus, request: Request, env: Mapping[str, str]
                      ) -> Sequence[EnvVar | Finding] | None:
    """Environment variables the run needs before the device driver loads, and warnings about
    the ones already in ``env``.

    The host keeps every value the user already set (SPEC C2) unless ``EnvVar.overwrite_user``
    says the user asked for this one in the same call, and reports each change.

    :returns: ``EnvVar`` items to set and ``Finding`` items to report, or ``None``.
    """


@hookspec(firstresult=True)
def intelrt_select_dtype(backend: BackendStatus, request: Request, model: ModelInfo,
                         env: Mapping[str, str], decisions: Mapping[str, DecisionValue]
                         ) -> Decision | None:
    """Choose the weights dtype (``"float32"``, ``"bfloat16"``, ``"float16"``).

    ``request.dtype`` is ``"auto"`` or the user's choice; a forced choice must be returned
    unchanged or refused with ``PlanError``. Stops at the first non-``None`` result.
    """


@hookspec(firstresult=True)
def intelrt_select_parallelism(backend: BackendStatus, request: Request, model: ModelInfo,
                               env: Mapping[str, str], decisions: Mapping[str, DecisionValue]
                               ) -> Decision | None:
    """Decide how the run spreads over processes, one per device: value a
    :class:`~intelrt.plugin.ParallelismChoice` — the training strategy (``none``, ``ddp``,
    ``fsdp``, ``deepspeed``) with the ``fsdp_config`` or DeepSpeed config it hands
    ``TrainingArguments``, the inference strategy (``none``, ``tensor``) with the
    ``distributed_config`` it hands ``from_pretrained``, the world size it was planned for, and
    the launch command when this process is not yet one of the ranks.

    ``request.sharding`` (training) and ``request.parallel`` (inference) are ``"auto"`` or the
    user's choice; refuse a strategy your backend's collective library cannot run with
    ``PlanError`` saying the way out. :func:`~intelrt.plugin.decide_parallelism` holds intelrt's
    rules (model size, device memory, world size); a backend answers by calling it with its
    :class:`~intelrt.plugin.ShardingSupport`. Decided for backend-only plans too (``model`` then
    has no weights). ``decisions`` holds the dtype and quantization. Stops at the first
    non-``None`` result.
    """


@hookspec(firstresult=True)
def intelrt_select_placement(backend: BackendStatus, request: Request, model: ModelInfo,
                             env: Mapping[str, str], decisions: Mapping[str, DecisionValue]
                             ) -> Decision | None:
    """Choose ``device_map`` for ``from_pretrained`` (``"xpu"``, ``"xpu:2"``, ``"auto"``, ``"cpu"`` …),
    or :func:`~intelrt.plugin.limited_placement` (``device_map`` plus ``max_memory``) when
    accelerate may use only some of the devices this process sees.

    ``decisions`` holds the dtype and the parallelism already chosen: in a launched rank, or when
    the weights are sharded as they load, :func:`~intelrt.plugin.rank_placement` answers.
    Stops at the first non-``None`` result.
    """


@hookspec(firstresult=True)
def intelrt_select_attention(backend: BackendStatus, request: Request, model: ModelInfo,
                             env: Mapping[str, str], decisions: Mapping[str, DecisionValue]
                             ) -> Decision | None:
    """Choose ``attn_implementation`` (``"sdpa"``, ``"eager"``, ``"flash_attention_2"`` …).

    ``request.attention`` is ``"auto"`` or the user's choice; refuse an impossible forced choice
    with ``PlanError`` naming the reason. Stops at the first non-``None`` result.
    """


@hookspec(firstresult=True)
def intelrt_select_kernels(backend: BackendStatus, request: Request, model: ModelInfo,
                           env: Mapping[str, str], decisions: Mapping[str, DecisionValue]
                           ) -> Decision | None:
    """Decide hub kernels: value a :class:`~intelrt.plugin.KernelChoice` (``use_kernels``, the
    ``kernel_mapping`` layer → {device: kernel}, ``use_local_kernel``); intelrt builds
    transformers' ``KernelConfig`` from it.

    Stops at the first non-``None`` result.
    """


@hookspec(firstresult=True)
def intelrt_select_quantization(backend: BackendStatus, request: Request, model: ModelInfo,
                                env: Mapping[str, str], decisions: Mapping[str, DecisionValue]
                                ) -> Decision | None:
    """Decide quantization: value ``None`` (none) or a :class:`~intelrt.plugin.QuantizationChoice`
    (``method="bitsandbytes"``, ``bits`` 4 or 8, the 4-bit details); intelrt builds transformers'
    ``BitsAndBytesConfig`` from it.

    ``request.quantization`` is ``None``, ``"4bit"`` or ``"8bit"``. Stops at the first
    non-``None`` result.
    """


@hookspec(firstresult=True)
def intelrt_select_compile(backend: BackendStatus, request: Request, model: ModelInfo,
                           env: Mapping[str, str], decisions: Mapping[str, DecisionValue]
                           ) -> Decision | None:
    """Decide ``torch.compile``: value a :class:`~intelrt.plugin.CompileChoice` (``enabled``,
    ``backend``, ``mode``). ``request.compile`` is ``"auto"``, ``"none"``, ``"on"`` or a
    ``torch.compile`` backend name. Stops at the first non-``None`` result.
    """


@hookspec(firstresult=True)
def intelrt_select_batching(backend: BackendStatus, request: Request, model: ModelInfo,
                            env: Mapping[str, str], decisions: Mapping[str, DecisionValue]
                            ) -> Decision | None:
    """Decide how a list of prompts is generated: value a :class:`~intelrt.plugin.BatchingChoice`
    (``method`` ``continuous`` or ``padded``; for continuous batching ``use_graphs`` /
    ``use_async_batching``, where ``None`` leaves the choice to transformers, SPEC X7). ``request.batching`` and
    ``request.graphs`` are ``"auto"`` or forced. Stops at the first non-``None`` result.
    """


@hookspec(firstresult=True)
def intelrt_wrap_compile(backend: BackendStatus, compile_fn: Callable[..., Any]
                         ) -> Callable[..., Any] | None:
    """Return a replacement for ``torch.compile`` that this backend needs installed process-wide
    (Gaudi's ``hpu_backend`` switch, SPEC H9), or ``None``.

    The host installs it once per process and never stacks it. Stops at the first non-``None``
    result.
    """


@hookspec(firstresult=True)
def intelrt_select_collective(backend: BackendStatus, request: Request, env: Mapping[str, str]
                              ) -> Decision | None:
    """Choose the ``torch.distributed`` backend (``"gloo"``, ``"nccl"``, ``"xccl"``, ``"hccl"``).

    Stops at the first non-``None`` result.
    """


@hookspec
def intelrt_training_arguments(backend: BackendStatus, plan: Plan, overrides: Mapping[str, Any]
                               ) -> Sequence[Setting] | None:
    """``TrainingArguments`` keywords this backend needs (precision, ``ddp_backend``,
    ``torch_compile_backend`` …), each with its reason.

    ``overrides`` are the user's own keywords: they win; raise ``PlanError`` when one cannot
    work on this backend (e.g. ``bf16=True`` on a device without bf16).
    """


@hookspec
def intelrt_launch_env(backend: BackendStatus, plan: Plan, nproc: int, env: Mapping[str, str]
                       ) -> Sequence[EnvVar | Finding] | None:
    """Extra environment for processes started by ``intelrt launch`` (shared visibility mask,
    ``MASTER_PORT`` …) and warnings about the launch, on top of ``intelrt_setup_env``.
    """


@hookspec
def intelrt_diagnose(backends: Sequence[BackendStatus], env: Mapping[str, str], probe: bool
                     ) -> Sequence[Finding] | None:
    """Findings for ``intelrt doctor``: what is wrong or worth knowing, each with its fix.

    ``probe`` is True for ``intelrt doctor --probe``: only then may a plugin run vendor tools
    (``hl-smi``, ``xpu-smi``) to ask the machine; detection and planning never do."""


@hookspec(firstresult=True)
def intelrt_select_decode(backend: BackendStatus, request: Request, model: ModelInfo,
                          env: Mapping[str, str], decisions: Mapping[str, DecisionValue]
                          ) -> Decision | None:
    """Decide how ``Loaded.generate`` decodes: value a :class:`~intelrt.plugin.DecodeChoice`
    (``method`` ``fast`` or ``generate``, ``cache``, ``graphs``, ``compile``, ``step``,
    ``compile_options``, ``attention_kernel``).

    ``"fast"`` is intelrt's decode loop (static KV cache, one step function per token with no
    host synchronisation, optionally compiled with the ``compile`` backend and captured into the
    device graph kind named by ``graphs``, e.g. ``"cuda"``, ``"xpu"``, ``"hpu"``); the backend
    that names a graph kind must also answer :func:`intelrt_decode_graph`. ``"generate"`` is
    transformers' plain ``model.generate``; say why in the reason. ``attention_kernel=True`` runs
    the compact step's decode attention as intelrt's one Triton kernel per layer: answer it only
    for a device whose Triton runs that kernel. ``request.graphs``, ``request.attention_kernel``
    (``"on"`` / ``"off"``) and ``request.compile`` (``"none"`` or a backend) are the user's word:
    honour them or raise ``PlanError``. ``decisions`` holds everything decided before (``compile``,
    ``placement``, ``quantization`` …). Stops at the first non-``None`` result.
    """


@hookspec(firstresult=True)
def intelrt_decode_graph(backend: BackendStatus, kind: str) -> Callable[..., Any] | None:
    """Return the device-graph capturer of graph ``kind`` (the plan's ``decode.graphs``), or ``None``.

    The capturer is called as ``capture(step, warmup=n)`` on the thread that decodes: it runs
    ``step()`` — a function that reads and writes only tensors that stay allocated on the device —
    ``n`` times for real (these runs are real decode steps: kernels get compiled, workspaces
    allocated), then records one call into a device graph without running it, and returns
    ``replay()``, a function that re-runs the recorded work. It raises if capture fails; the
    caller then decodes without graphs and says so. This hook must only build the function, never
    capture here (hooks may run on another thread). Stops at the first non-``None`` result.
    """


#: What each hook must return, checked by the host (SPEC C6).
RESULT_TYPES: dict[str, tuple[str, tuple[type, ...]]] = {
    "intelrt_detect": ("list", (BackendStatus,)),
    "intelrt_setup_env": ("list", (EnvVar, Finding)),
    "intelrt_select_dtype": ("one", (Decision,)),
    "intelrt_select_parallelism": ("one", (Decision,)),
    "intelrt_select_placement": ("one", (Decision,)),
    "intelrt_select_attention": ("one", (Decision,)),
    "intelrt_select_kernels": ("one", (Decision,)),
    "intelrt_select_quantization": ("one", (Decision,)),
    "intelrt_select_compile": ("one", (Decision,)),
    "intelrt_select_batching": ("one", (Decision,)),
    "intelrt_wrap_compile": ("callable", ()),
    "intelrt_select_collective": ("one", (Decision,)),
    "intelrt_training_arguments": ("list", (Setting,)),
    "intelrt_launch_env": ("list", (EnvVar, Finding)),
    "intelrt_diagnose": ("list", (Finding,)),
    "intelrt_select_decode": ("one", (Decision,)),
    "intelrt_decode_graph": ("callable", ()),
}
