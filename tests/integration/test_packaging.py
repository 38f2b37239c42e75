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


def _run(*argv: str | Path, env: dict[str, str] | None = None, stdout_only: bool = False) -> str:
    """What the command printed (stdout and stderr; stdout only for a JSON result: progress is on stderr)."""
    result = subprocess.run([str(a) for a in argv], capture_output=True, text=True, env=env, timeout=300)
    assert result.returncode == 0, f"{argv}:\n{result.stdout}\n{result.stderr}"
    return result.stdout if stdout_only else result.stdout + result.stderr


@pytest.fixture(scope="module")
def built(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, str]:
    """The three distributions built from a copy of the checkout: (their dist folder, the build log)."""
    root = tmp_path_factory.mktemp("packaging")
    source = root / "source"  # build from a copy: setuptools writes build/ and *.egg-info next to the sources
    shutil.copytree(ROOT, source, ignore=shutil.ignore_patterns(".git", ".venv", "build", "*.egg-info", "site",
                                                                "__pycache__", ".*_cache"))
    log = "".join(_run(sys.executable, "-m", "build", "--no-isolation", "--outdir", root / "dist", source / sub)
                  for sub in PROJECTS.values())
    wheels = sorted((root / "dist").glob("*.whl"))
    assert [w.name.split("-")[0] for w in wheels] == sorted(PROJECTS)
    return root / "dist", log


def _bare_venv(root: Path) -> Path:
    """A venv whose dependencies (torch, transformers …) come from this environment's
    site-packages through a path line, minus this repository's own installs; returns its python."""
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
    return python


@pytest.fixture(scope="module")
def fresh_venv(built: tuple[Path, str], tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, str]:
    """A new venv with the three wheels installed; returns (its bin directory, the build log)."""
    dist, log = built
    python = _bare_venv(tmp_path_factory.mktemp("venv"))
    _run(sys.executable, "-m", "pip", "--python", python, "install", "-q", "--no-deps", *sorted(dist.glob("*.whl")))
    return python.parent, log


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
    plugins = {p["name"]: p for p in json.loads(_run(bin_dir / "intelrt", "plugins", "--json", env=env, stdout_only=True))["plugins"]}
    assert set(plugins) == BUILT_IN | {"xpu", "hpu"}  # no example plugin: they are for the tests only
    assert plugins["xpu"]["distribution"] == "intelrt-xpu" and plugins["hpu"]["status"] == "enabled"
    plan = json.loads(_run(bin_dir / "intelrt", "plan", tiny_model, "--json", env=env, stdout_only=True))
    assert plan["backend"]["name"] == "cpu" and plan["decisions"]["decode"]["value"]["method"] == "fast"
    for spec, backend in (("xpu:2", "xpu"), ("hpu:8", "hpu")):  # the vendor stubs are in the wheel too
        plan = json.loads(_run(bin_dir / "intelrt", "plan", tiny_model, "--simulate", spec, "--json", env=env,
                               stdout_only=True))
        assert plan["backend"]["name"] == backend


#: What ``pip install 'intelrt[EXTRA]'`` brings of this repository's distributions.
EXTRAS = {"": {"intelrt"}, "xpu": {"intelrt", "intelrt-xpu"}, "hpu": {"intelrt", "intelrt-hpu"},
          "serve": {"intelrt"}, "all": {"intelrt", "intelrt-xpu", "intelrt-hpu"}}


@pytest.mark.parametrize("extra", list(EXTRAS))
def test_each_extra_installs_from_the_wheels_with_the_plugins_it_names(extra: str, built: tuple[Path, str],
                                                                       tmp_path: Path) -> None:
    """``pip install 'intelrt[xpu]'`` and the others resolve from the built wheels alone (``--no-index``:
    the plugins' ``intelrt>=0.1,<0.2`` must accept this intelrt, and every extra must exist)."""
    dist, _ = built
    python = _bare_venv(tmp_path)
    wanted = f"intelrt[{extra}]" if extra else "intelrt"
    printed = _run(sys.executable, "-m", "pip", "--python", python, "install", "--no-index", "--find-links", dist,
                   wanted)
    print(f"$ pip install '{wanted}'\n{printed}")  # pytest -s shows what pip said
    assert "does not provide the extra" not in printed, printed
    ours = set(_run(python, "-c", "from importlib import metadata; print(*sorted({d.metadata['Name'] for d in "
                    "metadata.distributions() if d.metadata['Name'].startswith('intelrt')}))").split())
    assert ours == EXTRAS[extra], (ours, printed)
    listed = json.loads(_run(python.parent / "intelrt", "plugins", "--json", env=_env(tmp_path),
                           stdout_only=True))["plugins"]
    assert {p["name"] for p in listed} == BUILT_IN | {d.removeprefix("intelrt-") for d in EXTRAS[extra]} - {"intelrt"}


def test_one_version_and_one_release_line_across_the_three_distributions(built: tuple[Path, str]) -> None:
    """The version is declared once per distribution (its ``__version__``, read by setuptools), and
    the plugins and intelrt's extras pin the same minor line as intelrt's version."""
    import re
    import zipfile

    from packaging.requirements import Requirement
    from packaging.version import Version

    dist, _ = built
    metadata = {}
    for wheel in dist.glob("*.whl"):
        with zipfile.ZipFile(wheel) as archive:
            name = next(n for n in archive.namelist() if n.endswith(".dist-info/METADATA"))
            metadata[wheel.name.split("-")[0]] = archive.read(name).decode()
    version = {k: Version(re.search(r"^Version: (.+)$", v, re.M)[1]) for k, v in metadata.items()}  # type: ignore[index]
    core = version["intelrt"]
    line = f">={core.major}.{core.minor},<{core.major}.{core.minor + 1}"
    from intelrt import __version__

    assert str(core) == __version__
    for plugin in ("intelrt_xpu", "intelrt_hpu"):
        requires = [Requirement(r) for r in re.findall(r"^Requires-Dist: (.+)$", metadata[plugin], re.M)]
        assert [str(r.specifier) for r in requires if r.name == "intelrt"] == [str(Requirement("x" + line).specifier)]
        assert re.search(r"^Classifier: ", metadata[plugin], re.M) and "Description-Content-Type: text/markdown" in \
            metadata[plugin]
    extras = [Requirement(r) for r in re.findall(r"^Requires-Dist: (.+)$", metadata["intelrt"], re.M)]
    for requirement in (r for r in extras if r.name in ("intelrt-xpu", "intelrt-hpu")):
        plugin_version = version[requirement.name.replace("-", "_")]
        assert plugin_version in requirement.specifier, (requirement, plugin_version)
    assert "Provides-Extra: dev" not in metadata["intelrt"]  # a dependency group (PEP 735), not published
