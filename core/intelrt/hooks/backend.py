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

import contextlib
import logging
from collections.abc import Callable, Collection, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, ClassVar

from .concerns import Decided
from .model import ModelInfo
from .options import DeviceId
from .payloads import CompileChoice, DecodeChoice, KernelChoice
from .quantization import QuantizationColumns
from .request import Request
from .types import BackendStatus, Decision, DeviceInfo, EnvVar, Finding, Setting

PlanArgument = Any
"""The :class:`~intelrt.hooks.plan.Plan` a few methods take. The plan holds its backend, so naming
the class here would make the two modules import each other; the base methods never read it, and
an override annotates ``plan: Plan`` (a narrower parameter than ``Any`` passes mypy's override
check, where a Protocol here would fail it)."""

log = logging.getLogger(__name__)
FSDP_WAYS = ("accelerate", "transformers")
HOST_COLLECTIVES = ("gloo", "mpi")
"""``torch.distributed`` backends that run on the host, beside any device's own collective."""


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
    """The ``torch.distributed`` backend the ranks use (``None``: no usable one here): the plan's
    ``collective`` decision, and what ``TrainingArguments(ddp_backend=)`` may name besides the
    host's own ``gloo`` and ``mpi`` (:data:`HOST_COLLECTIVES`)."""
    collective_reason: str = ""
    """Why :attr:`collective` is this device's library (the collective decision's reason)."""
    collective_notes: tuple[str, ...] = ()
    """What the collective decision adds (how ranks are started, what the library cannot reduce …)."""
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
    # -- decoding: the facts intelrt's one decode rule and one batching rule read (backends/decode_rules.py)
    fast_decode: ClassVar[bool] = False
    """intelrt's fast decode loop (static KV cache, one step per token) runs here; ``False``:
    transformers' ``generate`` decodes."""
    fast_decode_4bit: ClassVar[bool] = False
    """intelrt's decode loop runs bitsandbytes 4-bit models here (their own forward, not compiled)."""
    compact_decode: ClassVar[bool] = False
    """The loop's step is intelrt's compact step for the families it reproduces (fused projections, its
    own KV cache); ``False``: always the model's own forward (where the compact step is unmeasured)."""
    decode_compiler: ClassVar[str | None] = None
    """What the loop's step compiles with when the work pays for it (``None``: it runs uncompiled
    unless ``compile=`` or ``warmup=`` asks, with :attr:`compiler`)."""
    compiles_quantized: ClassVar[bool] = False
    """The step compiles over quantized layers of the model's own forward here (Gaudi runs INC FP8 under
    ``hpu_backend``, as vLLM's Gaudi plugin does); ``False``: only torchao's tensors inside the compact step
    compile (measured on CUDA), other quantized steps run uncompiled."""
    decode_compile_options: ClassVar[Mapping[str, object]] = {}
    """Inductor settings measured for the compiled step here (CUDA's coordinate-descent tuning)."""
    compile_worker_missing: ClassVar[str | None] = None
    """Why no compile worker process can run beside the decoding one here (``None``: one can, and work
    of unknown length decodes at once while the worker builds the compiled step — ``warmup="adaptive"``,
    ``decoding/compile_worker.py``); with a reason, the adaptive step compiles in the decoding process
    once that pays."""
    graphs_default_from: ClassVar[str | None] = None
    """The torch version from which a step is captured in :attr:`graph_kind` graphs by default (before
    it, only with ``graphs="on"``); ``None``: by default wherever they exist."""
    decode_source: ClassVar[str] = ""
    """Whose practice this backend's decode defaults follow (the plan quotes it: vLLM's XPU and Gaudi
    plugins …)."""
    max_padded_batch: ClassVar[int] = 64
    """Prompts per padded batch when a list is generated in padded batches (rows of the fast loop's
    engine when a list goes through it)."""
    engine_batching: ClassVar[bool] = False
    """A list of prompts goes through the fast loop's in-flight engine when the loop is planned (measured
    against transformers' continuous batching); ``False``: through transformers' ``generate_batch``."""
    continuous_graphs: ClassVar[bool | None] = None
    """Whether transformers' continuous batching captures device graphs here unless ``graphs=`` says
    (``None``: transformers' own choice)."""
    async_batching: ClassVar[bool | None] = None
    """Whether transformers' continuous batching double-buffers its steps here (``None``: its own choice)."""
    kv_sizing: ClassVar[str] = "memory"
    """How transformers' continuous batching sizes its KV cache here: ``"memory"`` (from free memory) or
    ``"requests"`` (from the requests, where measuring free memory takes seconds: the CPU)."""
    ranks_are_devices: ClassVar[bool] = True
    """A launched rank drives one device (``False`` on the CPU, whose ranks are processes)."""
    indexed_devices: ClassVar[bool] = True
    """Devices are named ``{device_type}:N`` in this process (``False`` on Gaudi: the device is ``hpu``)."""
    fp16_training: ClassVar[bool] = True
    """A float16 plan trains in fp16 mixed precision here (``False`` on the CPU)."""
    tile_ids: ClassVar[bool] = False
    """``devices=`` may name ``"card.tile"`` ids here (Intel GPUs in COMPOSITE mode); elsewhere they are refused."""
    step_attention: ClassVar[str] = "torch"
    """How an engine step's flat queries attend the paged cache here (``STEP_ATTENTIONS``): ``triton``
    where the device runs intelrt's Triton kernels, ``torch`` elsewhere."""
    step_attention_reason: ClassVar[str] = "intelrt's Triton attention kernels are not run on this device"
    """Why :attr:`step_attention` is what it is (the plan quotes it)."""
    matrix_tflops: ClassVar[Mapping[str, float]] = {}
    """Dense bf16 matrix throughput (TFLOP/s) by a substring of the device's name, where it is known
    (the engine sizes its steps by it: ``backends/sizing.py``, ``step_tokens``); longest match wins."""
    quantization_columns: ClassVar[QuantizationColumns | None] = None
    """This backend's columns of intelrt's quantization table (one per :attr:`variant`) with a cell per
    method: whether it runs here, with which package, dtype and kernel (``None``: no quantization
    method is known to run here). intelrt's generic quantization rule decides from them, and
    docs/quantization.md shows every installed backend's columns."""
    ray_resource: ClassVar[str | None] = None
    """The Ray resource one device of this kind is (``"GPU"`` for NVIDIA and Intel GPUs, ``"HPU"`` for Gaudi, as
    Ray's accelerator managers name them): what a Ray Serve replica asks for per device (``None``: a replica
    asks for CPUs)."""
    graph_kind: ClassVar[str | None] = None
    """The device graphs a decode step is captured in here (``"cuda"``, ``"xpu"``, ``"hpu"``: the plan's
    ``decode.graphs``), whose capturer :meth:`graph_capturer` builds; ``None``: no device graphs."""
    computes_on_host: ClassVar[bool] = False
    """Steps run on the host's own cores (the CPU): the server's decode thread then leaves the GIL to
    the event loop after handing text over, and a step's prompt chunks attend one by one (the CPU's
    SDPA gains nothing from packing them); an accelerator's steps wait on the device instead."""
    varlen_attention: ClassVar[bool] = False
    """Prompt chunks attend the paged cache through torch's variable-length FlashAttention kernel
    (``torch.nn.attention.varlen.varlen_attn`` with a block table) where it is installed: NVIDIA GPUs."""

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

    def matrix_peak(self) -> tuple[str, float] | None:
        """(the device's name, its dense bf16 TFLOP/s) from :attr:`matrix_tflops` for the first visible
        device, or ``None`` when its name matches no entry."""
        if not self.devices:
            return None
        name = self.devices[0].name
        found = [key for key in self.matrix_tflops if key.lower() in name.lower()]
        if not found:
            return None
        return name, float(self.matrix_tflops[max(found, key=len)])

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
        Intel GPUs, ``gaudi1`` / ``gaudi2`` / ``gaudi3`` for Gaudi (``None``: one kind only). Each of
        :attr:`quantization_columns` is a variant's (docs/quantization.md); CUDA's compute
        capability is ``versions["compute_capability"]``."""
        return None

    # -- the run's environment, launch, training, diagnosis --------------------------------------
    def run_environment(self, s: Situation) -> Sequence[EnvVar | Finding] | None:
        """Variables the run needs before the device driver loads, and findings about the ones in
        ``s.env``. The host keeps every value the user set (SPEC C2) unless ``EnvVar.overwrite_user``."""
        return None

    def launch_environment(self, plan: PlanArgument, nproc: int, env: Mapping[str, str]) -> Sequence[EnvVar | Finding] | None:
        """Extra variables and findings for the ``nproc`` processes ``intelrt launch`` starts."""
        return None

    def device_group_problem(self, devices: Sequence[DeviceId]) -> str | None:
        """Why these devices cannot work together as one group (one serving replica's devices, a
        tensor-parallel run); ``None``: they can. Default: any set can."""
        return None

    def written_by_stack(self, env: Mapping[str, str]) -> Collection[str]:
        """The names of ``env``'s variables that this device's vendor stack wrote into this process
        since intelrt was imported (:func:`~intelrt.plugin.environment_at_import` holds the environment
        then) — its own defaults, not the user's: ``intelrt launch`` neither keeps them as the user's
        nor passes them to the ranks (SPEC C2). Default: none."""
        return ()

    def training_arguments(self, plan: PlanArgument, overrides: Mapping[str, Any]) -> Sequence[Setting] | None:
        """``TrainingArguments`` keywords this device needs, on top of the generic ones; ``overrides``
        are the user's own keywords: they win; raise ``PlanError`` for one that cannot work here."""
        return None

    def diagnose(self, env: Mapping[str, str], probe: bool) -> Sequence[Finding] | None:
        """Findings for ``intelrt doctor`` about this backend, available or not. ``probe``: vendor
        tools (``hl-smi`` …) may run; detection and planning never run them."""
        return None

    def acquire_device(self, plan: PlanArgument) -> None:
        """Take this process's device for ``plan`` before the model is built (``load()`` calls it once
        the plan's variables are in this process), raising an ``IntelrtError`` that says what holds
        it and how to get another when the device cannot be had. Default: nothing (the first tensor
        takes the device). Only do it here (it may import the vendor stack: load time only)."""
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

    def graph_capturer(self) -> Callable[..., Any] | None:
        """The capturer of this backend's device graphs (:attr:`graph_kind`, the plan's ``decode.graphs``).

        It is called as ``capture(step, warmup=n)`` on the decoding thread: it runs ``step()`` ``n``
        times for real, records one call into a device graph and returns ``replay()``. It raises if
        capture fails (the decoder then runs without graphs and says so). Only build it here.
        (Before intelrt 0.2 it took the graph kind, ``graph_capturer(kind)``, and answered ``None``
        for another kind: that form still works, with a ``DeprecationWarning``, until 0.3.)"""
        return None

    # -- the run stage (vLLM's current_platform): what the decode engine and the server ask ----------
    # Every query imports torch when called (never at import) and takes the torch device the model
    # is on; the defaults ask torch's own modules, so a backend overrides only what its runtime lacks.
    def device_module(self) -> Any | None:
        """The torch module that answers this device's run-time queries: ``torch.accelerator`` when
        this device is the process's accelerator and torch has its memory queries, else
        ``torch.<device_type>`` (``torch.cuda``, ``torch.xpu``, ``torch.hpu``); ``None`` on the CPU."""
        import torch

        accelerator = getattr(torch, "accelerator", None)
        current = accelerator.current_accelerator() if accelerator is not None and accelerator.is_available() else None
        if current is not None and current.type == self.device_type and hasattr(accelerator, "get_memory_info"):
            return accelerator
        return getattr(torch, self.device_type, None)

    def _runtime_modules(self) -> list[Any]:
        """``device_module()`` and then ``torch.<device_type>`` (each asked in turn), or none."""
        import torch

        module = self.device_module()
        if module is None:
            return []
        return [m for m in dict.fromkeys((module, getattr(torch, self.device_type, None))) if m is not None]

    def _runtime_call(self, name: str, *args: Any) -> Any:
        """``name(*args)`` of the first runtime module that has it and answers; ``None`` when none does."""
        for owner in self._runtime_modules():
            function = getattr(owner, name, None)
            if function is None:
                continue
            try:
                return function(*args)
            except Exception as exc:  # noqa: BLE001 - the next module, or nothing measured
                log.debug("intelrt: %s.%s failed on %s (%s)", getattr(owner, "__name__", owner), name, self.name, exc)
        return None

    def memory_info(self, device: Any) -> tuple[int, int] | None:
        """(free, total) bytes of ``device``'s memory as its runtime reports them (``get_memory_info``,
        else ``mem_get_info``); ``None`` on the CPU or for a runtime with neither."""
        for owner in self._runtime_modules():
            query = getattr(owner, "get_memory_info", None) or getattr(owner, "mem_get_info", None)
            if query is None:
                continue
            try:
                free, total = query(device)
            except Exception as exc:  # noqa: BLE001 - the next query, or no budget from the device (said at start)
                log.debug("intelrt: %s reports no free memory through %s (%s)", device,
                          getattr(owner, "__name__", owner), exc)
                continue
            return int(free), int(total)
        return None

    def empty_cache(self, device: Any = None) -> None:
        """Hand the allocator's cached, unused blocks back to the device."""
        self._runtime_call("empty_cache")

    def reset_peak_memory(self, device: Any) -> None:
        """Start counting the allocator's peak anew."""
        self._runtime_call("reset_peak_memory_stats", device)

    def memory_in_use(self, device: Any, *, peak: bool = False, cached: bool = True) -> int | None:
        """Bytes of ``device``'s memory this process's allocator holds (``cached``: with its cached,
        unused blocks, as the device counts them; else what tensors take), or the most it held since
        :meth:`reset_peak_memory` (``peak``); ``None`` where the runtime does not count (the CPU)."""
        name = ("max_" if peak else "") + ("memory_reserved" if cached else "memory_allocated")
        held = self._runtime_call(name, device)
        return None if held is None else int(held)

    def synchronize(self, device: Any = None) -> None:
        """Wait until ``device`` (default: the current one) has run everything queued on it (nothing
        to wait for on the CPU)."""
        if self.device_module() is not None:
            import torch

            torch.accelerator.synchronize(device)

    @contextlib.contextmanager
    def side_stream(self, device: Any) -> Iterator[None]:
        """Device work in the block runs on a stream of its own (a background compile beside the
        decoding thread's steps); on the CPU, as it is."""
        if self.device_module() is None:
            yield
            return
        import torch

        module = torch.get_device_module(self.device_type)
        module.set_device(device)
        with module.stream(module.Stream(device)):
            yield

    def timing_events(self, device: Any) -> tuple[Any, Any] | None:
        """Two events that time device work between them (``torch.Event`` with timing), or ``None``
        where the device has none (the CPU)."""
        if self.device_module() is None:
            return None
        import torch

        if not hasattr(torch, "Event"):
            return None
        return (torch.Event(device=device, enable_timing=True), torch.Event(device=device, enable_timing=True))

    def device_name(self, device: Any) -> str:
        """The model of ``device`` (``NVIDIA H200``), as its runtime names it, else as detection did."""
        name = None
        if self.device_module() is not None:
            import torch

            query = getattr(torch.get_device_module(self.device_type), "get_device_name", None)
            name = query(device) if query is not None else None
        return str(name or (self.devices[0].name if self.devices else self.device_type))

    def capability(self, device: Any) -> tuple[int, int] | None:
        """The compute capability of ``device`` where its kernels depend on it (CUDA's ``(9, 0)``),
        else ``None``: the engine turns on kernel features of a newer GPU only where this says so."""
        return None

    def compiled_for(self, device: Any) -> str:
        """What a compiled step is built for (``cuda:NVIDIA H200:sm90``): a compiled step kept by one
        process is loaded by another only for the same answer."""
        capability = self.capability(device)
        return ":".join([self.device_type, self.device_name(device)]
                        + ([f"sm{capability[0]}{capability[1]}"] if capability is not None else []))

    # -- decoding facts that depend on the run (the decode rule asks; None: nothing stands in the way) --
    def decode_problem(self, s: Situation) -> str | None:
        """Why the fast loop cannot run this plan on this device although the model fits it (the CPU:
        flex attention over bitsandbytes 4-bit layers); transformers' ``generate`` then decodes."""
        return None

    def graphs_missing(self, s: Situation) -> str | None:
        """Why this run cannot capture a step in :attr:`graph_kind` graphs (this torch has none, the
        device's mode does not record them …); ``graphs="on"`` is then refused with it."""
        return None if self.graph_kind else f"{self.name} has no device graphs"

    def compile_missing(self, s: Situation) -> str | None:
        """Why this run cannot compile the step (Gaudi's lazy mode); ``warmup="compiled"`` is then
        refused with it."""
        return None

    def runs_triton(self, s: Situation) -> bool:
        """Whether this run executes intelrt's Triton kernels (:attr:`step_attention`; the CPU only
        under Triton's interpreter)."""
        return self.step_attention == "triton"

    def decode_claim(self, choice: DecodeChoice) -> str | None:
        """The SPEC claim the fast loop's decision ``choice`` proves here (Gaudi: H1 for HPU graphs, H9
        for ``hpu_backend``)."""
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
