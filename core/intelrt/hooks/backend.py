"""One object per kind of device (vLLM's ``Platform``): :class:`Backend`, the facts it declares and
the decisions it may take, and :class:`Situation`, what is known when a decision is asked.

A backend is a subclass of :class:`Backend`: class attributes hold its facts (name, torch device
type, priority, compiler …), :meth:`Backend.detect` reports whether it is available here, and
one optional method per concern proposes an automatic value (``select_<concern>``) or checks a
value the user forced (``check_<concern>``). Every method answers ``None`` for "the generic rule
decides": the host asks the chosen backend, then intelrt's generic rules (``backends/generic.py``),
so a backend writes only what differs on its device. A plugin contributes its backend classes with
the ``intelrt_backends`` hook; third-party plugins can still override one decision of any backend
with a selection hook (``intelrt_select_<concern>``, ``tryfirst``).

The host makes one instance per detected backend, holding its detection result (:attr:`status`).
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, ClassVar

from .concerns import Decided
from .model import ModelInfo
from .payloads import CompileChoice, KernelChoice
from .request import Request
from .types import BackendStatus, Decision, DeviceInfo, EnvVar, Finding, Setting

if TYPE_CHECKING:
    from .plan import Plan

FSDP_WAYS = ("accelerate", "transformers")


@dataclass(frozen=True)
class Situation:
    """What is known when a backend is asked for a decision: the request, the model, the
    environment the plan is made for (read it, never write ``os.environ``) and the decisions made
    so far (earlier concerns of :class:`~intelrt.hooks.concerns.Decided`)."""

    request: Request
    model: ModelInfo
    env: Mapping[str, str]
    decided: Decided = field(default_factory=Decided)


@dataclass(frozen=True)
class Endorsement:
    """A backend's word on a value the user forced (``check_<concern>``): it runs here, with what to
    add to the decision. The host keeps the value and writes the reason
    ``"requested by the user; <reason>"``. Refuse a value with ``PlanError`` instead."""

    reason: str = ""
    claim: str | None = None
    notes: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        if not isinstance(self.reason, str) or not all(isinstance(n, str) for n in self.notes):
            raise TypeError("Endorsement.reason and .notes must be strs")


@dataclass(frozen=True)
class ShardingSupport:
    """What a backend's collective library runs: the facts intelrt's parallelism rule needs.

    A strategy this backend cannot run carries the sentence that says why and what to do instead
    (``*_missing``): a forced request for it is refused with that sentence (``PlanError``), and
    ``auto`` never picks it.
    """

    collective: str | None
    """The ``torch.distributed`` backend the ranks use (``None``: no usable one here)."""
    collective_missing: str = ""
    fsdp: str | None = "accelerate"
    """How FSDP2 is built: ``"accelerate"`` (``TrainingArguments(fsdp=True, fsdp_config=...)``) or
    ``"transformers"`` (sharded as the weights load, ``DistributedConfig(fsdp_size=N)``)."""
    fsdp_source: str = ("accelerate builds FSDP2 (FullyShardedDataParallelPlugin, fsdp_version 2) from "
                        "TrainingArguments(fsdp=True, fsdp_config=...)")
    fsdp_missing: str = ""
    deepspeed_missing: str | None = None
    """Why DeepSpeed cannot run on this backend at all (``None``: it can, once installed)."""
    deepspeed_install: str = "pip install deepspeed"
    tensor_missing: str | None = None
    """Why tensor parallel cannot run here (``None``: it can)."""
    prefer_deepspeed: bool = False
    """``auto`` shards with DeepSpeed when it is installed (what the vendor documents), else FSDP."""
    claim: str | None = None
    notes: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        if self.fsdp is not None and self.fsdp not in FSDP_WAYS:
            raise TypeError(f"ShardingSupport.fsdp must be one of {FSDP_WAYS} or None, got {self.fsdp!r}")
        if self.fsdp is None and not self.fsdp_missing:
            raise TypeError("ShardingSupport without FSDP must say why (fsdp_missing)")
        if self.collective is None and not self.collective_missing:
            raise TypeError("ShardingSupport without a collective must say why (collective_missing)")


UNDECLARED_SHARDING = ShardingSupport(
    None, collective_missing="the backend declares no collective library (its Backend.sharding_support)",
    fsdp=None, fsdp_missing="the backend does not say how FSDP2 runs there",
    deepspeed_missing="the backend does not say whether DeepSpeed runs there",
    tensor_missing="the backend does not say whether tensor parallel runs there")


class Backend:
    """A kind of device: its facts and the decisions that differ on it.

    Subclasses set the class attributes and override the methods their device needs; every method
    left alone answers ``None``, and intelrt's generic rule decides.
    """

    name: ClassVar[str]
    """What users pass as ``backend=`` (``"xpu"``)."""
    device_type: ClassVar[str]
    """The torch device type (``"xpu"``, ``"hpu"``, ``"cuda"``, ``"cpu"``)."""
    priority: ClassVar[int] = 0
    """``backend="auto"`` picks the available backend with the highest priority; the CPU is 0."""
    compiler: ClassVar[str] = "inductor"
    """The ``torch.compile`` backend ``compile="on"`` compiles with."""
    fast_decode_4bit: ClassVar[bool] = False
    """intelrt's decode loop runs bitsandbytes 4-bit models here (their own forward, not compiled)."""
    max_padded_batch: ClassVar[int] = 64
    """Prompts per padded batch when a list is generated in padded batches."""
    ranks_are_devices: ClassVar[bool] = True
    """A launched rank drives one device (``False`` on the CPU, whose ranks are processes)."""
    indexed_devices: ClassVar[bool] = True
    """Devices are named ``{device_type}:N`` in this process (``False`` on Gaudi: the device is ``hpu``)."""
    fp16_training: ClassVar[bool] = True
    """A float16 plan trains in fp16 mixed precision here (``False`` on the CPU)."""
    tile_ids: ClassVar[bool] = False
    """``devices=`` may name ``"card.tile"`` ids here (Intel GPUs in COMPOSITE mode); elsewhere they are refused."""

    def __init__(self, status: BackendStatus) -> None:
        if status.name != self.name:
            raise TypeError(f"{type(self).__name__} is backend {self.name!r}; its status names {status.name!r}")
        self.status = status

    def __repr__(self) -> str:
        return f"<{type(self).__name__} {self.name}: {'available' if self.available else 'unavailable'}>"

    # -- the detection result, for reading (facts every hook uses) ---------------------------------
    @property
    def available(self) -> bool:
        """Whether detection found it usable here."""
        return self.status.available

    @property
    def reason(self) -> str:
        """Why it is available or not, in words a user can act on."""
        return self.status.reason

    @property
    def devices(self) -> tuple[DeviceInfo, ...]:
        """The devices this process sees (index, name, memory, bf16)."""
        return self.status.devices

    @property
    def device_count(self) -> int:
        """How many devices this process sees."""
        return self.status.device_count

    @property
    def versions(self) -> Mapping[str, str]:
        """The versions and build facts detection recorded (torch, the vendor stack …)."""
        return self.status.versions

    @property
    def notes(self) -> tuple[str, ...]:
        """What detection found worth saying next to the backend."""
        return self.status.notes

    @property
    def plugin(self) -> str:
        """The plugin that contributed this backend (filled in by the host)."""
        return self.status.plugin

    # -- detection ----------------------------------------------------------------------------------
    @classmethod
    def detect(cls, env: Mapping[str, str]) -> BackendStatus:
        """Whether this backend is available here, with the reason and its devices.

        Must not initialise devices beyond what answering "is it available, how many devices" needs,
        and must not raise for a missing stack: report ``available=False`` with the reason.
        :param env: the environment to judge (visibility masks and the like)."""
        raise NotImplementedError(f"{cls.__name__} must implement detect()")

    # -- facts that depend on the detection ------------------------------------------------------
    @property
    def sharding_support(self) -> ShardingSupport:
        """What the collective library of this backend runs (DDP, FSDP2, DeepSpeed, tensor parallel)."""
        return UNDECLARED_SHARDING

    @property
    def variant(self) -> str | None:
        """Which device of its kind this is, where what runs differs by it: ``arc`` or ``max`` for
        Intel GPUs, ``gaudi1`` / ``gaudi2`` / ``gaudi3`` for Gaudi (``None``: one kind only). The
        quantization table has a column per variant (docs/quantization.md); CUDA's compute
        capability is ``versions["compute_capability"]``."""
        return None

    # -- the run's environment, launch, training, diagnosis --------------------------------------
    def run_environment(self, s: Situation) -> Sequence[EnvVar | Finding] | None:
        """Variables the run needs before the device driver loads, and findings about the ones in
        ``s.env``. The host keeps every value the user set (SPEC C2) unless ``EnvVar.overwrite_user``."""
        return None

    def launch_environment(self, plan: Plan, nproc: int, env: Mapping[str, str]) -> Sequence[EnvVar | Finding] | None:
        """Extra variables and findings for the ``nproc`` processes ``intelrt launch`` starts."""
        return None

    def written_by_stack(self, env: Mapping[str, str]) -> Collection[str]:
        """The names of ``env``'s variables that this device's vendor stack wrote into this process
        since intelrt was imported (:func:`~intelrt.plugin.environment_at_import` holds the environment
        then) — its own defaults, not the user's: ``intelrt launch`` neither keeps them as the user's
        nor passes them to the ranks (SPEC C2). Default: none."""
        return ()

    def training_arguments(self, plan: Plan, overrides: Mapping[str, Any]) -> Sequence[Setting] | None:
        """``TrainingArguments`` keywords this device needs, on top of the generic ones; ``overrides``
        are the user's own keywords: they win; raise ``PlanError`` for one that cannot work here."""
        return None

    def diagnose(self, env: Mapping[str, str], probe: bool) -> Sequence[Finding] | None:
        """Findings for ``intelrt doctor`` about this backend, available or not. ``probe``: vendor
        tools (``hl-smi`` …) may run; detection and planning never run them."""
        return None

    def compile_wrapper(self, compile_fn: Callable[..., Any]) -> Callable[..., Any] | None:
        """A replacement for ``torch.compile`` this device needs installed process-wide (Gaudi's
        ``hpu_backend`` switch, SPEC H9), wrapping ``compile_fn``; installed once, never stacked."""
        return None

    def attention_implementation(self, name: str) -> tuple[Callable[..., Any], Callable[..., Any] | None] | None:
        """An ``attn_implementation`` this device adds to transformers, for the plan's attention ``name``:
        ``(attention function, mask function)``, which intelrt registers in transformers'
        ``AttentionInterface`` and ``AttentionMaskInterface`` under ``name`` before ``from_pretrained``
        (``None`` mask: transformers' sdpa mask). ``None``: ``name`` is not this backend's. Only build it here
        (it may import the vendor stack: load time only)."""
        return None

    def graph_capturer(self, kind: str) -> Callable[..., Any] | None:
        """The device-graph capturer of graph ``kind`` (the plan's ``decode.graphs``).

        It is called as ``capture(step, warmup=n)`` on the decoding thread: it runs ``step()`` ``n``
        times for real, records one call into a device graph and returns ``replay()``. It raises if
        capture fails (the decoder then runs without graphs and says so). Only build it here."""
        return None

    # -- automatic decisions (None: the generic rule decides) ------------------------------------
    def select_dtype(self, s: Situation) -> Decision | None:
        return None

    def select_quantization(self, s: Situation) -> Decision | None:
        return None

    def select_parallelism(self, s: Situation) -> Decision | None:
        return None

    def select_placement(self, s: Situation) -> Decision | None:
        return None

    def select_attention(self, s: Situation) -> Decision | None:
        return None

    def select_kernels(self, s: Situation) -> Decision | None:
        return None

    def select_compile(self, s: Situation) -> Decision | None:
        return None

    def select_decode(self, s: Situation) -> Decision | None:
        return None

    def select_batching(self, s: Situation) -> Decision | None:
        return None

    def select_buckets(self, s: Situation) -> Decision | None:
        return None

    def select_collective(self, s: Situation) -> Decision | None:
        return None

    # -- forced values: refuse (PlanError) or endorse (None: the generic check decides) ----------
    def check_dtype(self, value: str, s: Situation) -> Endorsement | None:
        return None

    def check_attention(self, value: str, s: Situation) -> Endorsement | None:
        return None

    def check_kernels(self, value: KernelChoice, s: Situation) -> Endorsement | None:
        return None

    def check_compile(self, value: CompileChoice, s: Situation) -> Endorsement | None:
        return None
