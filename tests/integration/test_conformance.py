"""SPEC C6: the plugin-author conformance suite (``intelrt.testing.conformance``).

It passes on the xpu and hpu plugins, and fails on deliberately broken plugins — each broken in
exactly one way — naming the rule each one breaks. (The example plugins are checked in
test_examples.py.)
"""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from intelrt.testing.conformance import RULES, Scenario, check_plugin
from intelrt.testing.distributions import install_plugin, uninstall

NO_ACCELERATOR = [Scenario("no accelerator", __import__("contextlib").nullcontext)]

_HEADER = '''
import os
from intelrt import hookimpl
from intelrt.errors import PlanError
from intelrt.hooks.types import BackendStatus, Decision, EnvVar, Finding
from intelrt.plugin import Backend
'''

#: rule -> a plugin that breaks that rule and no other.
BROKEN = {
    "loads": '''
@hookimpl
def intelrt_select_precision(backend):  # no such hook
    return None
''',
    "import-cost": '''
import transformers  # at import time: `intelrt plugins` would pay for it

@hookimpl
def intelrt_select_attention(backend):
    return None
''',
    "result-types": '''
@hookimpl(tryfirst=True)
def intelrt_select_dtype(backend, request):
    if backend.name == "cpu" and not request.is_forced("dtype"):
        return "bfloat16"  # a bare string, not a Decision
    return None
''',
    "raises": '''
class Acme(Backend):
    name = device_type = "acme"

    @classmethod
    def detect(cls, env):
        import acme_sdk_that_is_not_installed  # raises ImportError instead of reporting available=False
        return BackendStatus("acme", "acme", True, "never reached")

@hookimpl
def intelrt_backends():
    return [Acme]
''',
    "reasons": '''
@hookimpl(tryfirst=True)
def intelrt_select_attention(backend, request):
    if backend.name == "cpu" and not request.is_forced("attention"):
        return Decision("eager", "eager")  # says what, not why
    return None
''',
    "user-env": '''
@hookimpl
def intelrt_setup_env(backend):
    if backend.name == "cpu":
        return [EnvVar("OMP_NUM_THREADS", "2", "one OpenMP thread per core", overwrite_user=True)]
    return None
''',
    "environ": '''
@hookimpl
def intelrt_setup_env(backend):
    os.environ["OMP_NUM_THREADS"] = "2"  # writes the caller's environment behind intelrt's back
    return None
''',
    "forced": '''
@hookimpl(tryfirst=True)
def intelrt_select_attention(backend, request):
    if backend.name == "cpu":  # ignores request.is_forced("attention")
        return Decision("eager", "eager attention is the most portable implementation")
    return None
''',
    "allow-block": '''
@hookimpl
def intelrt_diagnose(backends):
    xpu = next(b for b in backends if b.name == "xpu")  # assumes the xpu plugin is loaded too
    if not xpu.available:
        return [Finding("info", "no Intel GPU", xpu.reason)]
    return None
''',
}


@pytest.fixture
def broken(tmp_path: Path) -> Iterator[object]:
    """Install a broken plugin as a real distribution (entry point ``broken_<rule>``)."""
    installed: list[tuple[Path, str]] = []

    def install(rule: str) -> str:
        name = "broken_" + rule.replace("-", "_")
        module = f"intelrt_{name}"
        install_plugin(tmp_path / name, distribution=f"intelrt-{name}".replace("_", "-"), entry_point=name,
                       module=module, source=_HEADER + BROKEN[rule])
        installed.append((tmp_path / name, module))
        return name

    yield install
    for root, module in installed:
        uninstall(root, module)


def test_every_rule_has_a_broken_plugin_that_proves_it_can_fail() -> None:
    assert set(BROKEN) == set(RULES)


@pytest.mark.claim("C6")
@pytest.mark.parametrize("rule", sorted(BROKEN))
def test_c6_conformance_fails_on_a_plugin_that_breaks_one_rule_and_names_it(broken, rule: str) -> None:  # type: ignore[no-untyped-def]
    name = broken(rule)
    before = dict(os.environ)
    report = check_plugin(name, scenarios=NO_ACCELERATOR, import_check=rule in ("import-cost", "loads"))
    assert report.broken_rules() == {rule}, report.format()
    assert rule in report.checked
    assert f"[{rule}]" in report.format(rule)
    assert dict(os.environ) == before  # the suite undid the broken plugin's write


@pytest.mark.claim("C6")
@pytest.mark.parametrize("plugin", ["xpu", "hpu"])
def test_c6_conformance_passes_on_the_intel_plugins(plugin: str) -> None:
    report = check_plugin(plugin, import_check=plugin == "xpu")
    assert report.ok, report.format()
    # their backends were available in the simulated scenarios, so their decisions were checked
    backend = f"{plugin.capitalize()}Backend"
    assert {f"{backend}.detect", f"{backend}.run_environment", f"{backend}.select_placement"} <= report.answered, \
        report.notes


@pytest.mark.claim("C6")
def test_c6_conformance_runs_as_a_pytest_suite_with_one_test_per_rule(tmp_path: Path) -> None:
    install_plugin(tmp_path, distribution="intelrt-broken-loads", entry_point="broken_loads",
                   module="intelrt_broken_loads", source=_HEADER + BROKEN["loads"])
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(tmp_path), os.environ.get("PYTHONPATH", "")])}
    try:
        proc = subprocess.run(
            [sys.executable, "-m", "pytest", "-q", "-rfs", "-p", "no:cacheprovider", "-p", "intelrt.testing.fixtures", "--pyargs",
             "intelrt.testing.conformance", "--intelrt-plugin", "broken_loads"],
            capture_output=True, text=True, env=env, cwd=tmp_path, timeout=240)
    finally:
        uninstall(tmp_path, "intelrt_broken_loads")
    out = proc.stdout + proc.stderr
    assert proc.returncode == 1, out
    assert "FAILED" in out and "test_rule[broken_loads-loads]" in out, out
    assert "implements unknown hook 'intelrt_select_precision'" in out, out
    # a plugin that does not load cannot be checked further: the other rules say so, not "passed"
    assert f"1 failed, {len(RULES) - 1} skipped" in out, out
