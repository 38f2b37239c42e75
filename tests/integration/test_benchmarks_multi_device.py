"""The two multi-GPU benchmarks of issue 20 in their --tiny form: CPU ranks over gloo, one command
each, the same code path the GPU run takes (build, one process, intelrt launch --nproc 2, table)."""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest
from launched_jobs import error_lines, run_job

BENCHMARKS = Path(__file__).resolve().parents[2] / "benchmarks"
ENV = {**os.environ, "HF_HUB_OFFLINE": "1"}

pytestmark = pytest.mark.slow


def _run(script: str, *args: str) -> str:
    result = run_job([sys.executable, str(BENCHMARKS / script), "--tiny", *args], timeout=300, env=ENV)
    assert result.returncode == 0, error_lines(result.stderr)
    return result.stdout


def test_fsdp_memory_benchmark_trains_both_ways_and_reloads(tmp_path: Path) -> None:
    out = _run("bench_fsdp_memory.py", "--steps", "2", "--block-size", "32", "--workdir", str(tmp_path))
    rows = {line.split("  ")[0]: line for line in out.splitlines() if line.startswith(("1 process", "2 ranks"))}
    assert set(rows) == {"1 process", "2 ranks, FSDP2"}
    assert all(" True " in row for row in rows.values())
    losses = [row.split()[-2:] for row in rows.values()]
    assert losses[0] == losses[1], "FSDP2 over two ranks must log the one-process losses"
    assert "loads with plain from_pretrained" in out
    again = _run("bench_fsdp_memory.py", "--steps", "1", "--block-size", "32", "--workdir", str(tmp_path))
    assert "2 ranks, FSDP2" in again  # a second run in the same workdir starts afresh


def test_tensor_parallel_benchmark_generates_the_same_text(tmp_path: Path) -> None:
    out = _run("bench_tensor_parallel.py", "--new-tokens", "6", "--workdir", str(tmp_path))
    assert "same text on both ranks: True; same text as one process: True" in out
    assert "2 ranks, tensor parallel" in out and "tok/s" in out
