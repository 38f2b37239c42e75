"""The example of the ``intelrt_select_quantization`` reference page (run by tests/contract/test_docs.py)."""

from intelrt.plugin import PlanError, hookimpl


@hookimpl(tryfirst=True)
def intelrt_select_quantization(backend, request):
    if backend.name != "xpu" or request.quantization != "8bit":
        return None
    raise PlanError("quantization='8bit' is not validated on our Intel GPU fleet; use quantization='4bit'")
