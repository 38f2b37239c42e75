"""``python -m build`` makes the three distributions, and their wheels work in a fresh virtual
environment (issue 21): not the editable checkout the rest of the suite imports.

The fresh environment gets intelrt, intelrt-xpu and intelrt-hpu from the wheels only; their
dependencies (torch, transformers …) come from this environment's site-packages through a path
line, minus everything this repository installed there, so the test needs no network and takes
well under a couple of minutes.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import sysconfig
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
PROJECTS = {"intelrt": ".", "intelrt_xpu": "plugins/xpu", "intelrt_hpu": "plugins/hpu"}
#: site-packages entries that belong to this repository's own (editable) installs.
OURS = ("intelrt", "__editable__", "_intelrt")
BUILT_IN = {"cpu", "cuda"}


def _run(*argv: str | Path, env: dict[str, str] | None = None) -> str:
    result = subprocess.run([str(a) for a in argv], capture_output=True, text=True, env=env, timeout=300)
    assert result.returncode == 0, f"{argv}:\n{result.stdout}\n{result.stderr}"
    return result.stdout + result.stderr


@pytest.fixture(scope="module")
def fresh_venv(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, str]:
    """A new venv with the three wheels installed; returns (its bin directory, the build log)."""
    root = tmp_path_factory.mktemp("packaging")
    source = root / "source"  # build from a copy: setuptools writes build/ and *.egg-info next to the sources
    shutil.copytree(ROOT, source, ignore=shutil.ignore_patterns(".git", ".venv", "build", "*.egg-info", "site",
                                                                "__pycache__", ".*_cache"))
    log = "".join(_run(sys.executable, "-m", "build", "--no-isolation", "--outdir", root / "dist", source / sub)
                  for sub in PROJECTS.values())
    wheels = sorted((root / "dist").glob("*.whl"))
    assert [w.name.split("-")[0] for w in wheels] == sorted(PROJECTS)
    venv = root / "venv"
    _run(sys.executable, "-m", "venv", "--without-pip", venv)
    python = venv / "bin" / "python"
    site = Path(_run(python, "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])").strip())
    dependencies = root / "dependencies"
    dependencies.mkdir()
    for entry in Path(sysconfig.get_paths()["purelib"]).iterdir():
        if not entry.name.startswith(OURS) and entry.suffix != ".pth":
            (dependencies / entry.name).symlink_to(entry)
    (site / "dependencies.pth").write_text(f"{dependencies}\n", encoding="utf-8")
    _run(sys.executable, "-m", "pip", "--python", python, "install", "-q", "--no-deps", *wheels)
    return venv / "bin", log


def _env(tmp: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV") and not k.startswith("INTELRT_")}
    return {**env, "HF_HUB_OFFLINE": "1", "INTELRT_CACHE": str(tmp / "cache")}


def test_the_build_has_no_setuptools_deprecation_warnings(fresh_venv: tuple[Path, str]) -> None:
    _, log = fresh_venv
    assert "Successfully built" in log
    assert "Deprecat" not in log and "deprecat" not in log, log


def test_the_wheels_run_in_a_fresh_venv(fresh_venv: tuple[Path, str], tiny_model: Path, tmp_path: Path) -> None:
    bin_dir, _ = fresh_venv
    env = _env(tmp_path)
    where = _run(bin_dir / "python", "-c", "import intelrt, intelrt_xpu, intelrt_hpu; "
                 "print(intelrt.__file__, intelrt_xpu.__file__, intelrt_hpu.__file__)", env=env)
    assert all(str(bin_dir.parent) in path for path in where.split()), where
    plugins = {p["name"]: p for p in json.loads(_run(bin_dir / "intelrt", "plugins", "--json", env=env))["plugins"]}
    assert set(plugins) == BUILT_IN | {"xpu", "hpu"}  # no example plugin: they are for the tests only
    assert plugins["xpu"]["distribution"] == "intelrt-xpu" and plugins["hpu"]["status"] == "enabled"
    plan = json.loads(_run(bin_dir / "intelrt", "plan", tiny_model, "--json", env=env))
    assert plan["backend"]["name"] == "cpu" and plan["decisions"]["decode"]["value"]["method"] == "fast"
    for spec, backend in (("xpu:2", "xpu"), ("hpu:8", "hpu")):  # the vendor stubs are in the wheel too
        plan = json.loads(_run(bin_dir / "intelrt", "plan", tiny_model, "--simulate", spec, "--json", env=env))
        assert plan["backend"]["name"] == backend
