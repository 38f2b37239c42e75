"""What the docs say a command prints is what it prints (issue 32): every block of the quickstart,
cli, serving and training pages marked ``<!-- output of: intelrt ARGS -->`` (or ``output of
(exit N)``) is compared with ``intelrt ARGS`` run as a process, offline, on the embedded tiny model.

The documented lines must appear in the command's output (stdout and stderr), in order; a page may
leave lines out, not change them. Before comparing, both sides get the same normalisation: the
tiny model's directory (which depends on ``INTELRT_CACHE``), a listening port, and seconds.
``intelrt serve`` listens on a free port (``--port 0``), is read up to its readiness line and
then stopped with ``SIGTERM``.
"""

from __future__ import annotations

import os
import re
import shlex
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

pytestmark = [pytest.mark.integration, pytest.mark.slow]

DOCS = Path(__file__).resolve().parents[2] / "docs"
PAGES = ("quickstart.md", "cli.md", "serving.md", "training.md")
BLOCK = re.compile(r"^<!-- output of(?: \(exit (?P<exit>\d+)\))?: (?P<command>intelrt [^>]*?) -->\n"
                   r"```(?P<lang>\w+)\n(?P<body>.*?)^```", re.M | re.S)
READY = "ready: http://"
NORMAL = ((re.compile(r"\S*/tiny-qwen3-v\d+"), "TINY"), (re.compile(r"127\.0\.0\.1:\d+"), "127.0.0.1:PORT"),
          (re.compile(r"\d+(\.\d+)? s\b"), "N s"))


def documented() -> list[tuple[str, str, int, list[str]]]:
    """(page, command, exit status, lines) of every marked block."""
    found = []
    for page in PAGES:
        for match in BLOCK.finditer((DOCS / page).read_text(encoding="utf-8")):
            lines = [line.rstrip() for line in match["body"].splitlines() if line.strip()]
            if lines and lines[0] == f"$ {match['command']}":
                lines = lines[1:]  # a console block starts with the command itself
            found.append((page, match["command"], int(match["exit"] or 0), lines))
    return found


def normal(line: str) -> str:
    for pattern, replacement in NORMAL:
        line = pattern.sub(replacement, line)
    return line.rstrip()


def run(command: str, cwd: Path) -> tuple[int, list[str]]:
    argv = [sys.executable, "-m", "intelrt.cli", *shlex.split(command)[1:]]
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "COLUMNS": "100", "OMP_NUM_THREADS": "1"}
    if argv[3] != "serve":
        done = subprocess.run(argv, capture_output=True, text=True, env=env, cwd=cwd, timeout=600)
        return done.returncode, (done.stdout + done.stderr).splitlines()
    process = subprocess.Popen([*argv, "--port", "0"], stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                               env=env, cwd=cwd)
    assert process.stdout is not None
    try:
        lines, deadline = [], time.monotonic() + 300
        for line in process.stdout:
            lines.append(line.rstrip("\n"))
            if line.startswith(READY) or time.monotonic() > deadline:
                break
        process.send_signal(signal.SIGTERM)
        rest, _ = process.communicate(timeout=120)
        return process.returncode, lines + rest.splitlines()
    finally:
        if process.poll() is None:  # a timed-out test must not leave a server behind
            process.kill()
            process.wait()


def test_every_page_marks_the_output_it_shows() -> None:
    pages = {page for page, *_ in documented()}
    assert pages == set(PAGES), f"pages without a checked output block: {set(PAGES) - pages}"


@pytest.mark.parametrize(("page", "command", "status", "lines"), documented(),
                         ids=[f"{page}:{command}" for page, command, *_ in documented()])
def test_the_documented_output_is_what_the_command_prints(page: str, command: str, status: int, lines: list[str],
                                                          tmp_path: Path, tiny_model: Path) -> None:
    code, printed = run(command, tmp_path)
    assert code == status, f"{page}: `{command}` exited {code}, the page says {status}:\n" + "\n".join(printed)
    actual = [normal(line) for line in printed]
    at = 0
    for line in map(normal, lines):
        assert line in actual[at:], (f"{page}: `{command}` does not print, at this point, the documented line\n"
                                     f"  {line}\nit printed:\n" + "\n".join(printed))
        at = actual.index(line, at) + 1
