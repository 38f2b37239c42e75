"""One training per output directory at a time.

Two runs writing into one directory end with each other's files in every ``checkpoint-N``. A
run holds an OS file lock (the ``filelock`` library: ``flock`` on POSIX, released by the kernel
when the process dies, so a killed run never leaves the directory locked) on
``.intelrt-train.lock`` in the output directory, and writes who it is — pid, host, start time —
into ``.intelrt-train.lock.json`` next to it, so that a second run's refusal names the holder.
Both files are removed when the run ends, while the lock is still held: filelock (>= 4) checks
after locking that the file it locked still has a name, and tries again if not, so a run that
opened the old file just before it went cannot hold a lock nobody else sees.

In a launched job every rank trains into the same directory: only the main process (``RANK`` 0)
takes the lock.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import socket
import time
from collections.abc import Iterator, Mapping
from typing import Any

from ..errors import ConfigurationError

log = logging.getLogger(__name__)

LOCK_NAME = ".intelrt-train.lock"
HOLDER_NAME = ".intelrt-train.lock.json"


def is_main_process(env: Mapping[str, str] | None = None) -> bool:
    """Whether this process writes a launched job's output (global ``RANK`` 0, or no launcher)."""
    env = os.environ if env is None else env
    return (env.get("RANK") or "0").strip() == "0"


def _holder(directory: str) -> str:
    try:
        with open(os.path.join(directory, HOLDER_NAME), encoding="utf-8") as fh:
            info = json.load(fh)
        return (f"process {info['pid']} on host {info['host']}, training since {info['started']}")
    except (OSError, ValueError, KeyError, TypeError):
        return "another process (it has not written its name yet)"


def _release(lock: Any, directory: str) -> None:
    """Remove the holder and lock files, then let go: a run ends without leaving either behind."""
    try:
        for name in (HOLDER_NAME, LOCK_NAME):
            with contextlib.suppress(FileNotFoundError):
                os.remove(os.path.join(directory, name))
    finally:
        lock.release()


def _acquire(directory: str) -> Any:
    """The lock on ``directory``, held; the refusal naming the holder when another process holds it."""
    from filelock import FileLock, Timeout

    lock = FileLock(os.path.join(directory, LOCK_NAME), timeout=0)
    try:
        lock.acquire()
    except Timeout:
        raise ConfigurationError(
            f"output_dir {directory} is in use by another training: {_holder(directory)}. Two runs in one "
            "directory mix their checkpoints; wait for that run to end, or pick another output_dir.") from None
    return lock


def held_by_another(directory: str) -> bool:
    """Whether another process's training holds ``directory`` now (a lock a killed run left is not held)."""
    if not os.path.isfile(os.path.join(directory, LOCK_NAME)):
        return False
    from filelock import FileLock, Timeout

    lock = FileLock(os.path.join(directory, LOCK_NAME), timeout=0)
    try:
        lock.acquire()
    except Timeout:
        return True
    lock.release()
    return False


def refuse_if_held(directory: str) -> None:
    """Raise the refusal naming the holder when a training holds ``directory`` now; a lock left by
    a killed run is removed. Creates nothing."""
    if os.path.isfile(os.path.join(directory, LOCK_NAME)):
        _release(_acquire(directory), directory)


@contextlib.contextmanager
def hold_output_dir(directory: str) -> Iterator[None]:
    """Hold ``directory`` (which exists) for this training; :class:`ConfigurationError` naming the
    holder when another training holds it."""
    if not is_main_process():
        yield
        return
    lock = _acquire(directory)
    try:
        with open(os.path.join(directory, HOLDER_NAME), "w", encoding="utf-8") as fh:
            json.dump({"pid": os.getpid(), "host": socket.gethostname(),
                       "started": time.strftime("%Y-%m-%d %H:%M:%S %z")}, fh)
        yield
    finally:
        _release(lock, directory)
