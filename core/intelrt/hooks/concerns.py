"""The concern registry: every decision a plan holds, declared once, as the fields of :class:`Decided`.

A concern is one field of :class:`Decided` — its name, its value's type, its place in the order
decisions are made — with metadata saying the hook that decides it, whether it needs a model, the
request options that force it, how a forced option becomes a value, where the value goes and the
hook's documentation. :data:`CONCERNS` reads them; the selection hookspecs, the host's ``decide``,
the planner, the plan's printing and the conformance suite all read :data:`CONCERNS`.
"""

from __future__ import annotations

import dataclasses
import types
import typing
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Union

from .payloads import (
    BatchingChoice,
    Buckets,
    CompileChoice,
    DecisionValue,
    DecodeChoice,
    KernelChoice,
    ParallelismChoice,
    Payload,
    Placement,
    QuantizationChoice,
)
from .request import Request

if TYPE_CHECKING:
    from .backend import Backend

PROPOSE = object()
"""What a concern's ``answer`` returns when a forced option is not a value by itself (``kernels=True``
asks for hub kernels, and the backend says which): the backend proposes under the option, and the
host checks that the proposal honours it."""

Answer = Callable[[Request, "Decided", "Backend"], object]
"""``answer(request, decided, backend)``: the value a forced option stands for, or :data:`PROPOSE`."""
Honours = Callable[[Request, DecisionValue], bool]
"""``honours(request, value)``: whether a decision's value keeps the user's forced options."""


def concern(*, needs_model: bool, applies: str, doc: str, options: tuple[str, ...] = (), hook: bool = True,
            verbatim: bool = False, required: bool = True, answer: Answer | None = None,
            honours: Honours | None = None) -> Any:
    """A :class:`Decided` field that is a concern (see :class:`Concern` for the arguments)."""
    return field(default=None, metadata={"concern": {
        "needs_model": needs_model, "applies": applies, "doc": doc, "options": options, "hook": hook,
        "verbatim": verbatim, "required": required, "answer": answer, "honours": honours}})


def _compile_answer(request: Request, decided: Decided, backend: Backend) -> object:
    if request.compile == "none":
        return CompileChoice.off()
    return CompileChoice(True, backend.compiler if request.compile == "on" else request.compile)


def _compile_honours(request: Request, value: DecisionValue) -> bool:
    if not isinstance(value, CompileChoice):
        return False
    if request.compile == "none":
        return not value.enabled
    return value.enabled and (request.compile == "on" or value.compiler == request.compile)


def _kernels_answer(request: Request, decided: Decided, backend: Backend) -> object:
    return KernelChoice.off() if request.kernels is False else PROPOSE


def _kernels_honours(request: Request, value: DecisionValue) -> bool:
    return isinstance(value, KernelChoice) and value.use_kernels is request.kernels


def _batching_honours(request: Request, value: DecisionValue) -> bool:
    return isinstance(value, BatchingChoice) and value.method == request.batching


def _parallelism_honours(request: Request, value: DecisionValue) -> bool:
    if not isinstance(value, ParallelismChoice):
        return False
    sharding_kept = request.sharding == "auto" or value.training == request.sharding
    return sharding_kept and (request.parallel == "auto" or value.inference == request.parallel)


def _quantization_honours(request: Request, value: DecisionValue) -> bool:
    return isinstance(value, QuantizationChoice) and value.requested == request.quantization


def _buckets_honours(request: Request, value: DecisionValue) -> bool:
    return (value is None) if request.buckets == "off" else isinstance(value, Buckets)


@dataclass(frozen=True)
class Decided:
    """The decisions of a plan, typed: what hooks and backends read of the decisions made so far,
    and ``Plan.decided``. ``None``: not decided (yet), or decided as none.

    The fields are the concerns, in the order decisions are made and printed: a later decision
    sees the earlier ones."""

    task: str | None = concern(
        hook=False, needs_model=True, options=("task",),
        applies="the auto class: AutoModelForCausalLM, AutoModel or AutoModelForSequenceClassification",
        doc="What the model is loaded for, from its config's ``architectures``; intelrt decides it.")
    dtype: str | None = concern(
        needs_model=False, options=("dtype",), verbatim=True,
        applies="from_pretrained(dtype=); TrainingArguments(bf16= / fp16=)",
        doc="""Choose the weights dtype (``"float32"``, ``"bfloat16"``, ``"float16"``).

        ``request.dtype`` is ``"auto"`` or the user's choice; a forced choice is the user's: the host
        answers it after the backend's ``check_dtype`` (which may refuse it with ``PlanError``).""")
    quantization: QuantizationChoice | None = concern(
        needs_model=True, options=("quantization",), honours=_quantization_honours,
        applies="from_pretrained(quantization_config=BitsAndBytesConfig / TorchAoConfig / AutoRoundConfig …); "
                "a checkpoint's own quantization_config; AutoRound and INC FP8 after loading",
        doc="""Decide quantization: value ``None`` (none) or a :class:`~intelrt.plugin.QuantizationChoice`
        (``method``, ``bits``, the ``scheme``, the ``package`` and ``extra`` that run it, the ``dtype``
        the method loads in, the builder's ``details``); intelrt builds transformers'
        ``quantization_config`` from it (``intelrt.quantization.builders``).

        Decided even when nothing is asked: a checkpoint whose config.json holds a
        ``quantization_config`` is quantized already (``source="checkpoint"``), and the plan says
        whether it runs on the backend. ``request.quantization`` is ``None`` or one of
        ``QUANTIZATION_REQUESTS`` (``4bit``, ``8bit``, ``int4``, ``int8``, ``int8-dynamic``,
        ``autoround``, ``fp8``); a forced one is proposed like an automatic value — the backend's
        ``select_quantization``, else the generic rule (intelrt's method × backend table,
        ``intelrt.quantization.decide``) — and must carry it out (``requested`` equal to it).
        A ``dtype`` the method forces replaces the plan's dtype decision (transformers'
        ``HfQuantizer.update_dtype``).""")
    parallelism: ParallelismChoice | None = concern(
        needs_model=False, options=("sharding", "parallel"), honours=_parallelism_honours,
        applies="intelrt launch (one process per device); TrainingArguments(fsdp=, fsdp_config=, deepspeed=); "
                "from_pretrained(distributed_config=)",
        doc="""Decide how the run spreads over processes, one per device: value a
        :class:`~intelrt.plugin.ParallelismChoice` — the training strategy (``none``, ``ddp``,
        ``fsdp``, ``deepspeed``) with the ``fsdp_config`` or DeepSpeed config it hands
        ``TrainingArguments``, the inference strategy (``none``, ``tensor``) with the
        ``distributed_config`` it hands ``from_pretrained``, the world size it was planned for, and
        the launch command when this process is not yet one of the ranks.

        ``request.sharding`` (training) and ``request.parallel`` (inference) are ``"auto"`` or the
        user's choice; refuse a strategy your backend's collective library cannot run with
        ``PlanError`` saying the way out. The generic rule (:func:`~intelrt.plugin.decide_parallelism`)
        reads the backend's :class:`~intelrt.plugin.ShardingSupport`. Decided for backend-only plans
        too (``model`` then has no weights).""")
    placement: Placement | None = concern(
        needs_model=True, applies="from_pretrained(device_map=, max_memory=)",
        doc="""Choose where the weights go: value a :class:`~intelrt.plugin.Placement` — the
        ``device_map`` for ``from_pretrained`` (``"xpu"``, ``"xpu:2"``, ``"auto"``, ``"cpu"`` …), plus
        ``max_memory`` when accelerate may use only some of the devices this process sees.

        In a launched rank, or when the weights are sharded as they load,
        :func:`~intelrt.plugin.rank_placement` answers.""")
    attention: str | None = concern(
        needs_model=True, options=("attention",), verbatim=True,
        applies="from_pretrained(attn_implementation=)",
        doc="""Choose ``attn_implementation`` (``"sdpa"``, ``"eager"``, ``"flash_attention_2"`` …).

        ``request.attention`` is ``"auto"`` or the user's choice; a forced choice is answered by the
        host after the backend's ``check_attention`` (refuse an impossible one with ``PlanError``
        naming the reason).""")
    kernels: KernelChoice | None = concern(
        needs_model=True, options=("kernels",), answer=_kernels_answer, honours=_kernels_honours,
        applies="from_pretrained(use_kernels=, kernel_config=KernelConfig(...))",
        doc="""Decide hub kernels: value a :class:`~intelrt.plugin.KernelChoice` (``use_kernels``, the
        ``kernel_mapping`` layer → {device: kernel}, ``use_local_kernel``); intelrt builds
        transformers' ``KernelConfig`` from it. ``kernels=False`` is answered by the host;
        ``kernels=True`` is proposed by the backend (which kernels, from where) and must turn them on.""")
    compile: CompileChoice | None = concern(
        needs_model=False, options=("compile",), answer=_compile_answer, honours=_compile_honours,
        applies="torch.compile after loading; TrainingArguments(torch_compile=, torch_compile_backend=)",
        doc="""Decide ``torch.compile``: value a :class:`~intelrt.plugin.CompileChoice` (``enabled``,
        ``compiler``, ``mode``). ``request.compile`` is ``"auto"``, ``"none"``, ``"on"`` (the backend's
        ``compiler``) or a ``torch.compile`` backend name; a forced one is answered by the host and
        checked by the backend's ``check_compile``.""")
    decode: DecodeChoice | None = concern(
        needs_model=True, applies="Loaded.generate of one prompt",
        doc="""Decide how ``Loaded.generate`` decodes: value a :class:`~intelrt.plugin.DecodeChoice`
        (``method`` ``fast`` or ``generate``, ``cache``, ``graphs``, ``compile``, ``step``,
        ``compile_options``, ``attention_kernel``, ``warmup``).

        ``"fast"`` is intelrt's decode loop (static KV cache, one step function per token with no
        host synchronisation, optionally compiled and captured into the device graph kind named by
        ``graphs``; the backend that names a graph kind also answers ``graph_capturer``).
        ``"generate"`` is transformers' plain ``model.generate``; say why in the reason.
        ``request.graphs``, ``request.attention_kernel``, ``request.warmup`` and ``request.compile``
        are the user's word: honour them or raise ``PlanError``.""")
    batching: BatchingChoice | None = concern(
        needs_model=True, options=("batching",), honours=_batching_honours,
        applies="Loaded.generate of a list of prompts",
        doc="""Decide how a list of prompts is generated: value a :class:`~intelrt.plugin.BatchingChoice`
        (``method`` ``continuous`` or ``padded``; for continuous batching ``use_graphs`` /
        ``use_async_batching``, where ``None`` leaves the choice to transformers, SPEC X7).
        ``request.batching`` and ``request.graphs`` are ``"auto"`` or forced.""")
    buckets: Buckets | None = concern(
        needs_model=True, required=False, options=("buckets",), honours=_buckets_honours,
        applies="the decode engine and the server: prompt passes and decode steps padded to buckets; every bucket "
                "run at load when warmup",
        doc="""Decide the input shapes of a device that compiles one graph per shape: value a
        :class:`~intelrt.plugin.Buckets` (prompt batch sizes and lengths, decode batch sizes and KV-cache
        blocks, the block size, whether every bucket is warmed up at load), or ``None`` — shapes are not
        padded. A backend without such graphs answers ``None`` and the decision is left out.

        ``request.buckets`` is ``"auto"``, ``"on"`` or ``"off"``; ``"off"`` must be answered with value
        ``None`` (every new shape then compiles mid-run), ``"on"`` with buckets or ``PlanError``.""")
    collective: str | None = concern(
        needs_model=False, required=False,
        applies="TrainingArguments(ddp_backend=) in launched ranks; intelrt launch",
        doc="""Choose the ``torch.distributed`` backend (``"gloo"``, ``"nccl"``, ``"xccl"``, ``"hccl"``);
        a backend without one answers ``None`` (the decision is then left out).""")

    def __getitem__(self, name: str) -> DecisionValue:
        return typing.cast(DecisionValue, getattr(self, name))

    @classmethod
    def of(cls, values: Mapping[str, DecisionValue]) -> Decided:
        """The typed view of ``{concern name: value}``."""
        return cls(**dict(values))  # type: ignore[arg-type]


@dataclass(frozen=True)
class Concern:
    """One decision of a plan (a field of :class:`Decided`)."""

    name: str
    hook: str | None
    """The selection hook third-party plugins answer it with (``None``: intelrt decides it from the
    model itself)."""
    needs_model: bool
    """Decided only when the plan has a model (a backend-only plan leaves it out)."""
    applies: str
    """Where the value goes: the ``from_pretrained`` / ``TrainingArguments`` keyword or the call it shapes."""
    doc: str
    """What the decision is, and the rules its answers keep (the selection hook's documentation)."""
    payload: type[Payload] | None
    """The value's type for structured concerns; ``None``: a plain JSON value."""
    options: tuple[str, ...] = ()
    """The request options that force it (or part of it)."""
    verbatim: bool = False
    """A forced value is the option's own value, and a third-party answer must keep it unchanged."""
    required: bool = True
    """A plan without an answer is an error (else the decision is left out)."""
    answer: Answer | None = None
    """How a forced option becomes the value (``None``: the option's own value, for verbatim concerns;
    a concern without forcing options has none)."""
    honours: Honours | None = None
    """Whether a proposed value keeps the forced options (``None``: equal to the option's value)."""

    @property
    def option(self) -> str | None:
        """The option whose value is the forced value (the first of :attr:`options`)."""
        return self.options[0] if self.options else None

    def forced(self, request: Request) -> bool:
        return any(request.is_forced(name) for name in self.options)

    def forced_value(self, request: Request, decided: Decided, backend: Backend) -> object:
        """The value the user's forced option stands for, or :data:`PROPOSE` (see :attr:`answer`)."""
        if self.answer is not None:
            return self.answer(request, decided, backend)
        if self.verbatim and self.option:
            return getattr(request, self.option)
        return PROPOSE

    def keeps(self, request: Request, value: DecisionValue) -> bool:
        """Whether ``value`` honours the user's forced options (always, when none is forced)."""
        if not self.forced(request):
            return True
        if self.honours is not None:
            return self.honours(request, value)
        return not (self.verbatim and self.option) or value == getattr(request, self.option)


def _payload_of(annotation: Any) -> type[Payload] | None:
    kinds = typing.get_args(annotation) if typing.get_origin(annotation) in (Union, types.UnionType) else (annotation,)
    return next((k for k in kinds if isinstance(k, type) and issubclass(k, Payload)), None)


def _registry() -> tuple[Concern, ...]:
    hints = typing.get_type_hints(Decided)
    declared = []
    for f in dataclasses.fields(Decided):
        meta = dict(f.metadata["concern"])
        hook = f"intelrt_select_{f.name}" if meta.pop("hook") else None
        declared.append(Concern(f.name, hook, payload=_payload_of(hints[f.name]), **meta))
    return tuple(declared)


CONCERNS: tuple[Concern, ...] = _registry()
"""Every concern, in the order decisions are made and printed (:class:`Decided`'s fields)."""

CONCERN_NAMES = tuple(c.name for c in CONCERNS)


def concern_named(name: str) -> Concern:
    """The declaration of concern ``name``."""
    for declared in CONCERNS:
        if declared.name == name:
            return declared
    raise KeyError(name)
