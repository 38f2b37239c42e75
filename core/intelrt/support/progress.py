"""Long steps (a compile, loading, the Trainer's set-up) announced through ``logging``: one record
on the ``intelrt.progress`` logger at INFO when a step starts and one when it ends, each carrying a
:class:`StepEvent` in ``record.intelrt_step``. A front end renders them — the command line shows a
spinner with the elapsed time on a terminal (``intelrt.cli.output``) — and anywhere else they are
two log lines (``what …``, ``what: done in 1.2 s``)."""

from __future__ import annotations

import contextlib
import itertools
import logging
import time
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Literal

PROGRESS = logging.getLogger("intelrt.progress")
"""The logger of long steps; the command line always shows it (``configure_logging``)."""

_keys = itertools.count(1)


@dataclass(frozen=True)
class StepEvent:
    """One record of a step: its start, its end, or its end by an exception (``failed``: the
    error says what happened, so a front end prints nothing more)."""

    what: str
    phase: Literal["start", "done", "failed"]
    key: int
    """The same for the records of one step (steps nest, and may run on several threads)."""
    seconds: float = 0.0
    report_done: bool = True
    """False when the caller prints its own result line at the end (a bench row)."""


@contextlib.contextmanager
def step(what: str, *, report_done: bool = True) -> Iterator[None]:
    """``what …`` when the block starts; ``what: done in N s`` when it ends."""
    key = next(_keys)
    PROGRESS.info("%s …", what, extra={"intelrt_step": StepEvent(what, "start", key, report_done=report_done)})
    start = time.perf_counter()
    try:
        yield
    except BaseException:
        seconds = time.perf_counter() - start
        PROGRESS.info("%s: stopped after %.1f s", what, seconds,
                      extra={"intelrt_step": StepEvent(what, "failed", key, seconds, report_done)})
        raise
    seconds = time.perf_counter() - start
    PROGRESS.info("%s: done in %.1f s", what, seconds,
                  extra={"intelrt_step": StepEvent(what, "done", key, seconds, report_done)})
