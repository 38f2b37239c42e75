"""One test per (plugin, rule):
``pytest -p intelrt.testing.fixtures --pyargs intelrt.testing.conformance --intelrt-plugin NAME``.

Without ``--intelrt-plugin`` every plugin installed in the ``intelrt`` entry-point group is
checked. ``--intelrt-scenario MODULE:NAME`` adds machines (your simulated runtime);
``--intelrt-model PATH`` adds model directories to plan for.
"""

from __future__ import annotations

import functools

import pytest

from intelrt.testing.conformance import (
    RULES,
    Report,
    check_plugin,
    installed_plugin_names,
    load_scenarios,
)


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    if "plugin_name" in metafunc.fixturenames:
        names = metafunc.config.getoption("intelrt_plugin", default=None) or installed_plugin_names()
        metafunc.parametrize("plugin_name", names)
    if "rule" in metafunc.fixturenames:
        metafunc.parametrize("rule", list(RULES))


@functools.cache
def _report(plugin: str, scenarios: tuple[str, ...], models: tuple[str, ...]) -> Report:
    extra = [s for spec in scenarios for s in load_scenarios(spec)]
    return check_plugin(plugin, extra_scenarios=extra, models=models)


def test_rule(plugin_name: str, rule: str, pytestconfig: pytest.Config) -> None:
    """The plugin follows ``rule`` (see ``intelrt.testing.conformance.RULES``)."""
    report = _report(plugin_name, tuple(pytestconfig.getoption("intelrt_scenario", default=None) or ()),
                     tuple(pytestconfig.getoption("intelrt_model", default=None) or ()))
    if rule not in report.checked:
        pytest.skip(f"not checked: {report.format()}")
    assert not report.of(rule), report.format(rule)
