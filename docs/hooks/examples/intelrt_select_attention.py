"""The example of the ``intelrt_select_attention`` reference page (run by tests/contract/test_docs.py)."""

from intelrt.plugin import Decision, hookimpl


@hookimpl(tryfirst=True)
def intelrt_select_attention(backend, request, model):
    if backend.name != "xpu" or model.model_type != "gemma2" or request.is_forced("attention"):
        return None
    return Decision("eager", "Gemma 2 soft-caps attention logits, which transformers' sdpa path cannot do "
                             "(Gemma2PreTrainedModel._supports_sdpa is False)")
