"""Catalogue rows for misbehaving third-party plugins (issue 8, SPEC C6) beyond those in
``test_plugins.py``: each fault is an intelrt error naming the plugin and its distribution, and
``intelrt doctor`` reports it as a finding instead of crashing."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from intelrt.cli import main
from intelrt.errors import PlanError, PluginError
from intelrt.hooks.request import Request
from intelrt.host.manager import PluginHost
from intelrt.planning.diagnosis import diagnose
from intelrt.planning.planner import make_plan
from intelrt.testing.distributions import install_plugin, uninstall

Install = Callable[[str, str], None]


@pytest.fixture
def third_party(tmp_path: Path) -> Iterator[Install]:
    installed: list[tuple[Path, str]] = []

    def install(name: str, source: str) -> None:
        module = f"intelrt_rel_{name}"
        install_plugin(tmp_path / name, distribution=f"intelrt-rel-{name}", entry_point=name, module=module,
                       source="from intelrt import hookimpl\nfrom intelrt.hooks.types import *\n" + source)
        installed.append((tmp_path / name, module))

    yield install
    for root, module in installed:
        uninstall(root, module)


@pytest.mark.claim("C6")
def test_C6_a_plugin_that_changes_a_forced_choice_is_refused(third_party: Install, tiny_model: Path) -> None:
    third_party("sneaky", '''
@hookimpl(tryfirst=True)
def intelrt_select_dtype(backend, request):
    return Decision("float16", "I know better")
''')
    with pytest.raises(PlanError, match=r"plugin 'sneaky' \(distribution intelrt-rel-sneaky 1.0\) changed your "
                                        r"dtype='bfloat16' to 'float16'; intelrt never overrides what you set"):
        make_plan(Request.build(tiny_model, dtype="bfloat16"), host=PluginHost())


@pytest.mark.claim("C6")
def test_C6_two_plugins_setting_one_variable_differently_are_both_named(third_party: Install, tiny_model: Path) -> None:
    for name, value in (("first", "1"), ("second", "2")):
        third_party(name, f'''
@hookimpl
def intelrt_setup_env(backend):
    return [EnvVar("INTELRT_TEST_KNOB", "{value}", "plugin {name} wants it")]
''')
    with pytest.raises(PluginError, match=r"'first'.*and.*'second'.*both set INTELRT_TEST_KNOB \('1' vs '2'\)"):
        make_plan(Request.build(tiny_model), host=PluginHost())


@pytest.mark.claim("C6")
@pytest.mark.parametrize(("hook", "garbage", "expected"), [
    ("intelrt_setup_env(backend)", '{"VAR": "1"}', "a list of EnvVar / Finding"),
    ("intelrt_select_attention(backend)", '("sdpa", "because")', "a Decision"),
    ("intelrt_backends()", '[BackendStatus("gpu9", "gpu9", True, "ok"), "gpu10"]', "a list of Backend subclasses"),
])
def test_C6_a_plugin_returning_garbage_is_named_with_what_was_expected(third_party: Install, tiny_model: Path,
                                                                       hook: str, garbage: str, expected: str) -> None:
    third_party("garbage", f'''
@hookimpl(tryfirst=True)
def {hook}:
    return {garbage}
''')
    with pytest.raises(PluginError, match=rf"plugin 'garbage' \(distribution intelrt-rel-garbage 1.0\) returned "
                                          rf".*expected {expected}"):
        make_plan(Request.build(tiny_model), host=PluginHost())


@pytest.mark.claim("C6")
def test_C6_a_plugin_building_an_invalid_result_is_named(third_party: Install, tiny_model: Path) -> None:
    third_party("invalid", '''
@hookimpl(tryfirst=True)
def intelrt_select_compile(backend):
    return Decision(object(), "not JSON")
''')
    with pytest.raises(PluginError, match=r"'invalid'.*raised TypeError in intelrt_select_compile.*JSON-serialisable"):
        make_plan(Request.build(tiny_model), host=PluginHost())


@pytest.mark.claim("C6")
def test_C6_a_plugin_named_like_a_builtin_is_refused(third_party: Install) -> None:
    third_party("cpu", "")
    with pytest.raises(PluginError, match="two plugins are named 'cpu': one from intelrt, one from intelrt-rel-cpu"):
        PluginHost()


@pytest.mark.claim("C6")
def test_C6_doctor_reports_broken_raising_and_hanging_plugins_instead_of_crashing(
        third_party: Install, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    third_party("broken", "raise RuntimeError('needs libvendor.so')")
    third_party("moody", '''
@hookimpl
def intelrt_diagnose(backends, env):
    raise ValueError("diagnosis exploded")
''')
    third_party("sleepy", '''
import threading
from intelrt.plugin import Backend
_never = threading.Event()

class Sleepy(Backend):
    name = device_type = "sleepy"

    @classmethod
    def detect(cls, env):
        _never.wait(20)

@hookimpl
def intelrt_backends():
    return [Sleepy]
''')
    monkeypatch.setenv("INTELRT_HOOK_TIMEOUT", "0.3")
    report = diagnose()
    status = {p["name"]: p["status"] for p in report["plugins"]}
    assert status["broken"] == "failed" and status["moody"] == "enabled"
    errors = {f["title"]: f["detail"] for f in report["findings"] if f["severity"] == "error"}
    assert "needs libvendor.so" in errors["plugin broken failed to load"]
    assert "'sleepy'" in errors["backend detection failed"] and "did not return within 0.3 s" in errors["backend detection failed"]
    assert "'moody'" in errors["a diagnosis hook failed"] and "diagnosis exploded" in errors["a diagnosis hook failed"]
    assert main(["doctor"]) == 1  # printed, and the exit status says something is wrong
    assert "plugin broken failed to load" in capsys.readouterr().out
    with pytest.raises(PluginError, match="intelrt-rel-broken"):  # outside doctor, the broken plugin stops intelrt
        PluginHost()


@pytest.mark.claim("C6")
def test_C6_a_plugin_hook_that_calls_hooks_itself_does_not_wait_on_itself(
        third_party: Install, tiny_model: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Plugin hooks run on reused worker threads under the time limit; a hook that plans again
    from inside (a framework plugin asking intelrt for a plan) gets its answer inline."""
    third_party("nested", '''
from intelrt.planning.planner import make_plan
from intelrt.host.manager import get_host
from intelrt.hooks.request import Request

seen = []

@hookimpl
def intelrt_diagnose(backends, env):
    plan = make_plan(Request.build(env["INTELRT_TEST_MODEL"]), host=get_host())
    seen.append(plan.backend.name)
    return [Finding("info", "nested plan", plan.backend.name)]
''')
    monkeypatch.setenv("INTELRT_TEST_MODEL", str(tiny_model))
    report = diagnose()
    nested = [f for f in report["findings"] if f["title"] == "nested plan"]
    assert nested and nested[0]["detail"] == "cpu"


def test_builtin_decisions_run_on_the_callers_thread_and_plugins_on_a_worker(third_party: Install,
                                                                             tiny_model: Path,
                                                                             monkeypatch: pytest.MonkeyPatch) -> None:
    """intelrt's own backends are asked directly (no thread hop per decision, which made planning
    slower than loading needed); installed plugins' hooks keep the time limit."""
    import threading

    from intelrt.backends.cpu import CpuBackend

    third_party("watcher", '''
import threading
threads = []

@hookimpl
def intelrt_select_dtype(backend, request):
    threads.append(threading.current_thread().name)
''')
    import intelrt_rel_watcher  # type: ignore[import-not-found]

    seen: list[str] = []
    original = CpuBackend.select_dtype

    def spy(self: CpuBackend, s: Any) -> Any:
        seen.append(threading.current_thread().name)
        return original(self, s)

    monkeypatch.setattr(CpuBackend, "select_dtype", spy)
    make_plan(Request.build(tiny_model), host=PluginHost())
    assert seen == [threading.current_thread().name]
    assert intelrt_rel_watcher.threads == ["intelrt-hook"]
