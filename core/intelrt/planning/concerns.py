"""The concern registry: every decision a plan holds, declared once.

A concern names the hook that decides it, whether it needs a model, the request option that
forces it, the type of its value and where that value goes. Planning with and without a model,
the plan's serialisation and printing, and the conformance suite all read :data:`CONCERNS`.
"""

from __future__ import annotations

from dataclasses import dataclass

from ..hooks.payloads import (
    BatchingChoice,
    CompileChoice,
    DecodeChoice,
    KernelChoice,
    ParallelismChoice,
    Payload,
    QuantizationChoice,
)


@dataclass(frozen=True)
class Concern:
    """One decision of a plan."""

    name: str
    hook: str | None
    """The selection hook that decides it (``None``: intelrt decides it from the model itself)."""
    needs_model: bool
    """Decided only when the plan has a model (a backend-only plan leaves it out)."""
    applies: str
    """Where the value goes: the ``from_pretrained`` / ``TrainingArguments`` keyword or the call it shapes."""
    payload: type[Payload] | None = None
    """The value's type for structured concerns; ``None``: a plain JSON value."""
    option: str | None = None
    """The request option that forces it (its forced value is the user's)."""
    more_options: tuple[str, ...] = ()
    """Further request options that force parts of it (``parallel`` for the parallelism's inference part)."""
    verbatim: bool = False
    """A forced value must come back from the hook unchanged (intelrt never overrides what you set)."""
    required: bool = True
    """A plan without an answer is an error (else the decision is left out)."""

    @property
    def options(self) -> tuple[str, ...]:
        """Every request option that forces (part of) this decision."""
        return ((self.option,) if self.option else ()) + self.more_options


CONCERNS: tuple[Concern, ...] = (
    Concern("task", None, True, "the auto class: AutoModelForCausalLM, AutoModel or "
            "AutoModelForSequenceClassification", option="task"),
    Concern("dtype", "intelrt_select_dtype", False, "from_pretrained(dtype=); TrainingArguments(bf16= / fp16=)",
            option="dtype", verbatim=True),
    Concern("quantization", "intelrt_select_quantization", True,
            "from_pretrained(quantization_config=BitsAndBytesConfig(...))", QuantizationChoice, "quantization"),
    Concern("parallelism", "intelrt_select_parallelism", False,
            "intelrt launch (one process per device); TrainingArguments(fsdp=, fsdp_config=, deepspeed=); "
            "from_pretrained(distributed_config=)", ParallelismChoice, "sharding", more_options=("parallel",)),
    Concern("placement", "intelrt_select_placement", True, "from_pretrained(device_map=)"),
    Concern("attention", "intelrt_select_attention", True, "from_pretrained(attn_implementation=)",
            option="attention", verbatim=True),
    Concern("kernels", "intelrt_select_kernels", True,
            "from_pretrained(use_kernels=, kernel_config=KernelConfig(...))", KernelChoice, "kernels"),
    Concern("compile", "intelrt_select_compile", False,
            "torch.compile after loading; TrainingArguments(torch_compile=, torch_compile_backend=)",
            CompileChoice, "compile"),
    Concern("decode", "intelrt_select_decode", True, "Loaded.generate of one prompt", DecodeChoice),
    Concern("batching", "intelrt_select_batching", True, "Loaded.generate of a list of prompts", BatchingChoice,
            "batching"),
    Concern("collective", "intelrt_select_collective", False,
            "TrainingArguments(ddp_backend=) in launched ranks; intelrt launch", required=False),
)
"""In the order decisions are made and printed: later hooks see earlier values in ``decisions``."""

CONCERN_NAMES = tuple(c.name for c in CONCERNS)


def concern(name: str) -> Concern:
    """The declaration of concern ``name``."""
    for declared in CONCERNS:
        if declared.name == name:
            return declared
    raise KeyError(name)


def payload_type(name: str) -> type[Payload] | None:
    """The value type of concern ``name`` (``None`` for plain JSON values and unknown names)."""
    return next((c.payload for c in CONCERNS if c.name == name), None)
