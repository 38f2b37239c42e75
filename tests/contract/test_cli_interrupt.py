"""Ctrl-C and SIGTERM during a command (``intelrt.cli.interrupt``). Ctrl-C is never swallowed by a
finalizer: with Python's default handler, a SIGINT handled inside a ``__del__`` is an "Exception
ignored in …" with a traceback, and the command runs on (seen in ``intelrt train``: the garbage
collector was finalizing a regex object as the user pressed Ctrl-C). SIGTERM stops the command the
way Ctrl-C does; a SIGINT the command was started with ignored (a background job) stays ignored."""

from __future__ import annotations

import signal
import sys
import time
from collections.abc import Iterator
from typing import Any

import pytest

from intelrt.cli.interrupt import Terminated, interrupts


class _Finalized:
    def __init__(self, signum: int = signal.SIGINT) -> None:
        self.signum = signum

    def __del__(self) -> None:
        signal.raise_signal(self.signum)  # the user's Ctrl-C (or a `kill`) arrives while the finalizer runs


@pytest.fixture
def ignored(monkeypatch: pytest.MonkeyPatch) -> list[Any]:
    """What Python reports as "Exception ignored in …" (``sys.unraisablehook``)."""
    seen: list[Any] = []
    monkeypatch.setattr(sys, "unraisablehook", seen.append)
    return seen


@pytest.fixture
def started_in_the_background() -> Iterator[None]:
    """SIGINT as a shell without job control leaves it for a background job: ignored."""
    before = signal.signal(signal.SIGINT, signal.SIG_IGN)
    yield
    signal.signal(signal.SIGINT, before)


@pytest.mark.usefixtures("ctrl_c_raises")
def test_a_ctrl_c_inside_a_finalizer_still_interrupts_the_command(ignored: list[Any]) -> None:
    started = time.monotonic()
    with pytest.raises(KeyboardInterrupt), interrupts():
        _Finalized()  # dropped at once: its __del__ runs here
        time.sleep(5)  # the Ctrl-C, raised again after the finalizer, lands here
    assert time.monotonic() - started < 2
    assert not ignored
    assert signal.getsignal(signal.SIGINT) is signal.default_int_handler  # put back


@pytest.mark.usefixtures("ctrl_c_raises")
def test_without_the_handler_python_drops_that_ctrl_c(ignored: list[Any]) -> None:
    """What the handler is for: Python's default handler loses it."""
    _Finalized()
    time.sleep(0.2)
    assert [type(u.exc_value) for u in ignored] == [KeyboardInterrupt]


def test_sigterm_stops_the_command_even_inside_a_finalizer(ignored: list[Any]) -> None:
    assert signal.getsignal(signal.SIGTERM) is signal.SIG_DFL
    started = time.monotonic()
    with pytest.raises(Terminated), interrupts():
        _Finalized(signal.SIGTERM)
        time.sleep(5)
    assert time.monotonic() - started < 2
    assert not ignored
    assert signal.getsignal(signal.SIGTERM) is signal.SIG_DFL  # put back: a later SIGTERM ends the process


@pytest.mark.usefixtures("started_in_the_background")
def test_a_background_commands_ignored_ctrl_c_stays_ignored(ignored: list[Any]) -> None:
    """The terminal's Ctrl-C is for the foreground job: a command started with SIGINT ignored runs
    on (and SIGTERM still stops it)."""
    with pytest.raises(Terminated), interrupts():
        assert signal.getsignal(signal.SIGINT) is signal.SIG_IGN
        signal.raise_signal(signal.SIGINT)
        time.sleep(0.2)  # nothing lands
        signal.raise_signal(signal.SIGTERM)
    assert signal.getsignal(signal.SIGINT) is signal.SIG_IGN and not ignored


def test_a_callers_own_handlers_are_left_alone() -> None:
    """``intelrt.cli.main`` called by a program that handles SIGTERM itself."""
    seen: list[int] = []
    before = signal.signal(signal.SIGTERM, lambda signum, frame: seen.append(signum))
    try:
        with interrupts():
            signal.raise_signal(signal.SIGTERM)
    finally:
        signal.signal(signal.SIGTERM, before)
    assert seen == [signal.SIGTERM]
