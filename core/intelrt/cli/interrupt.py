"""Ctrl-C on the command line, never lost. Python's default SIGINT handler raises
``KeyboardInterrupt`` in whatever frame runs when the signal is handled; when that frame is a
finalizer (a ``__del__`` the garbage collector calls), Python prints "Exception ignored in …" with
a traceback and carries on, so the Ctrl-C is dropped and the command goes on running. The handler
here raises it again a moment later, once the finalizer has returned."""

from __future__ import annotations

import contextlib
import signal
import threading
from collections.abc import Iterator
from types import FrameType

RETRY_S = 0.05
"""How soon a Ctrl-C that arrived inside a finalizer is raised again."""


def _in_finalizer(frame: FrameType | None) -> bool:
    while frame is not None:
        if frame.f_code.co_name == "__del__":
            return True
        frame = frame.f_back
    return False


def _on_interrupt(signum: int, frame: FrameType | None) -> None:
    if _in_finalizer(frame):
        # to the main thread itself: a signal to the process may land in another thread, and then a
        # main thread blocked in a system call would not see it until that call returns
        main = threading.main_thread().ident
        assert main is not None
        threading.Timer(RETRY_S, signal.pthread_kill, (main, signal.SIGINT)).start()
        return
    raise KeyboardInterrupt


@contextlib.contextmanager
def interrupts() -> Iterator[None]:
    """Ctrl-C as :data:`_on_interrupt` handles it, while the block runs in the main thread (where
    the handler is still Python's default: a caller's own handler is left alone)."""
    if threading.current_thread() is not threading.main_thread() or \
            signal.getsignal(signal.SIGINT) is not signal.default_int_handler:
        yield
        return
    signal.signal(signal.SIGINT, _on_interrupt)
    try:
        yield
    finally:
        signal.signal(signal.SIGINT, signal.default_int_handler)
