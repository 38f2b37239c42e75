"""The example of the ``intelrt_select_collective`` reference page (run by tests/contract/test_docs.py)."""

from intelrt.plugin import Decision, hookimpl


@hookimpl(tryfirst=True)
def intelrt_select_collective(backend, env):
    if backend.device_type != "cpu" or "OMPI_COMM_WORLD_SIZE" not in env:
        return None
    return Decision("mpi", "started by Open MPI's mpirun (OMPI_COMM_WORLD_SIZE is set): "
                           "use torch.distributed's MPI backend")
