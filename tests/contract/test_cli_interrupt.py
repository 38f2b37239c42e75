"""Ctrl-C during a command is never swallowed by a finalizer (``intelrt.cli.interrupt``): with
Python's default handler, a SIGINT handled inside a ``__del__`` is an "Exception ignored in …"
with a traceback, and the command runs on (seen in ``intelrt train``: the garbage collector was
finalizing a regex object as the user pressed Ctrl-C)."""

from __future__ import annotations

import signal
import sys
import time
from typing import Any

import pytest

from intelrt.cli.interrupt import interrupts


class _Finalized:
    def __del__(self) -> None:
        signal.raise_signal(signal.SIGINT)  # the user's Ctrl-C arrives while the finalizer runs


@pytest.fixture
def ignored(monkeypatch: pytest.MonkeyPatch) -> list[Any]:
    """What Python reports as "Exception ignored in …" (``sys.unraisablehook``)."""
    seen: list[Any] = []
    monkeypatch.setattr(sys, "unraisablehook", seen.append)
    return seen


def test_a_ctrl_c_inside_a_finalizer_still_interrupts_the_command(ignored: list[Any]) -> None:
    started = time.monotonic()
    with pytest.raises(KeyboardInterrupt), interrupts():
        _Finalized()  # dropped at once: its __del__ runs here
        time.sleep(5)  # the Ctrl-C, raised again after the finalizer, lands here
    assert time.monotonic() - started < 2
    assert not ignored
    assert signal.getsignal(signal.SIGINT) is signal.default_int_handler  # put back


def test_without_the_handler_python_drops_that_ctrl_c(ignored: list[Any]) -> None:
    """What the handler is for: Python's default handler loses it."""
    _Finalized()
    time.sleep(0.2)
    assert [type(u.exc_value) for u in ignored] == [KeyboardInterrupt]
