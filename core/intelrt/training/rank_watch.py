"""A launched job with a hung rank ends within a stated time, naming the rank.

When one rank hangs mid-step (a deadlock, a stuck device call, a ``sleep`` left in), the others
wait for it in their next collective — for torch's process-group timeout (30 minutes by default)
— and then the first of *them* fails, so torchrun reports a waiting rank as the root cause and
stops the hung one with SIGTERM. intelrt launch watches the ranks instead:

* each rank runs its script through ``python -m intelrt.training.rank_watch SCRIPT ARGS`` (the
  launcher's ``--module`` entry; the script runs as ``__main__`` exactly as ``python SCRIPT``
  would), whose thread writes, twice a second, where the rank's main thread is — the innermost
  Python frame, since when, and whether that is a wait in a collective (``torch.distributed``, or
  the autograd engine, where DDP reduces the gradients) — to ``$INTELRT_RANK_HEARTBEATS/rank-N.json``;
* the launcher (:func:`watch`) reads them: once a rank has waited in a collective for
  ``hang_timeout`` seconds, the ranks that are not waiting are the hung ones (every rank waiting:
  a collective not every rank calls). It stops the job and names them, where they are, and the
  timeout. A rank whose heartbeat stops (its interpreter is stuck in native code holding the GIL,
  or it died) is named the same way.
"""

from __future__ import annotations

import contextlib
import json
import os
import runpy
import sys
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

HEARTBEATS_VAR = "INTELRT_RANK_HEARTBEATS"
"""The directory the ranks' heartbeats go to (set by intelrt launch for every rank)."""
INTERVAL_S = 0.5
STALE_S = 4 * INTERVAL_S
"""A heartbeat older than this no longer says where its rank is (it may have stopped beating)."""
DEFAULT_HANG_TIMEOUT_S = 600.0
"""How long a rank may keep the others waiting in a collective before the job is stopped."""
WAITING_IN = ("/torch/distributed/", "/torch/autograd/graph.py")
"""Where a rank's innermost Python frame is while it waits for the others."""


# -- the rank's side ---------------------------------------------------------------------------------

def _where(frame: Any) -> tuple[str, bool]:
    """``file:line in function`` of ``frame`` (the innermost one of the main thread) and whether it waits."""
    code = frame.f_code
    return f"{code.co_filename}:{frame.f_lineno} in {code.co_name}", any(w in code.co_filename for w in WAITING_IN)


def _beat(path: Path, rank: str, main: int) -> None:
    last, since = "", time.time()
    while True:
        frame = sys._current_frames().get(main)
        if frame is None:  # the main thread ended: the rank is exiting
            return
        where, waiting = _where(frame)
        del frame
        now = time.time()
        if where != last:
            last, since = where, now
        temporary = path.with_suffix(".tmp")
        temporary.write_text(json.dumps({"rank": rank, "pid": os.getpid(), "time": now, "where": where,
                                         "waiting": waiting, "since": since}), encoding="utf-8")
        os.replace(temporary, path)
        time.sleep(INTERVAL_S)


def start_heartbeat(env: Mapping[str, str] | None = None) -> bool:
    """Start this rank's heartbeat thread when the launcher asked for one; whether it did."""
    env = os.environ if env is None else env
    directory = env.get(HEARTBEATS_VAR)
    if not directory or not os.path.isdir(directory):
        return False
    rank = env.get("RANK") or env.get("LOCAL_RANK") or "0"
    thread = threading.Thread(target=_beat, args=(Path(directory) / f"rank-{rank}.json", rank,
                                                  threading.main_thread().ident), name="intelrt-heartbeat", daemon=True)
    thread.start()
    return True


def main(argv: Sequence[str] | None = None) -> None:
    """``python -m intelrt.training.rank_watch [--module] SCRIPT ARGS``: the heartbeat, then SCRIPT as
    ``__main__`` (``python SCRIPT ARGS``; with ``--module``, ``python -m SCRIPT ARGS``)."""
    args = list(sys.argv[1:] if argv is None else argv)
    module = bool(args) and args[0] == "--module"
    if module:
        args = args[1:]
    if not args:
        raise SystemExit("usage: python -m intelrt.training.rank_watch [--module] SCRIPT [ARGS]")
    start_heartbeat()
    sys.argv = list(args)
    if module:
        runpy.run_module(args[0], run_name="__main__", alter_sys=True)
    else:
        sys.path[0] = os.path.dirname(os.path.abspath(args[0]))  # as `python SCRIPT` puts the script's folder first
        runpy.run_path(args[0], run_name="__main__")


# -- the launcher's side -----------------------------------------------------------------------------

@dataclass(frozen=True)
class Hang:
    """Why a launched job was stopped: the ranks that held the others up, and where."""

    hung: tuple[tuple[str, str], ...]
    """(rank, where it is, or what its heartbeat says) of each rank that keeps the others waiting."""
    waiting: tuple[tuple[str, str, float], ...]
    """(rank, where, seconds) of each rank waiting for them."""
    timeout: float

    def __str__(self) -> str:
        waited = ", ".join(f"rank {r} for {s:.0f} s at {w}" for r, w, s in self.waiting) or "none"
        if not self.hung:
            return (f"every rank has waited in a collective for more than {self.timeout:g} s ({waited}): a "
                    "collective that not every rank calls, or a peer that is gone")
        held = "; ".join(f"rank {r} at {w}" for r, w in self.hung)
        return (f"{'rank' if len(self.hung) == 1 else 'ranks'} {', '.join(r for r, _ in self.hung)} stopped making "
                f"progress ({held}) while the others waited in a collective ({waited}); the job was stopped after "
                f"the hang timeout of {self.timeout:g} s")


def _read(directory: Path) -> list[dict[str, Any]]:
    beats = []
    for path in sorted(directory.glob("rank-*.json")):
        try:
            beats.append(json.loads(path.read_text(encoding="utf-8")))
        except (OSError, ValueError):  # being replaced right now: read it next time
            continue
    return beats


def check(directory: Path, timeout: float, ranks: int, now: float | None = None) -> Hang | None:
    """The hang the heartbeats in ``directory`` show, or ``None`` (``ranks``: how many to expect)."""
    now = time.time() if now is None else now
    beats = _read(directory)
    # A heartbeat that has stopped says where the rank *was*: a rank that entered native code holding
    # the GIL right after a collective (or a slow init) still reads "waiting". Only a beating rank is
    # known to wait; one silent for a few beats is not known yet, until it is silent long enough to be hung.
    waiting = [(str(b["rank"]), str(b["where"]), now - float(b["since"])) for b in beats
               if b.get("waiting") and now - float(b["time"]) <= STALE_S and now - float(b["since"]) > timeout]
    if not waiting:
        return None
    long_waiting = {r for r, _, _ in waiting}
    hung = []
    for b in beats:
        rank = str(b["rank"])
        if rank in long_waiting:
            continue
        silent = now - float(b["time"])
        if silent > max(timeout, 5 * INTERVAL_S):
            hung.append((rank, f"no heartbeat for {silent:.0f} s (stuck in native code, or gone); last at {b['where']}"))
        elif silent > STALE_S:
            return None  # neither beating nor silent long enough: look again
        elif not b.get("waiting"):
            hung.append((rank, str(b["where"])))
    seen = {str(b["rank"]) for b in beats}
    hung += [(str(r), "no heartbeat at all (it never started its script)") for r in range(ranks) if str(r) not in seen]
    return Hang(tuple(sorted(hung)), tuple(sorted(waiting)), timeout)


def watch(process: Any, directory: Path, timeout: float, ranks: int,
          on_hang: Callable[[Hang], None] | None = None) -> Hang | None:
    """Poll until ``process`` (the launcher) ends, or a hang shows: then (``on_hang`` told first) stop
    the job and return the hang."""
    while process.poll() is None:
        hang = check(directory, timeout, ranks)
        if hang is not None:
            if on_hang is not None:
                on_hang(hang)
            stop(process, directory)
            return hang
        time.sleep(INTERVAL_S)
    return None


def stop(process: Any, directory: Path, grace: float = 10.0) -> None:
    """SIGTERM to the launcher (torchrun stops its ranks); after ``grace`` seconds, SIGKILL to every
    rank the heartbeats name and to the launcher."""
    import signal
    import subprocess

    process.terminate()
    try:
        process.wait(timeout=grace)
    except subprocess.TimeoutExpired:
        for beat in _read(directory):
            with contextlib.suppress(ProcessLookupError, PermissionError, KeyError, TypeError, ValueError):
                os.kill(int(beat["pid"]), signal.SIGKILL)
        process.kill()
        process.wait()


if __name__ == "__main__":
    main()
