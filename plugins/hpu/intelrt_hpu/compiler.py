"""H1, H9: Gaudi runs PyTorch eagerly by default; compiling uses ``hpu_backend`` (or ``eager``)."""

from __future__ import annotations

from intelrt.plugin import Backend, CompileChoice, Decision, Endorsement, PlanError, Situation

from .facts import COMPILE_BACKENDS


def select_compile(backend: Backend, s: Situation) -> Decision:
    return Decision(CompileChoice.off(),
                    "Gaudi runs PyTorch eagerly by default and models run unchanged; compile='on' captures graphs "
                    "with hpu_backend", claim="H1")


def check_compile(backend: Backend, value: CompileChoice, s: Situation) -> Endorsement | None:
    if not value.enabled:
        return None
    if value.compiler not in COMPILE_BACKENDS:
        raise PlanError(f"compile={value.compiler!r}: only 'hpu_backend' and 'eager' run on Gaudi (any other backend "
                        "is switched to 'hpu_backend'); pass compile='on' or compile='hpu_backend'")
    why = "Gaudi compiles with torch.compile(backend='hpu_backend')" if s.request.compile == "on" else ""
    return Endorsement(why, claim="H9")
