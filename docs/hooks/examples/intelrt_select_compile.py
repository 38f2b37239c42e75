"""The example of the ``intelrt_select_compile`` reference page (run by tests/contract/test_docs.py)."""

from intelrt.plugin import CompileChoice, Decision, hookimpl


@hookimpl(tryfirst=True)
def intelrt_select_compile(request, env):
    if request.compile != "auto" or env.get("MYLAB_SERVING") != "1":
        return None
    return Decision(CompileChoice(True, "inductor", mode="max-autotune-no-cudagraphs"),
                    "MYLAB_SERVING=1: a long-running server repays the compile warm-up")
