"""The example of the ``intelrt_select_batching`` reference page (run by tests/contract/test_docs.py)."""

from intelrt.plugin import BatchingChoice, Decision, hookimpl


@hookimpl(tryfirst=True)
def intelrt_select_batching(request, env, decided):
    if request.batching != "auto" or env.get("MYLAB_EVAL") != "1" or decided.task != "text-generation":
        return None
    return Decision(BatchingChoice.padded("generate", 8),
                    "MYLAB_EVAL=1: reference outputs were made in padded batches of 8 with generate")
