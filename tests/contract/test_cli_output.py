"""What the command line prints (issue 21): tables that fit the terminal, headers and counted
nouns, a forced value shown as yours, no simulator internals, progress on stderr for long steps,
other libraries' log records under their own name and only once, and a summary after `launch`."""

from __future__ import annotations

import json
import logging
import re
import sys
from pathlib import Path

import pytest

from intelrt.cli import main
from intelrt.cli.app import configure_logging
from intelrt.support.tables import plural


def _long_words(line: str, width: int) -> bool:
    """A line may overflow only by a word that cannot be broken (a URL, a path)."""
    return any(len(word) > width // 3 for word in line.split())


@pytest.mark.parametrize("columns", [80, 120])
def test_plan_table_fits_the_terminal_and_says_who_decided(tiny_model: Path, columns: int,
                                                           monkeypatch: pytest.MonkeyPatch,
                                                           capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setenv("COLUMNS", str(columns))
    assert main(["plan", str(tiny_model), "--dtype", "bfloat16", "--simulate", "xpu:2"]) == 0
    text = capsys.readouterr().out
    lines = text.splitlines()
    assert all(len(line) <= columns or _long_words(line, columns) for line in lines), \
        [line for line in lines if len(line) > columns]
    assert re.fullmatch(r"  backend: xpu \(\d+ devices\) — highest-priority available accelerator", lines[1]), lines[1]
    assert lines[2].split() == ["decision", "value", "by", "why"]
    dtype = next(line for line in lines if line.lstrip().startswith("dtype "))
    assert "bfloat16" in dtype and "you (forced)" in dtype
    quantization = next(line for line in lines if line.lstrip().startswith("quantization "))
    assert "(forced)" not in quantization


def test_plugins_has_a_header_and_counts_hooks_in_words(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["plugins", "--json"]) == 0
    records = {r["name"]: r for r in json.loads(capsys.readouterr().out)["plugins"]}
    assert main(["plugins"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[0].split() == ["name", "distribution", "version", "status", "backends", "hooks"]
    for line in lines[1:]:
        name = line.split()[0]
        assert line.endswith(plural(len(records[name]["hooks"]), "hook")), line
    assert not re.search(r"\b1 hooks", "\n".join(lines))


def test_doctor_on_a_simulated_machine_shows_the_machine_not_the_simulator(capsys: pytest.CaptureFixture[str]
                                                                           ) -> None:
    assert main(["doctor", "--simulate", "hpu:8"]) in (0, 1)
    text = capsys.readouterr().out
    assert "INTELRT_SIMULATION" not in text and "child_log" not in text
    assert "  name  status       why" in text and "unavailable  " in text
    assert main(["doctor", "--simulate", "hpu:8", "--json"]) in (0, 1)
    report = json.loads(capsys.readouterr().out)
    assert "INTELRT_SIMULATION" not in report["environment"]
    assert any(b["name"] == "hpu" and b["available"] for b in report["backends"])


def test_run_shows_progress_on_stderr_and_the_result_on_stdout(tiny_model: Path,
                                                               capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["run", str(tiny_model), "--max-new-tokens", "3", "--json"]) == 0
    out, err = capsys.readouterr()
    data = json.loads(out)
    assert data["prompt"] == "Intel GPUs are" and data["generation"]["path"] == "fast"
    assert f"intelrt: loading {tiny_model} on cpu …" in err
    assert "intelrt: generating up to 3 tokens: done in" in err


def test_other_libraries_log_under_their_own_name_once_and_only_when_verbose(capsys: pytest.CaptureFixture[str]
                                                                           ) -> None:
    library = logging.getLogger("bitsandbytes.cextension")
    handlers = list(logging.getLogger().handlers), list(logging.getLogger("intelrt").handlers)
    for verbosity in (0, 1):
        restore = configure_logging(verbosity)
        try:
            for _ in range(2):
                library.warning("kernel not found in the local cache")
            logging.getLogger("intelrt.planning").warning("a warning of intelrt's")
        finally:
            restore()
        err = capsys.readouterr().err
        assert err.count("intelrt: WARNING: a warning of intelrt's") == 1
        if verbosity:
            assert err.count("bitsandbytes.cextension: WARNING: kernel not found in the local cache") == 1
            assert "intelrt: WARNING: kernel" not in err
        else:
            assert "kernel not found" not in err
    assert (logging.getLogger().handlers, logging.getLogger("intelrt").handlers) == handlers  # put back


def test_launch_ends_with_ranks_exit_codes_and_time(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    script = tmp_path / "ranks.py"
    script.write_text("import os, sys\nsys.exit(3 if os.environ['RANK'] == '1' else 0)\n", encoding="utf-8")
    assert main(["launch", "--nproc", "2", str(script)]) == 1
    err = capsys.readouterr().err
    assert "intelrt: launching 2 ranks via torchrun on cpu" in err
    assert "intelrt: error: the launched job failed after " in err and "rank 1: 3" in err
    script.write_text("print('rank done')\n", encoding="utf-8")
    assert main(["launch", "--nproc", "2", "--json", str(script)]) == 0
    out, err = capsys.readouterr()
    summary = json.loads(out)
    assert summary["ranks"] == 2 and summary["exit_codes"] == {"0": 0, "1": 0} and summary["seconds"] > 0
    assert summary["command"]["command"][:3] == [sys.executable, "-m", "torch.distributed.run"]


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
