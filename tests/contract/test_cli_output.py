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


