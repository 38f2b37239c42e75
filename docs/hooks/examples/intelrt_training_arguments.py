"""The example of the ``intelrt_training_arguments`` reference page (run by tests/contract/test_docs.py)."""

from intelrt.plugin import Setting, hookimpl


@hookimpl
def intelrt_training_arguments(plan, overrides):
    if "gradient_checkpointing" in overrides or plan.model.parameter_count < 1_000_000_000:
        return None
    return [Setting("gradient_checkpointing", True,
                    f"{plan.model.parameter_count / 1e9:.1f}B parameters: recompute activations "
                    "instead of storing them")]
