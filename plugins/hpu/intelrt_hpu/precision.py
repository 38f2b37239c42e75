"""H8: the weights dtype on Gaudi — bfloat16 on every generation; first-generation Gaudi has no float16."""

from __future__ import annotations

from intelrt.plugin import Backend, Decision, Endorsement, PlanError, Situation

from .facts import FIRST_GENERATION, generation


def select_dtype(backend: Backend, s: Situation) -> Decision:
    return Decision("bfloat16", "every Gaudi generation supports bfloat16", claim="H8")


def check_dtype(backend: Backend, value: str, s: Situation) -> Endorsement | None:
    if value == "float16" and generation(backend) == FIRST_GENERATION:
        raise PlanError("dtype='float16': first-generation Gaudi has no float16 support; use dtype='bfloat16' "
                        "(every Gaudi generation supports it) or 'float32'")
    return None
