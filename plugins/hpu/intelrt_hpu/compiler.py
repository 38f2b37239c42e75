"""H1, H9: ``torch.compile`` on Gaudi — ``hpu_backend`` (or ``eager``) in eager mode, none in lazy mode.

Eager mode (the stack's default from 1.21) runs PyTorch op by op, and ``torch.compile`` captures
graphs with ``hpu_backend``. Lazy mode accumulates ops into graphs run at ``mark_step()`` and has
no ``torch.compile``: Intel's PyTorch Support Matrix lists ``torch.compile`` (``hpu_backend`` and
``eager``) as unsupported there, and vLLM's Gaudi plugin turns dynamo off in lazy mode ("PT HPU lazy
backend does not support torch.compile", vllm-gaudi ``vllm_gaudi/platform.py`` l.411-431).
"""

from __future__ import annotations

from intelrt.plugin import Backend, CompileChoice, Decision, Endorsement, PlanError, Situation

from .facts import COMPILE_BACKENDS, LAZY_VAR, execution_mode

LAZY_NO_COMPILE = ("torch.compile does not run in lazy mode (Intel's PyTorch Support Matrix; vllm-gaudi "
                   "vllm_gaudi/platform.py l.411-431: 'PT HPU lazy backend does not support torch.compile')")


def lazy_refusal(what: str, mode: str) -> PlanError:
    """H1: the refusal of a ``torch.compile`` asked for in lazy mode, with the way out."""
    return PlanError(f"{what}: {LAZY_NO_COMPILE}, and this run is lazy ({mode}). Set {LAZY_VAR}=0 (eager, the "
                     "default from Gaudi software 1.21) to compile with hpu_backend, or leave compile off "
                     "(compile='none'): lazy mode captures graphs itself, and decode uses HPU graphs")


def select_compile(backend: Backend, s: Situation) -> Decision:
    lazy, mode = execution_mode(backend, s.env)
    if lazy:
        return Decision(CompileChoice.off(), f"lazy mode ({mode}): ops accumulate into graphs run at mark_step(), "
                                             f"and decode is captured in HPU graphs; {LAZY_NO_COMPILE}", claim="H1")
    return Decision(CompileChoice.off(),
                    f"eager mode ({mode}): Gaudi runs PyTorch eagerly by default and models run unchanged; compile='on' "
                    "captures graphs with hpu_backend", claim="H1")


def check_compile(backend: Backend, value: CompileChoice, s: Situation) -> Endorsement | None:
    if not value.enabled:
        return None
    lazy, mode = execution_mode(backend, s.env)
    if lazy:
        raise lazy_refusal(f"compile={s.request.compile!r}", mode)
    if value.compiler not in COMPILE_BACKENDS:
        raise PlanError(f"compile={value.compiler!r}: only 'hpu_backend' and 'eager' run on Gaudi (any other backend "
                        "is switched to 'hpu_backend'); pass compile='on' or compile='hpu_backend'")
    why = "Gaudi compiles with torch.compile(backend='hpu_backend')" if s.request.compile == "on" else ""
    return Endorsement(why, claim="H9")
