"""The example of the ``intelrt_select_kernels`` reference page (run by tests/contract/test_docs.py)."""

from intelrt.plugin import Decision, KernelChoice, hookimpl


@hookimpl(tryfirst=True)
def intelrt_select_kernels(backend, request):
    if backend.name != "xpu" or request.kernels is not True:
        return None
    mapping = {"RMSNorm": {"xpu": "my-org/rmsnorm-xpu:RMSNorm"}}
    return Decision(KernelChoice(True, mapping),
                    "kernels=True: my-org's RMSNorm kernel, built and validated for Intel GPUs")
