"""intelrt's own threads that run torch work, finished before the interpreter exits.

A daemon thread still inside a torch operation when Python finalizes is stopped as the operation
takes the GIL back, and the process aborts ("terminate called without an active exception",
SIGABRT, exit status 134): a program that ended well reports a crash. So each thread intelrt starts
for finite torch work (the compiled step loading beside the decode loop, ``Loaded.stream``'s
producer) registers here; at exit its stop hook runs, where the work can be cut short, and the
thread is waited for, up to :data:`EXIT_WAIT_S`. A thread that loops until told to stop (a server's
decode thread) is stopped by its owner instead.
"""

from __future__ import annotations

import atexit
import logging
import threading
import time
from collections.abc import Callable

log = logging.getLogger(__name__)

EXIT_WAIT_S = 300.0
"""The longest the interpreter's exit waits for the registered threads, all together."""

_RUNNING: dict[threading.Thread, tuple[str, Callable[[], None] | None]] = {}
_LOCK = threading.Lock()


def start_torch_thread(target: Callable[[], None], *, name: str, what: str,
                       stop: Callable[[], None] | None = None) -> threading.Thread:
    """Start ``target`` on a daemon thread that the interpreter's exit finishes first: ``stop()``
    (if given) asks it to end early, then the exit waits for it. ``what`` names the work in the
    line the exit logs while it waits."""
    def run() -> None:
        try:
            target()
        finally:
            with _LOCK:
                _RUNNING.pop(thread, None)

    thread = threading.Thread(target=run, name=name, daemon=True)
    with _LOCK:
        _RUNNING[thread] = (what, stop)
    thread.start()
    return thread


@atexit.register
def _finish_torch_threads() -> None:
    with _LOCK:
        running = list(_RUNNING.items())
    for _, (_, stop) in running:
        if stop is not None:
            stop()
    deadline = time.monotonic() + EXIT_WAIT_S
    for thread, (what, _) in running:
        if thread.is_alive():
            log.info("waiting for %s to end before exiting", what)
        thread.join(max(0.0, deadline - time.monotonic()))
        if thread.is_alive():
            log.warning("%s did not end within %g s of the exit; exiting anyway (torch may abort the process)",
                        what, EXIT_WAIT_S)
