"""``intelrt bench`` / benchmarks/bench_generate.py on the CPU with the tiny model: the side-by-side
table, the output comparison and the target checks are produced; bad options fail clearly."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path

import pytest

from intelrt.cli import main


def test_decode_bench_tiny_prints_the_side_by_side_table(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "bench.json"
    code = main(["bench", "--tiny", "--requests", "3", "--new-tokens", "6", "--load-repeats", "1", "--repeats", "3",
                 "--skip-continuous", "--workdir", str(tmp_path / "model"), "--output", str(out)])
    text = capsys.readouterr().out
    assert code == 0
    for run in ("eager generate", "static cache + compile", "padded generate", "intelrt.load"):
        assert run in text
    assert "identical vs padded" in text  # the fast path's batch equals one padded generate (float32)
    assert "intelrt path (many): fast" in text
    assert sum(line.startswith(("PASS", "MISS")) for line in text.splitlines()) == 5
    data = json.loads(out.read_text())
    assert {r["name"] for r in data["rows"]} >= {"intelrt", "from_pretrained + tokenizer"}
    assert data["plan"]["decode"]["value"]["method"] == "fast"
    for row in data["rows"]:  # fast runs: the median of 3 timed calls; slow ones: one call
        if row["name"] in ("static cache + compile", "intelrt"):
            assert len(row["calls"]) == 3 and row["seconds"] == sorted(row["calls"])[1]
        else:
            assert row["calls"] == []


@pytest.mark.skipif(importlib.util.find_spec("matplotlib") is not None, reason="matplotlib is installed")
def test_decode_bench_chart_without_matplotlib_is_a_clear_error(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["bench", "--tiny", "--chart", "bench.png"]) == 2
    assert "--chart needs matplotlib" in capsys.readouterr().err


def test_decode_bench_refuses_nonsense_sizes(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["bench", "--tiny", "--requests", "0"]) == 2
    assert "argument --requests: must be >= 1, got 0" in capsys.readouterr().err


def test_decode_bench_json_is_the_result_on_stdout_like_every_command(tmp_path: Path,
                                                                     capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "bench.json"
    assert main(["bench", "--tiny", "--only-verify", "--requests", "2", "--new-tokens", "3", "--json",
                 "--workdir", str(tmp_path / "model"), "--output", str(out)]) == 0
    printed = json.loads(capsys.readouterr().out)
    assert printed == json.loads(out.read_text())
    assert [r["group"] for r in printed["rows"]] == ["verify fp32", "verify fp32"]
    assert all(r["match"].startswith("identical") for r in printed["rows"]), printed["rows"]
