"""The example of the ``intelrt_select_decode`` reference page (run by tests/contract/test_docs.py)."""

from intelrt.plugin import hookimpl, plain_generate


@hookimpl(tryfirst=True)
def intelrt_select_decode(request, env):
    if env.get("MYLAB_EVAL") != "1" or request.graphs == "on":
        return None
    return plain_generate("MYLAB_EVAL=1: evaluation compares tokens with reference runs made by generate")
