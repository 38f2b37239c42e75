"""``torch.compile`` on Intel GPUs: inductor, which generates Triton kernels for XPU."""

from __future__ import annotations

from intelrt.plugin import BackendStatus, CompileChoice, Decision, PlanError, Request, hookimpl

from .facts import mine

_INDUCTOR = "inductor generates Triton kernels for Intel GPUs (Triton for XPU ships with torch's XPU wheels)"
#: torch.compile backends that cannot run on an Intel GPU, and why.
_NOT_ON_XPU = {"cudagraphs": "it captures CUDA graphs (NVIDIA only)",
               "hpu_backend": "it is the Intel Gaudi compiler", "tensorrt": "TensorRT runs on NVIDIA GPUs only",
               "torch_tensorrt": "TensorRT runs on NVIDIA GPUs only", "openxla": "it targets XLA devices (TPU)"}


@hookimpl
def intelrt_select_compile(backend: BackendStatus, request: Request) -> Decision | None:
    """``compile="on"`` → inductor on XPU, with the reason; backends that cannot run on XPU are refused."""
    if not mine(backend):
        return None
    choice = request.compile
    if choice in _NOT_ON_XPU:
        raise PlanError(f"compile={choice!r} cannot run on Intel GPUs: {_NOT_ON_XPU[choice]}; use compile='on' "
                        "(inductor) or 'none'")
    if choice in ("on", "inductor"):
        return Decision(CompileChoice(True, "inductor"), f"requested by the user; {_INDUCTOR}")
    if choice == "auto":
        return Decision(CompileChoice.off(),
                        "off unless asked: compile warm-up outweighs its gain for one-off runs; with compile='on', "
                        + _INDUCTOR)
    return None  # "none", eager/aot_eager or a custom backend: the generic decision applies
