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


def is_distributed_launch(env: Mapping[str, str] | None = None) -> bool:
    """Whether this process is one rank of a launched job (torchrun / ``intelrt launch`` set
    ``LOCAL_RANK``; MPI-style launchers set ``WORLD_SIZE``) — accelerate's own test."""
    env = os.environ if env is None else env
    return "LOCAL_RANK" in env or world_size(env) > 1


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
