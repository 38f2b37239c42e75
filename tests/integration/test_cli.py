"""The command line, run as users run it (a subprocess of the installed `intelrt` script)."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

INTELRT = shutil.which("intelrt", path=os.path.dirname(sys.executable)) or "intelrt"


def run(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run([INTELRT, *args], capture_output=True, text=True, timeout=120,
                          env={**os.environ, **(env or {})})


def test_plugins_json_lists_every_backend_plugin_with_distribution_and_version() -> None:
    result = run("plugins", "--json")
    assert result.returncode == 0, result.stderr
    plugins = {p["name"]: p for p in json.loads(result.stdout)["plugins"]}
    assert {"cpu", "cuda", "xpu", "hpu"} <= set(plugins)
    assert plugins["xpu"]["distribution"] == "intelrt-xpu" and plugins["xpu"]["version"] == "0.1.0"
    assert plugins["hpu"]["distribution"] == "intelrt-hpu" and plugins["cpu"]["distribution"] == "intelrt"
    assert all(p["status"] == "enabled" for p in plugins.values())


# xpu:2 is two Data Center GPU Max 1550 cards: four devices in FLAT mode, each tile one (issue 17)
@pytest.mark.parametrize("spec, backend, count", [("xpu:2", "xpu", 4), ("xpu:2:max1100", "xpu", 2), ("hpu:8", "hpu", 8)])
def test_plan_simulated_names_backend_and_device_count(tiny_model: Path, spec: str, backend: str, count: int) -> None:
    result = run("plan", str(tiny_model), "--simulate", spec, "--json")
    assert result.returncode == 0, result.stderr
    plan = json.loads(result.stdout)
    assert plan["backend"]["name"] == backend and plan["backend"]["device_count"] == count


def test_plan_error_exits_nonzero_with_the_reason(tiny_model: Path) -> None:
    result = run("plan", str(tiny_model), "--backend", "xpu")
    assert result.returncode == 2
    assert "backend 'xpu' was asked for" in result.stderr and "Traceback" not in result.stderr


def test_bad_simulate_spec_is_explained(tiny_model: Path) -> None:
    result = run("plan", str(tiny_model), "--simulate", "tpu:2")
    assert result.returncode != 0 and "KIND[:COUNT[:GENERATION]]" in result.stderr


def test_run_prints_plan_and_generated_text(tiny_model: Path) -> None:
    result = run("run", str(tiny_model), "--prompt", "Intel Gaudi is", "--max-new-tokens", "5", "--json")
    assert result.returncode == 0, result.stderr
    data = json.loads(result.stdout)
    assert data["plan"]["backend"]["name"] == "cpu" and data["prompt"] == "Intel Gaudi is"
    assert isinstance(data["output"], str) and data["output"]


@pytest.mark.claim("C1")
def test_doctor_lists_every_backend_with_reasons_and_redacts_secrets() -> None:
    result = run("doctor", "--json", env={"HF_TOKEN": "secret-value-123", "ZE_AFFINITY_MASK": "0"})
    assert "secret-value-123" not in result.stdout + result.stderr
    report = json.loads(result.stdout)
    backends = {b["name"]: b for b in report["backends"]}
    assert backends["cpu"]["available"] and not backends["xpu"]["available"]
    assert backends["xpu"]["reason"] and backends["hpu"]["reason"]
    assert report["environment"]["HF_TOKEN"] == "***"
    assert report["environment"]["ZE_AFFINITY_MASK"] == "0"
    assert report["packages"]["torch"].startswith("2.")
