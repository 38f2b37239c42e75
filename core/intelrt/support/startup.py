"""The environment this process had when intelrt was imported: the user's, as far as intelrt can tell.

A vendor stack writes its own values into the process that loads it — Gaudi's bridge sets
``MASTER_ADDR=localhost`` and ``MASTER_PORT=12345`` when they are unset (gaudi-pytorch-bridge 1.19
``distributed/hccl/__init__.py`` l.60-77), and in eager mode it loads at ``import torch``. Later,
``os.environ`` cannot tell those from values the user exported. What it held at ``import intelrt``
can: a value a backend names as its stack's (``Backend.written_by_stack``) that was not there then
is the stack's, so a launch neither keeps it as the user's nor hands it to the ranks (SPEC C2).

Taking the snapshot reads ``os.environ`` and writes nothing (C2); it costs one dict copy (C3).
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from types import MappingProxyType

_at_import: dict[str, str] = dict(os.environ)


def environment_at_import() -> Mapping[str, str]:
    """``os.environ`` as it was when intelrt was imported (read-only)."""
    return MappingProxyType(_at_import)


def restart(environ: Mapping[str, str] | None = None) -> dict[str, str]:
    """Take the snapshot again from ``environ`` (default ``os.environ``), as a new process importing
    intelrt would; returns the snapshot it replaces, for :func:`restore`. For ``intelrt.testing``'s
    simulations, whose start stands for a process start."""
    global _at_import
    previous, _at_import = _at_import, dict(os.environ if environ is None else environ)
    return previous


def restore(snapshot: Mapping[str, str]) -> None:
    """Put back a snapshot :func:`restart` returned."""
    global _at_import
    _at_import = dict(snapshot)
