"""benchmarks/bench_first_minute.py --tiny on the CPU (issue 39): the code path the H200 commands
take — fresh processes timed from their start, tokens per window, the issue's rules judged, the
JSON written as the calls come, the chart — at two short runs (the whole --tiny run takes about a
minute; its speed on a shared CPU says nothing)."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path
from typing import Any

import pytest

SCRIPT = Path(__file__).parents[2] / "benchmarks" / "bench_first_minute.py"


def _bench() -> Any:
    spec = importlib.util.spec_from_file_location("bench_first_minute", SCRIPT)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.mark.slow
def test_the_tiny_run_times_fresh_processes_and_judges_the_rules(tmp_path: Path,
                                                               capsys: pytest.CaptureFixture[str]) -> None:
    bench = _bench()
    assert bench.main(["--tiny", "--out", str(tmp_path), "--runs", "plain@8,intelrt:cold@12"]) == 0
    out = capsys.readouterr().out
    (written,) = tmp_path.glob("*.json")
    result = json.loads(written.read_text())
    plain, ours = result["runs"]["plain"], result["runs"]["intelrt:cold"]
    for run, seconds in ((plain, 8), (ours, 12)):
        assert run["returncode"] == 0, run["errors"]
        assert run["calls"] and all(call["tokens"] == 128 for call in run["calls"])
        first = run["calls"][0]
        assert len(first["token_times"]) == 128 and first["token_times"] == sorted(first["token_times"])
        assert 0 < run["ready"]["at"] <= first["token_times"][0] <= first["end"]
        assert len(run["windows"]) == seconds // 5 and sum(run["windows"]) <= 128 * len(run["calls"])
    assert ours["ready"]["warmup"] == "adaptive" and "compile worker" in ours["ready"]["plan"]
    assert {call["warmup"] for call in ours["calls"]} <= {"eager", "compiled"}
    rules = {rule["rule"]: rule for rule in result["rules"]}
    assert set(rules) == {"first token no later than plain generate's + 1 s",
                          "every window from plain's first token: at least plain generate's tokens"}
    assert all(f"{'PASS' if rule['ok'] else 'MISS'} {name}" in out for name, rule in rules.items())
    assert bench.main(["--chart", str(written), "--out", str(tmp_path / "chart")]) == 0
    table = (tmp_path / "chart" / f"{written.stem}.md").read_text()
    assert "| from | plain | intelrt:cold |" in table and "| by 60 s |" in table
