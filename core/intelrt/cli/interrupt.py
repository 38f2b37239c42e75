"""Ctrl-C and SIGTERM on the command line: never lost, and only where they are meant to reach.

Python's default SIGINT handler raises ``KeyboardInterrupt`` in whatever frame runs when the signal
is handled; when that frame is a finalizer (a ``__del__`` the garbage collector calls), Python
prints "Exception ignored in …" with a traceback and carries on, so the Ctrl-C is dropped and the
command goes on running. The handler here raises it again a moment later, once the finalizer has
returned.

SIGTERM (``kill PID``, a job scheduler, a container stopping) ends a process at once by default:
a training run then leaves its lock and a half-written checkpoint for the next run to clear. Here it
raises :class:`Terminated` instead, so the command stops the way it stops on Ctrl-C (the
checkpoint cut short removed, the lock released, one line saying so, exit status 143).

A signal whose disposition the command did not get as the default is left alone. In particular a
shell without job control starts a background job (``cmd &`` in a script, ``make test > log &``)
with SIGINT ignored, so that the Ctrl-C typed at the terminal for the foreground job does not reach
it (POSIX, Shell Command Language, 2.11 "Signals and Error Handling"); Python then installs no
``KeyboardInterrupt`` handler (docs.python.org/3/library/signal.html, "Python installs a small
number of signal handlers by default … SIGINT is translated into a KeyboardInterrupt exception if
the parent process has not changed it"), and intelrt keeps it ignored too: such a run is stopped
with SIGTERM."""

from __future__ import annotations

import contextlib
import signal
import threading
from collections.abc import Iterator
from types import FrameType
from typing import Any

RETRY_S = 0.05
"""How soon a signal that arrived inside a finalizer is raised again."""

EXIT_TERMINATED = 128 + signal.SIGTERM
"""The exit status after SIGTERM: 143, as a shell reports a process the signal ended."""


class Terminated(BaseException):
    """The command got SIGTERM. A ``BaseException``, like ``KeyboardInterrupt``, so that no
    ``except Exception`` on the way takes it for a failure to handle and carry on."""


#: The signals handled here, each with the disposition it must have for intelrt to take it over.
_TAKEN_OVER: dict[int, Any] = {signal.SIGINT: signal.default_int_handler, signal.SIGTERM: signal.SIG_DFL}


def _in_finalizer(frame: FrameType | None) -> bool:
    while frame is not None:
        if frame.f_code.co_name == "__del__":
            return True
        frame = frame.f_back
    return False


def _on_signal(signum: int, frame: FrameType | None) -> None:
    if _in_finalizer(frame):
        # to the main thread itself: a signal to the process may land in another thread, and then a
        # main thread blocked in a system call would not see it until that call returns
        main = threading.main_thread().ident
        assert main is not None
        threading.Timer(RETRY_S, signal.pthread_kill, (main, signum)).start()
        return
    if signum == signal.SIGTERM:
        raise Terminated
    raise KeyboardInterrupt


@contextlib.contextmanager
def interrupts() -> Iterator[None]:
    """Ctrl-C and SIGTERM as :func:`_on_signal` handles them, while the block runs in the main
    thread. Each only where its handler is still Python's default (SIGINT: ``KeyboardInterrupt``;
    SIGTERM: end the process): one ignored (a background job's SIGINT) or a caller's own handler
    is left alone."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    taken = [sig for sig, default in _TAKEN_OVER.items() if signal.getsignal(sig) is default]
    for sig in taken:
        signal.signal(sig, _on_signal)
    try:
        yield
    finally:
        for sig in taken:
            signal.signal(sig, _TAKEN_OVER[sig])
