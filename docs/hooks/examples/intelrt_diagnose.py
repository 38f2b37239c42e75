"""The example of the ``intelrt_diagnose`` reference page (run by tests/contract/test_docs.py)."""

from intelrt.plugin import Finding, hookimpl


@hookimpl
def intelrt_diagnose(backends, env):
    if "ZE_AFFINITY_MASK" in env and "ONEAPI_DEVICE_SELECTOR" in env:
        return [Finding("warning", "two device filters are set",
                        f"ZE_AFFINITY_MASK={env['ZE_AFFINITY_MASK']} and ONEAPI_DEVICE_SELECTOR="
                        f"{env['ONEAPI_DEVICE_SELECTOR']} both filter devices, one after the other",
                        fix="keep one: unset ONEAPI_DEVICE_SELECTOR and choose devices with devices=")]
    return None
