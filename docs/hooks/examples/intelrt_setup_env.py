"""The example of the ``intelrt_setup_env`` reference page (run by tests/contract/test_docs.py)."""

from intelrt.plugin import EnvVar, hookimpl


@hookimpl
def intelrt_setup_env(backend, request, env):
    if backend.name != "xpu":
        return None
    # A value the user already exported wins: intelrt keeps it and reports it.
    return [EnvVar("SYCL_CACHE_PERSISTENT", "1",
                   "keep compiled GPU kernels on disk, so later runs start faster")]
