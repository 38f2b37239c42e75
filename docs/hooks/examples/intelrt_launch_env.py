"""The example of the ``intelrt_launch_env`` reference page (run by tests/contract/test_docs.py)."""

import os

from intelrt.plugin import EnvVar, hookimpl


@hookimpl
def intelrt_launch_env(backend, nproc):
    if backend.device_type != "cpu":
        return None
    threads = max(1, (os.cpu_count() or 1) // nproc)
    return [EnvVar("OMP_NUM_THREADS", str(threads),
                   f"{nproc} processes share the CPU cores: {threads} OpenMP thread(s) each")]
