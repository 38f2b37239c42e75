"""SPEC C6: the two example plugins in docs/examples install with pip (into this module's own
directory, never into the user's environment), show up in ``intelrt plugins``, decide in
``intelrt plan`` under their own name, pass the conformance suite (their own tests run it), and
change nothing for anything else."""

from __future__ import annotations

import importlib
import importlib.util
import json
import os
import re
import shutil
import subprocess
import sys
from collections.abc import Iterator
from importlib import metadata
from pathlib import Path

import pytest

from intelrt.host.manager import reset_host

ROOT = Path(__file__).resolve().parents[2]
EXAMPLES = ROOT / "docs" / "examples"
#: distribution -> entry-point name
PLUGINS = {"intelrt-gemma2-eager": "gemma2_eager", "intelrt-acme": "acme"}
ACME_STUB = EXAMPLES / "intelrt-acme" / "src" / "intelrt_acme" / "_vendor_stub"


@pytest.fixture(scope="module", autouse=True)
def examples_installed(tmp_path_factory: pytest.TempPathFactory) -> Iterator[None]:
    """``pip install docs/examples/<plugin>`` into a directory of this test module only: the
    examples are for the tests, never installed into the user's environment. In-process code
    finds them on ``sys.path``, subprocesses on ``PYTHONPATH`` (:func:`_intelrt`); afterwards both
    forget them."""
    global _TARGET
    target = tmp_path_factory.mktemp("example-plugins")
    sources = tmp_path_factory.mktemp("example-sources")  # pip builds in the source tree: a copy keeps docs/ clean
    for d in PLUGINS:
        shutil.copytree(EXAMPLES / d, sources / d, ignore=shutil.ignore_patterns("build", "*.egg-info"))
    isolation = [] if importlib.util.find_spec("setuptools") is None else ["--no-build-isolation"]
    subprocess.run([sys.executable, "-m", "pip", "install", "-q", "--no-deps", *isolation, "--target", str(target),
                    *(str(sources / d) for d in PLUGINS)], check=True, timeout=600)
    sys.path.insert(0, str(target))
    importlib.invalidate_caches()
    for distribution in PLUGINS:  # this installation, not one that may linger elsewhere
        assert Path(str(metadata.distribution(distribution).locate_file(""))) == target
    _TARGET = str(target)
    reset_host()
    yield
    sys.path.remove(str(target))
    for name in [m for m in sys.modules if m.split(".")[0] in ("intelrt_acme", "intelrt_gemma2_eager")]:
        del sys.modules[name]
    importlib.invalidate_caches()
    _TARGET = None
    reset_host()


_TARGET: str | None = None


def _intelrt(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    full = {k: v for k, v in os.environ.items() if not k.startswith(("INTELRT_", "ACME_"))}
    extra = dict(env or {})
    full["PYTHONPATH"] = os.pathsep.join(p for p in (_TARGET, extra.pop("PYTHONPATH", None),
                                                     os.environ.get("PYTHONPATH")) if p)
    full.update(extra)
    return subprocess.run([sys.executable, "-m", "intelrt.cli", *args], capture_output=True, text=True,
                          env=full, timeout=240)


def _model(root: Path, model_type: str) -> str:
    root.mkdir()
    arch = {"gemma2": "Gemma2ForCausalLM", "qwen3": "Qwen3ForCausalLM"}[model_type]
    (root / "config.json").write_text(json.dumps({
        "model_type": model_type, "architectures": [arch], "vocab_size": 256, "hidden_size": 64,
        "num_hidden_layers": 2, "num_attention_heads": 4, "attn_logit_softcapping": 50.0}))
    return str(root)


@pytest.mark.claim("C6")
def test_c6_pip_installed_examples_are_listed_by_intelrt_plugins() -> None:
    proc = _intelrt("plugins", "--json")
    assert proc.returncode == 0, proc.stderr
    records = {r["name"]: r for r in json.loads(proc.stdout)["plugins"]}
    for distribution, name in PLUGINS.items():
        assert records[name]["distribution"] == distribution and records[name]["status"] == "enabled"
    assert records["gemma2_eager"]["hooks"] == ["intelrt_select_attention"]
    assert records["acme"]["hooks"] == ["intelrt_backends"] and records["acme"]["backends"] == ["acme"]


@pytest.mark.claim("C6")
def test_c6_gemma2_example_overrides_attention_in_intelrt_plan(tmp_path: Path) -> None:
    proc = _intelrt("plan", _model(tmp_path / "gemma2", "gemma2"), "--simulate", "xpu:1")
    assert proc.returncode == 0, proc.stderr
    assert re.search(r"^\s*attention\s+eager\s+gemma2_eager\s+Gemma 2 soft-caps", proc.stdout, re.M), proc.stdout


@pytest.mark.claim("C6")
def test_c6_acme_example_adds_a_backend_that_plans_on_its_simulated_runtime(tmp_path: Path) -> None:
    model = _model(tmp_path / "qwen3", "qwen3")
    proc = _intelrt("plan", model, "--json", env={"PYTHONPATH": str(ACME_STUB), "ACME_SIM_DEVICES": "2"})
    assert proc.returncode == 0, proc.stderr
    plan = json.loads(proc.stdout)
    assert plan["backend"]["name"] == "acme" and plan["backend"]["plugin"] == "acme"
    assert plan["backend"]["device_count"] == 2
    assert plan["decisions"]["dtype"]["value"] == "bfloat16" and plan["decisions"]["dtype"]["plugin"] == "acme"
    assert plan["decisions"]["collective"]["plugin"] == "acme"
    # without the runtime: a clear error that names the cause, no silent fallback (SPEC C1)
    import intelrt

    with pytest.raises(intelrt.BackendUnavailableError, match=r"the Acme runtime \(module acme_runtime\) is not installed"):
        intelrt.plan(model, backend="acme")


@pytest.mark.claim("C6")
def test_c6_installed_examples_change_nothing_else(simulate, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    import intelrt
    from intelrt.host.manager import PluginHost

    host = PluginHost()
    assert {PLUGINS[d] for d in PLUGINS} <= {r.name for r in host.enabled()}
    gemma2, qwen3 = _model(tmp_path / "gemma2", "gemma2"), _model(tmp_path / "qwen3", "qwen3")
    on_cpu = intelrt.plan(gemma2)  # gemma2 on another backend: not the example's business
    assert on_cpu.backend.name == "cpu"
    assert {d.plugin for d in on_cpu.decisions.values()}.isdisjoint(PLUGINS.values())
    acme = intelrt.detect().get("acme")
    assert acme is not None and not acme.available  # no runtime here: auto never picks it
    simulate("xpu", count=1)
    other_family = intelrt.plan(qwen3)
    assert other_family.backend.name == "xpu"
    assert {d.plugin for d in other_family.decisions.values()}.isdisjoint(PLUGINS.values())


@pytest.mark.claim("C6")
def test_c6_examples_own_tests_pass_including_the_conformance_suite(capsys: pytest.CaptureFixture[str]) -> None:
    """The examples' tests are what a plugin author writes: simulated hardware + ``check_conformance``."""
    code = pytest.main(["-q", "-p", "no:cacheprovider", "-p", "no:randomly", "--rootdir", str(EXAMPLES),
                        str(EXAMPLES / "intelrt-gemma2-eager" / "tests"), str(EXAMPLES / "intelrt-acme" / "tests")])
    out = capsys.readouterr().out
    assert code == pytest.ExitCode.OK, out
    assert "7 passed" in out, out
