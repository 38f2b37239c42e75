"""The quantization decision with its reason (:class:`QuantizationPlan`).

Its value is the contract's :class:`~intelrt.hooks.payloads.QuantizationChoice` (re-exported
here; defined once, in ``hooks/payloads.py``, where every hook and backend reads it).
"""

from __future__ import annotations

from dataclasses import dataclass

from ..hooks.payloads import QuantizationChoice
from ..hooks.types import Decision

__all__ = ["QuantizationChoice", "QuantizationPlan"]


@dataclass(frozen=True)
class QuantizationPlan:
    """A decided quantization: the value, why, the notes a user should read, the SPEC claim."""

    choice: QuantizationChoice | None
    reason: str
    notes: tuple[str, ...] = ()
    claim: str | None = None

    def decision(self) -> Decision:
        """The hooks' ``Decision`` for the quantization concern."""
        return Decision(self.choice, self.reason, claim=self.claim, notes=self.notes)
