"""Is this process one rank of a launched job? Read from the variables launchers set."""

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
