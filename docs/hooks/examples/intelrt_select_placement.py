"""The example of the ``intelrt_select_placement`` reference page (run by tests/contract/test_docs.py)."""

from intelrt.plugin import Decision, Placement, hookimpl


@hookimpl(tryfirst=True)
def intelrt_select_placement(backend, env):
    if backend.name != "xpu" or backend.device_count < 2 or env.get("MYLAB_LONG_CONTEXT") != "1":
        return None
    return Decision(Placement("auto"), f"MYLAB_LONG_CONTEXT=1: spread the weights over the {backend.device_count} "
                            "GPUs so each keeps room for a long KV cache")
