"""The command line on a terminal and in a pipe, run as a process (moved from
tests/contract/test_cli_output.py in issue 41: the contract tier starts no process)."""

from __future__ import annotations

import json
import re
import sys
from pathlib import Path

import pytest

from intelrt.cli import main


def _on_a_terminal(argv: list[str], env: dict[str, str]) -> tuple[int, str]:
    """Run ``python -m intelrt.cli ARGV`` with stdout and stderr on a pseudo-terminal, as a person
    at a terminal runs it; (exit status, everything the terminal received)."""
    import fcntl
    import os
    import pty
    import select
    import struct
    import subprocess
    import termios

    parent, child = pty.openpty()
    fcntl.ioctl(child, termios.TIOCSWINSZ, struct.pack("HHHH", 40, 100, 0, 0))  # rows, columns
    process = subprocess.Popen([sys.executable, "-m", "intelrt.cli", *argv], stdout=child, stderr=child,
                               stdin=subprocess.DEVNULL, env=env)
    os.close(child)
    received = b""
    while True:
        if select.select([parent], [], [], 1.0)[0]:
            try:
                data = os.read(parent, 65536)
            except OSError:  # the terminal's other side closed
                break
            if not data:
                break
            received += data
        elif process.poll() is not None:
            break
    os.close(parent)
    return process.wait(timeout=60), received.decode(errors="replace")


@pytest.mark.slow
def test_on_a_terminal_a_step_is_a_spinner_with_its_clock_and_in_a_pipe_two_plain_lines(
        tiny_model: Path, capsys: pytest.CaptureFixture[str]) -> None:
    import os

    env = {**os.environ, "COLUMNS": "100", "TERM": "xterm-256color"}
    env.pop("NO_COLOR", None)
    code, screen = _on_a_terminal(["plan", str(tiny_model)], env)
    assert code == 0, screen
    # rich redraws the line in place (carriage return, erase line) with the seconds so far
    spinner = re.search(r"\r\x1b\[2K.*? +\d+ s.*intelrt: planning " + re.escape(str(tiny_model)), screen)
    assert spinner, screen[:2000]
    assert re.search(r"intelrt: planning .*: done in \d+\.\d s\r?\n", screen)
    assert "intelrt plan for" in screen  # the result itself, after the spinner is gone

    assert main(["plan", str(tiny_model)]) == 0  # pytest's capture is no terminal: plain lines, no escapes
    err = capsys.readouterr().err
    assert re.fullmatch(r"intelrt: planning .* …\nintelrt: planning .*: done in \d+\.\d s\n", err), err


def test_the_intelrt_executable_keeps_the_exit_status_of_each_outcome(tmp_path: Path) -> None:
    """``python -m intelrt.cli`` ends through os._exit after the atexit handlers (cli/app.py
    console_script): success, --version, a usage error and a closed stdout keep their statuses."""
    import os
    import subprocess

    def status(*argv: str, **kwargs: object) -> tuple[int, str, str]:
        done = subprocess.run([sys.executable, "-m", "intelrt.cli", *argv], capture_output=True, text=True,
                              timeout=120, **kwargs)  # type: ignore[call-overload]
        return done.returncode, done.stdout, done.stderr

    code, out, _ = status("plugins", "--json")
    assert code == 0 and json.loads(out)["plugins"]  # every byte of the result flushed before the exit
    code, out, _ = status("--version")
    assert code == 0 and out.startswith("intelrt ")
    code, _, err = status("plan", "--no-such-flag")
    assert code == 2 and "intelrt: error:" in err
    read, write = os.pipe()
    os.close(read)
    done = subprocess.run([sys.executable, "-m", "intelrt.cli", "plugins"], stdout=write, stderr=subprocess.PIPE,
                          text=True, timeout=120)
    os.close(write)
    assert done.returncode == 1 and done.stderr == ""
