"""The example of the ``intelrt_select_dtype`` reference page (run by tests/contract/test_docs.py)."""

from intelrt.plugin import Decision, hookimpl


@hookimpl(tryfirst=True)
def intelrt_select_dtype(backend, request, model):
    if backend.name != "xpu" or request.is_forced("dtype"):
        return None
    if model.config.get("torch_dtype", model.config.get("dtype")) == "float16":
        return Decision("float16", "the checkpoint was trained and saved in float16; keep its precision")
    return None
