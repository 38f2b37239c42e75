"""Is this process one rank of a launched job (read from the variables launchers set), and what do
all ranks agree on."""

from __future__ import annotations

import os
from collections.abc import Mapping

from ..errors import ConfigurationError


def world_size(env: Mapping[str, str] | None = None) -> int:
    """``WORLD_SIZE`` as a launcher sets it (unset or empty: 1); anything but a whole number >= 1
    is a :class:`ConfigurationError` — a garbled value must not quietly turn a rank into a single process."""
    env = os.environ if env is None else env
    value = (env.get("WORLD_SIZE") or "").strip()
    if not value:
        return 1
    if not (value.isascii() and value.isdigit()) or int(value) < 1:
        raise ConfigurationError(f"WORLD_SIZE={value!r} is not a number of processes (a whole number >= 1); "
                                 "launchers (torchrun, intelrt launch, mpirun) set it: unset it in a single process")
    return int(value)


def local_rank(env: Mapping[str, str] | None = None) -> int | None:
    """``LOCAL_RANK`` as a launcher sets it (``None`` when unset). A value that is not a rank, one past
    the job's size, or one without the ``WORLD_SIZE`` every launcher sets beside it (a variable left
    over in the shell: the process would wait for a job that does not exist) is a
    :class:`ConfigurationError` naming it."""
    env = os.environ if env is None else env
    value = env.get("LOCAL_RANK")
    if value is None:
        return None
    text = value.strip()
    leftover = "launchers (torchrun, intelrt launch) set it for each rank: unset it to run one process"
    if not (text.isascii() and text.isdigit()):
        raise ConfigurationError(f"LOCAL_RANK={value!r} is not a rank (a whole number >= 0); {leftover}")
    rank = int(text)
    if not (env.get("WORLD_SIZE") or "").strip():
        raise ConfigurationError(f"LOCAL_RANK={value!r} is set but WORLD_SIZE is not, and a launcher sets both; "
                                 f"{leftover}, or start the job with intelrt launch")
    for name in ("LOCAL_WORLD_SIZE", "WORLD_SIZE"):
        size = (env.get(name) or "").strip()
        if size.isascii() and size.isdigit() and rank >= int(size):
            raise ConfigurationError(f"LOCAL_RANK={rank} is not below {name}={size}: ranks count from 0; {leftover}")
    return rank


def is_distributed_launch(env: Mapping[str, str] | None = None) -> bool:
    """Whether this process is one rank of a launched job (torchrun / ``intelrt launch`` set
    ``LOCAL_RANK``; MPI-style launchers set ``WORLD_SIZE``) — accelerate's own test; the launcher's
    variables checked (:func:`local_rank`, :func:`world_size`)."""
    env = os.environ if env is None else env
    size = world_size(env)
    rank = local_rank(env)
    if size > 1 and rank is None:
        check_rank(env, size)
    return rank is not None or size > 1


RANK_VARIABLES = ("RANK", "LOCAL_RANK", "OMPI_COMM_WORLD_RANK", "PMI_RANK", "PMIX_RANK", "SLURM_PROCID")
"""A rank's index, as each kind of launcher sets it beside the job's size (torchrun, Open MPI, MPICH /
Intel MPI, PMIx, Slurm)."""


def check_rank(env: Mapping[str, str], size: int) -> None:
    """``WORLD_SIZE`` above 1 comes with this process's rank: without one it is a variable left over in
    the shell, and the process would plan for ``size`` ranks and wait for a job that does not exist."""
    found = next((name for name in RANK_VARIABLES if (env.get(name) or "").strip()), None)
    if found is None:
        raise ConfigurationError(
            f"WORLD_SIZE={size} is set but no rank is ({', '.join(RANK_VARIABLES)}): a launcher sets both, so it is "
            "left over in the shell, and this process would wait for a job of that size. Unset WORLD_SIZE: one "
            "process needs none, and intelrt launch sets it for each rank it starts")
    value = env[found].strip()
    if value.isascii() and value.isdigit() and int(value) >= size:
        raise ConfigurationError(f"{found}={value} is not below WORLD_SIZE={size}: ranks count from 0; unset both "
                                 "(intelrt launch sets them for each rank it starts)")


def any_rank(flag: bool) -> bool:
    """``flag`` of this process, or-ed over every rank of a launched job (one collective; this
    process alone when no process group runs). Ranks that must act together — stop at the same
    step, fail the same save — agree on it: a rank left behind waits forever in the next collective."""
    import torch

    if world_size() == 1 or not torch.distributed.is_available() or not torch.distributed.is_initialized():
        return flag
    tensor = torch.tensor([1.0 if flag else 0.0], device="cpu" if torch.distributed.get_backend() == "gloo"
                          else torch.accelerator.current_accelerator())
    torch.distributed.all_reduce(tensor, op=torch.distributed.ReduceOp.MAX)
    return bool(tensor.item())
