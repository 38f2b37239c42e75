"""The concern registry: every decision a plan holds, declared once, as the fields of :class:`Decided`.

A concern is one field of :class:`Decided` — its name, its value's type, its place in the order
decisions are made — with metadata saying the hook that decides it, whether it needs a model, the
request options that force it and how a forced option becomes a value. :data:`CONCERNS` reads them;
the host's ``decide``, the planner, the plan's printing and the conformance suite all read
:data:`CONCERNS`. What a decision is, and where its value goes, is written once, in its selection
hook's documentation (``hooks/hookspecs.py``); a test holds each concern to a written hookspec.
"""

from __future__ import annotations

import dataclasses
import types
import typing
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, Union

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

PROPOSE = object()
"""What a concern's ``answer`` returns when a forced option is not a value by itself (``kernels=True``
asks for hub kernels, and the backend says which): the backend proposes under the option, and the
host checks that the proposal honours it."""

Answer = Callable[[Request, "Decided", str], object]
"""``answer(request, decided, compiler)``: the value a forced option stands for, or :data:`PROPOSE`
(``compiler``: the backend's, what ``compile="on"`` means there)."""
Honours = Callable[[Request, DecisionValue], bool]
"""``honours(request, value)``: whether a decision's value keeps the user's forced options."""


def concern(*, needs_model: bool, options: tuple[str, ...] = (), hook: bool = True, verbatim: bool = False,
            required: bool = True, answer: Answer | None = None, honours: Honours | None = None) -> Any:
    """A :class:`Decided` field that is a concern (see :class:`Concern` for the arguments)."""
    return field(default=None, metadata={"concern": {
        "needs_model": needs_model, "options": options, "hook": hook, "verbatim": verbatim, "required": required,
        "answer": answer, "honours": honours}})


def _compile_answer(request: Request, decided: Decided, compiler: str) -> object:
    if request.compile == "none":
        return CompileChoice.off()
    return CompileChoice(True, compiler if request.compile == "on" else request.compile)


def _compile_honours(request: Request, value: DecisionValue) -> bool:
    if not isinstance(value, CompileChoice):
        return False
    if request.compile == "none":
        return not value.enabled
    return value.enabled and (request.compile == "on" or value.compiler == request.compile)


def _kernels_answer(request: Request, decided: Decided, compiler: str) -> object:
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
    sees the earlier ones. What each decides, and where its value goes, is its selection hook's
    documentation (``hooks/hookspecs.py``: ``intelrt_select_<concern>``)."""

    task: str | None = concern(hook=False, needs_model=True, options=("task",))
    """What the model is loaded for (the auto class: AutoModelForCausalLM, AutoModel …), from its config's
    ``architectures`` or the user's ``task=``; intelrt decides it, no hook does."""
    dtype: str | None = concern(needs_model=False, options=("dtype",), verbatim=True)
    quantization: QuantizationChoice | None = concern(needs_model=True, options=("quantization",), honours=_quantization_honours)
    parallelism: ParallelismChoice | None = concern(needs_model=False, options=("sharding", "parallel"), honours=_parallelism_honours)
    placement: Placement | None = concern(needs_model=True)
    attention: str | None = concern(needs_model=True, options=("attention",), verbatim=True)
    kernels: KernelChoice | None = concern(needs_model=True, options=("kernels",), answer=_kernels_answer, honours=_kernels_honours)
    compile: CompileChoice | None = concern(needs_model=False, options=("compile",), answer=_compile_answer, honours=_compile_honours)
    decode: DecodeChoice | None = concern(needs_model=True)
    batching: BatchingChoice | None = concern(needs_model=True, options=("batching",), honours=_batching_honours)
    buckets: Buckets | None = concern(needs_model=True, required=False, options=("buckets",), honours=_buckets_honours)
    collective: str | None = concern(needs_model=False, required=False)

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

    def forced_value(self, request: Request, decided: Decided, compiler: str) -> object:
        """The value the user's forced option stands for on a backend compiling with ``compiler``
        (``Backend.compiler``), or :data:`PROPOSE` (see :attr:`answer`)."""
        if self.answer is not None:
            return self.answer(request, decided, compiler)
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
