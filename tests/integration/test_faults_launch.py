"""Fault catalogue: ``intelrt launch`` with a rank that hangs, a ``MASTER_PORT`` someone else holds,
and launch settings that cannot work.

A hung rank kept the others waiting in their next collective for torch's process-group timeout (30
minutes), and then torchrun named a *waiting* rank as the failure; a busy ``MASTER_PORT`` ended in
torchrun's ``DistNetworkError`` traceback. Now every rank runs under a heartbeat
(``intelrt.training.rank_watch``) and the launcher stops the job within ``--hang-timeout``, naming
the hung rank and where it is; the port is probed before torchrun starts.

The hangs are real: two CPU ranks under torchrun with gloo, rank 0 in an ``all_reduce`` while
rank 1 sleeps (its heartbeat shows where) or holds the GIL in a regular expression's backtracking
(its heartbeat stops) — ``--hang-timeout 5``; no rank process is left behind.
"""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import sys
import textwrap
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from faults import Catalogue, Fault, check, cli, error, works

catalogue = Catalogue(__file__)
RANK = textwrap.dedent('''
    import sys, time
    import torch
    import torch.distributed as dist

    dist.init_process_group("gloo")
    dist.barrier()                                   # both ranks up: what follows is the hang, not a slow start
    if dist.get_rank() == 1 and sys.argv[1] == "sleep":
        time.sleep(600)                              # a sleep left in: Python, the heartbeat shows the line
    if dist.get_rank() == 1 and sys.argv[1] == "gil":
        import re
        re.match(r"(a+)+$", "a" * 64 + "b")          # backtracking in C, holding the GIL: no heartbeat
    total = torch.ones(2)
    dist.all_reduce(total)
    dist.destroy_process_group()
''')
HANG_TIMEOUT_S = 5


@pytest.fixture
def script(tmp_path: Path) -> Path:
    path = tmp_path / "rank_script.py"
    path.write_text(RANK, encoding="utf-8")
    return path


def processes_running(path: Path) -> list[int]:
    """Processes whose command line names ``path`` (the job's ranks, if any are left)."""
    found = []
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            if str(path).encode() in Path(f"/proc/{pid}/cmdline").read_bytes():
                found.append(int(pid))
        except OSError:
            continue
    return found


HANGS = [
    error("launch-hung-rank-sleeping", "launch", "a rank that hangs mid-job (a sleep left in) while the other waits "
          "in all_reduce (30 minutes, then a waiting rank was blamed)", "rank 1 stopped making progress",
          "rank_script.py:9", "hang timeout of 5 s", "--hang-timeout", risk="hang", exit_code=1,
          trigger="intelrt launch --nproc 2 --hang-timeout 5 rank_script.py sleep", data="sleep"),
    error("launch-hung-rank-holding-the-gil", "launch", "a rank stuck in native code holding the GIL (its heartbeat "
          "stops)", "rank 1 stopped making progress", "no heartbeat", "hang timeout of 5 s", risk="hang", exit_code=1,
          trigger="intelrt launch --nproc 2 --hang-timeout 5 rank_script.py gil", data="gil"),
]


@catalogue.cases(HANGS)
@pytest.mark.timeout(120)
def test_a_hung_rank_stops_the_job_within_the_hang_timeout_naming_it(case: Fault, script: Path) -> None:
    start = time.monotonic()
    seen = cli("launch", "--nproc", "2", "--hang-timeout", str(HANG_TIMEOUT_S), str(script), case.data,
               env={"OMP_NUM_THREADS": "1"})
    took = time.monotonic() - start
    check(case, seen, verbose=False)  # a launch of seconds: run once
    # the ranks start in a few seconds on this machine; the hang is seen HANG_TIMEOUT_S after rank 0 waits
    assert took < 60, f"the job took {took:.0f} s to stop"
    deadline = time.monotonic() + 10
    while processes_running(script) and time.monotonic() < deadline:
        time.sleep(0.2)
    assert not processes_running(script), "a rank of the stopped job is still running"


@pytest.fixture
def busy_port() -> Iterator[str]:
    """A port another process listens on (here: this one, as another job would)."""
    with socket.socket() as held:
        held.bind(("127.0.0.1", 0))
        held.listen()
        yield str(held.getsockname()[1])


def _e(id: str, fault: str, argv: tuple[str, ...], env: dict[str, str], *says: str,
       risk: str = "traceback") -> Fault:
    shown = " ".join(f"{k}={v}" for k, v in env.items())
    return error(f"launch-{id}", "launch", fault, *says, risk=risk,
                 trigger=f"{shown + ' ' if shown else ''}intelrt launch {' '.join(argv)}", data=(argv, env))


SCRIPT = "SCRIPT"
REFUSED = [
    _e("master-port-busy", "a MASTER_PORT another job listens on (torchrun's DistNetworkError traceback)",
       ("--nproc", "2", SCRIPT, "ok"), {"MASTER_PORT": "BUSY"}, "is in use on this machine", "pick a free one"),
    _e("master-port-word", "MASTER_PORT that is not a number", ("--nproc", "2", SCRIPT, "ok"),
       {"MASTER_PORT": "http"}, "MASTER_PORT='http' is not a port number (1-65535)"),
    _e("master-port-too-big", "MASTER_PORT past 65535", ("--nproc", "2", SCRIPT, "ok"), {"MASTER_PORT": "70000"},
       "MASTER_PORT='70000' is not a port number"),
    _e("hang-timeout-negative", "--hang-timeout -1", ("--nproc", "2", "--hang-timeout", "-1", SCRIPT), {},
       "--hang-timeout", "finite number of seconds >= 0"),
    _e("hang-timeout-inf", "--hang-timeout inf: a hang never stopped", ("--nproc", "2", "--hang-timeout", "inf",
                                                                         SCRIPT), {},
       "--hang-timeout", "finite number", risk="hang"),
    _e("hang-timeout-word", "--hang-timeout soon", ("--nproc", "2", "--hang-timeout", "soon", SCRIPT), {},
       "must be a number of seconds"),
    _e("nproc-zero", "--nproc 0", ("--nproc", "0", SCRIPT), {}, "--nproc", ">= 1"),
    _e("script-missing", "a script that does not exist", ("--nproc", "2", "no_such_script.py"), {},
       "no such script"),
    _e("nnodes-without-rendezvous", "--nnodes 2 without a rendezvous", ("--nnodes", "2", "--nproc", "1", SCRIPT), {},
       "pass --rdzv-endpoint"),
    _e("world-size-garbled", "WORLD_SIZE=two inherited from the shell", ("--nproc", "2", SCRIPT), {"WORLD_SIZE": "two"},
       "WORLD_SIZE='two' is not a number of processes", risk="silent wrong"),
    _e("local-rank-garbled", "LOCAL_RANK=x inherited from the shell", ("--nproc", "2", SCRIPT), {"LOCAL_RANK": "x"},
       "LOCAL_RANK='x' is not a rank", risk="wrong culprit"),
    _e("devices-on-cpu", "--devices 0 for a CPU launch", ("--nproc", "2", "--devices", "0", SCRIPT), {},
       "the cpu backend has none to select"),
]


@catalogue.cases(REFUSED)
def test_a_launch_that_cannot_work_is_refused_before_torchrun_starts(case: Fault, script: Path,
                                                                     busy_port: str) -> None:
    argv, env = case.data
    argv = tuple(str(script) if a == SCRIPT else a for a in argv)
    env = {k: busy_port if v == "BUSY" else v for k, v in env.items()}
    check(case, cli("launch", *argv, env=env))
    assert not processes_running(script)


DRY = [
    works("launch-master-port-passed-on", "launch", "a free MASTER_PORT in the environment (torchrun ignores it there)",
          "--master-port 29613", trigger="MASTER_PORT=29613 intelrt launch --dry-run --nproc 2 SCRIPT",
          data=(("--nproc", "2"), {"MASTER_PORT": "29613"})),
    works("launch-hang-watch-stated", "launch", "the dry run says how a hung rank is handled",
          "stops the job, named (--hang-timeout)", "rank_watch",
          trigger="intelrt launch --dry-run --nproc 2 --hang-timeout 5 SCRIPT",
          data=(("--nproc", "2", "--hang-timeout", "5"), {})),
    works("launch-hang-watch-off", "launch", "--hang-timeout 0: not watched, and the dry run says so",
          "hung ranks are not watched", trigger="intelrt launch --dry-run --nproc 2 --hang-timeout 0 SCRIPT",
          data=(("--nproc", "2", "--hang-timeout", "0"), {})),
]


@catalogue.cases(DRY)
def test_the_dry_run_states_the_port_and_the_hang_watch(case: Fault, script: Path) -> None:
    argv, env = case.data
    seen = check(case, cli("launch", "--dry-run", *argv, str(script), env=env))
    assert not processes_running(script)
    if case.id == "launch-hang-watch-off":
        assert "rank_watch" not in seen.output


def test_sigterm_to_intelrt_launch_stops_its_ranks_too(tmp_path: Path) -> None:
    """``kill PID`` of ``intelrt launch`` reaches intelrt alone (not its process group, as Ctrl-C
    does): intelrt passes it on to the launcher, which stops its ranks, then exits 143."""
    started, script = tmp_path / "started", tmp_path / "sleeping_rank.py"
    script.write_text(f"import pathlib, time\npathlib.Path({str(started)!r}).touch()\ntime.sleep(600)\n",
                      encoding="utf-8")
    intelrt = shutil.which("intelrt", path=os.path.dirname(sys.executable)) or "intelrt"
    process = subprocess.Popen([intelrt, "launch", "--nproc", "1", str(script)], stdout=subprocess.PIPE,
                               stderr=subprocess.STDOUT, text=True, env={**os.environ, "OMP_NUM_THREADS": "1"})
    try:
        deadline = time.monotonic() + 120
        while not started.exists() and process.poll() is None and time.monotonic() < deadline:
            time.sleep(0.1)
        assert started.exists() and process.poll() is None
        process.send_signal(signal.SIGTERM)
        output, _ = process.communicate(timeout=90)
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()
    assert process.returncode == 143, output
    assert "intelrt: error: stopped (SIGTERM)" in output and "Traceback" not in output, output
    deadline = time.monotonic() + 10
    while processes_running(script) and time.monotonic() < deadline:
        time.sleep(0.2)
    assert not processes_running(script), "the rank outlived its launch"
