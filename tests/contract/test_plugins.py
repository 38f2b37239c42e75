"""SPEC C6: plugin discovery, allow/block lists, tracing, and errors that name the plugin."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from intelrt.errors import ConfigurationError, PluginError
from intelrt.host.manager import PluginHost
from intelrt.testing.distributions import install_plugin, uninstall


@pytest.fixture
def third_party(tmp_path: Path) -> Iterator[object]:
    """Install plugin distributions for one test, removed afterwards."""
    installed: list[tuple[Path, str]] = []

    def install(name: str, source: str, distribution: str | None = None) -> None:
        module = f"intelrt_test_{name}"
        root = tmp_path / name
        install_plugin(root, distribution=distribution or f"intelrt-{name}", entry_point=name,
                       module=module, source=source)
        installed.append((root, module))

    yield install
    for root, module in installed:
        uninstall(root, module)


GOOD = '''
from intelrt import hookimpl
from intelrt.hooks.types import Decision

@hookimpl(tryfirst=True)
def intelrt_select_attention(backend, request):
    if backend.name == "cpu" and not request.is_forced("attention"):
        return Decision("eager", "the example plugin prefers eager on cpu")
    return None
'''


@pytest.mark.claim("C6")
def test_c6_lists_builtin_and_installed_plugins_with_distribution_and_version() -> None:
    host = PluginHost()
    records = {r.name: r for r in host.records}
    assert {"cpu", "cuda", "xpu", "hpu"} <= set(records)
    assert records["xpu"].distribution == "intelrt-xpu" and records["xpu"].version == "0.1.0"
    assert records["hpu"].distribution == "intelrt-hpu"
    assert records["cpu"].builtin and records["cpu"].backends == ("cpu",) and records["xpu"].backends == ("xpu",)


@pytest.mark.claim("C6")
def test_c6_third_party_plugin_overrides_one_decision_and_is_named_in_the_plan(third_party, tiny_model) -> None:  # type: ignore[no-untyped-def]
    third_party("prefer_eager", GOOD)
    from intelrt.hooks.request import Request
    from intelrt.planning.planner import make_plan

    plan = make_plan(Request.build(tiny_model), host=PluginHost())
    assert plan.decisions["attention"].value == "eager"
    assert plan.decisions["attention"].plugin == "prefer_eager"
    # forced by the user: the plugin steps aside and the user's choice stands
    forced = make_plan(Request.build(tiny_model, attention="sdpa"), host=PluginHost())
    assert forced.decisions["attention"].value == "sdpa" and forced.decisions["attention"].forced


@pytest.mark.claim("C6")
def test_c6_allow_list_empty_string_loads_no_external_plugin() -> None:
    host = PluginHost({"INTELRT_PLUGINS": ""})
    status = {r.name: r.status for r in host.records}
    assert status["xpu"] == "not allowed" and status["hpu"] == "not allowed"
    assert status["cpu"] == "enabled"  # built-ins are part of intelrt itself


@pytest.mark.claim("C6")
def test_c6_allow_list_keeps_only_named_plugins() -> None:
    status = {r.name: r.status for r in PluginHost({"INTELRT_PLUGINS": "xpu"}).records}
    assert status["xpu"] == "enabled" and status["hpu"] == "not allowed"


@pytest.mark.claim("C6")
def test_c6_allow_list_naming_a_missing_plugin_is_an_error() -> None:
    with pytest.raises(ConfigurationError, match="INTELRT_PLUGINS names nosuch"):
        PluginHost({"INTELRT_PLUGINS": "xpu,nosuch"})


@pytest.mark.claim("C6")
def test_c6_block_list_disables_a_plugin() -> None:
    status = {r.name: r.status for r in PluginHost({"INTELRT_DISABLE_PLUGINS": "hpu"}).records}
    assert status["hpu"] == "blocked" and status["xpu"] == "enabled"


@pytest.mark.claim("C6")
def test_c6_plugin_failing_to_import_names_plugin_and_distribution(third_party) -> None:  # type: ignore[no-untyped-def]
    third_party("broken_import", "raise ImportError('needs libfoo.so')", distribution="intelrt-broken")
    with pytest.raises(PluginError) as info:
        PluginHost()
    message = str(info.value)
    assert "'broken_import'" in message and "intelrt-broken" in message and "libfoo.so" in message
    assert "INTELRT_DISABLE_PLUGINS=broken_import" in message
    # blocked, the rest of intelrt works
    assert PluginHost({"INTELRT_DISABLE_PLUGINS": "broken_import"}).records


@pytest.mark.claim("C6")
def test_c6_plugin_raising_in_a_hook_is_named(third_party) -> None:  # type: ignore[no-untyped-def]
    third_party("raises", '''
from intelrt import hookimpl
from intelrt.plugin import Backend

class Raising(Backend):
    name = device_type = "raising"

    @classmethod
    def detect(cls, env):
        raise KeyError("boom")

@hookimpl
def intelrt_backends():
    return [Raising]
''')
    from intelrt.planning.detection import detect

    with pytest.raises(PluginError, match=r"plugin 'raises' \(distribution intelrt-raises 1.0\) raised KeyError in "
                                          r"Raising.detect"):
        detect(host=PluginHost())


@pytest.mark.claim("C6")
def test_c6_plugin_returning_a_wrong_type_is_named(third_party, tiny_model) -> None:  # type: ignore[no-untyped-def]
    third_party("wrongtype", '''
from intelrt import hookimpl

@hookimpl(tryfirst=True)
def intelrt_select_dtype(backend):
    return "bfloat16"
''')
    from intelrt.hooks.request import Request
    from intelrt.planning.planner import make_plan

    with pytest.raises(PluginError, match=r"'wrongtype'.*returned str.*intelrt_select_dtype; expected a Decision"):
        make_plan(Request.build(tiny_model), host=PluginHost())


@pytest.mark.claim("C6")
def test_c6_unknown_hook_is_rejected_at_load(third_party) -> None:  # type: ignore[no-untyped-def]
    third_party("typo", '''
from intelrt import hookimpl

@hookimpl
def intelrt_select_atention(backend):
    return None
''')
    with pytest.raises(PluginError, match="unknown hook 'intelrt_select_atention'"):
        PluginHost()


@pytest.mark.claim("C6")
def test_c6_two_plugins_claiming_one_backend_are_both_named(third_party) -> None:  # type: ignore[no-untyped-def]
    third_party("fakexpu", '''
from intelrt import hookimpl
from intelrt.plugin import Backend, BackendStatus

class OtherXpu(Backend):
    name = device_type = "xpu"

    @classmethod
    def detect(cls, env):
        return BackendStatus("xpu", "xpu", False, "another xpu plugin")

@hookimpl
def intelrt_backends():
    return [OtherXpu]
''')
    from intelrt.planning.detection import detect

    with pytest.raises(PluginError, match="claimed by two plugins") as info:
        detect(host=PluginHost())
    assert "fakexpu" in str(info.value) and "intelrt-xpu" in str(info.value)


@pytest.mark.claim("C6")
def test_c6_a_hanging_plugin_times_out_with_its_name(third_party, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    third_party("hangs", '''
import threading
from intelrt import hookimpl
from intelrt.plugin import Backend

_never = threading.Event()

class Hanging(Backend):
    name = device_type = "hanging"

    @classmethod
    def detect(cls, env):
        _never.wait(30)

@hookimpl
def intelrt_backends():
    return [Hanging]
''')
    from intelrt.host.timeout import HookTimeoutError
    from intelrt.planning.detection import detect

    host = PluginHost({"INTELRT_HOOK_TIMEOUT": "0.5"})
    with pytest.raises(HookTimeoutError, match=r"plugin 'hangs'.*Hanging.detect did not return within 0.5 s"):
        detect(host=host)


def test_hook_timeout_setting_is_validated() -> None:
    with pytest.raises(ConfigurationError, match="INTELRT_HOOK_TIMEOUT='soon' is not a number"):
        PluginHost({"INTELRT_HOOK_TIMEOUT": "soon"})
