"""``torch.compile`` on Intel GPUs: inductor, which generates Triton kernels for XPU."""

from __future__ import annotations

from intelrt.plugin import Backend, CompileChoice, Decision, Endorsement, PlanError, Situation

_INDUCTOR = "inductor generates Triton kernels for Intel GPUs (Triton for XPU ships with torch's XPU wheels)"
#: torch.compile backends that cannot run on an Intel GPU, and why.
_NOT_ON_XPU = {"cudagraphs": "it captures CUDA graphs (NVIDIA only)",
               "hpu_backend": "it is the Intel Gaudi compiler", "tensorrt": "TensorRT runs on NVIDIA GPUs only",
               "torch_tensorrt": "TensorRT runs on NVIDIA GPUs only", "openxla": "it targets XLA devices (TPU)"}


def select_compile(backend: Backend, s: Situation) -> Decision:
    return Decision(CompileChoice.off(),
                    "off unless asked: compile warm-up outweighs its gain for one-off runs; with compile='on', "
                    + _INDUCTOR)


def check_compile(backend: Backend, value: CompileChoice, s: Situation) -> Endorsement | None:
    """``compile="on"`` → inductor on XPU, with the reason; backends that cannot run on XPU are refused."""
    if value.compiler in _NOT_ON_XPU:
        raise PlanError(f"compile={value.compiler!r} cannot run on Intel GPUs: {_NOT_ON_XPU[value.compiler]}; use "
                        "compile='on' (inductor) or 'none'")
    if value.compiler == "inductor":
        return Endorsement(_INDUCTOR)
    return None  # "none", eager/aot_eager or a custom backend: the generic checks apply
