"""What one generation did: the one report type of the decode engine and of ``Loaded.generate``
(``Loaded.last_generation``)."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any


@dataclass
class GenerationReport:
    """What one ``Loaded.generate`` call (or one engine run) did."""

    path: str
    """``fast`` (intelrt's decode engine), ``continuous`` (transformers' ``generate_batch``) or
    ``generate`` (``model.generate``)."""
    reason: str
    prompts: int
    batches: int = 0
    """Engine runs (or ``generate`` batches) the prompts went through."""
    graphs: str | None = None
    """The device graphs the engine replayed (``cuda``, ``xpu``, ``hpu``), if any."""
    compiled: str | None = None
    """The compile backend of the engine's decode step, if any."""
    step: str | None = None
    """``compact`` (intelrt's compact step) or ``model`` (the model's own forward)."""
    attention_kernel: bool = False
    """The compact step's decode attention ran as one Triton kernel per layer."""
    step_reason: str | None = None
    """Why a planned compact step ran as the model's own forward (adapters, a replaced module …)."""
    captured: bool = False
    """A device graph was captured during this call (the first use of a row bucket)."""
    warmup: str | None = None
    """How the engine's step was prepared: ``eager``, ``static`` (captured in a device graph, not
    compiled) or ``compiled``."""
    steps: int = 0
    """Decode steps the engine ran."""
    preemptions: int = 0
    """Completions whose KV blocks were taken back to let others go on (recomputed later)."""
    oom_retries: int = 0
    """Steps that ran out of device memory and were retried with fewer rows or tokens."""
    prefix_hit_tokens: int = 0
    """Prompt tokens whose keys and values came from the prefix cache instead of a prefill."""
    notes: list[str] = field(default_factory=list)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)
