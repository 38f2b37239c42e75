"""pytest plugin for intelrt and its plugin authors, opt-in: ``pytest -p intelrt.testing.fixtures``
(or ``addopts = "-p intelrt.testing.fixtures"`` in your pytest configuration). Not registered
through a ``pytest11`` entry point, so that installing intelrt adds no fixture or option to other
projects' pytest sessions."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import ExitStack
from pathlib import Path
from typing import Any

import pytest


@pytest.fixture
def simulate() -> Iterator[Callable[..., Any]]:
    """``simulate("xpu", count=2, ...)`` inside a test; the simulation ends with the test."""
    from .simulation import simulate as start

    with ExitStack() as stack:
        yield lambda *args, **kwargs: stack.enter_context(start(*args, **kwargs))


@pytest.fixture
def plugin_host(monkeypatch: pytest.MonkeyPatch) -> Any:
    """A fresh :class:`intelrt.host.manager.PluginHost` with built-ins and installed plugins."""
    from ..host.manager import PluginHost, reset_host

    reset_host()
    return PluginHost()


@pytest.fixture(scope="session")
def tiny_model_path() -> Path:
    """The tiny causal LM that ``intelrt run`` uses by default (built once into the intelrt cache)."""
    from ..tiny import default_model_path

    return default_model_path()


# -- the conformance suite's options (``pytest -p intelrt.testing.fixtures --pyargs intelrt.testing.conformance``)

def pytest_addoption(parser: pytest.Parser) -> None:
    group = parser.getgroup("intelrt", "intelrt plugin conformance (pytest -p intelrt.testing.fixtures "
                                       "--pyargs intelrt.testing.conformance)")
    group.addoption("--intelrt-plugin", action="append", dest="intelrt_plugin", default=[], metavar="NAME",
                    help="plugin to check (entry-point name, distribution or module); repeatable; "
                         "default: every installed intelrt plugin")
    group.addoption("--intelrt-scenario", action="append", dest="intelrt_scenario", default=[],
                    metavar="MODULE:NAME", help="extra machines to check on: a Scenario, a list of them, or a "
                                                "function returning a context manager; repeatable")
    group.addoption("--intelrt-model", action="append", dest="intelrt_model", default=[], metavar="PATH",
                    help="extra model directory (with config.json) to plan for; repeatable")


@pytest.fixture
def check_conformance(pytestconfig: pytest.Config) -> Callable[..., Any]:
    """``check_conformance(plugin)`` → :class:`intelrt.testing.conformance.Report`, with the
    ``--intelrt-scenario`` / ``--intelrt-model`` options applied."""
    from .conformance import check_plugin, load_scenarios

    extra = [s for spec in pytestconfig.getoption("intelrt_scenario") or () for s in load_scenarios(spec)]
    models = list(pytestconfig.getoption("intelrt_model") or ())

    def check(plugin: object, **kwargs: Any) -> Any:
        kwargs.setdefault("extra_scenarios", extra)
        kwargs.setdefault("models", models)
        return check_plugin(plugin, **kwargs)

    return check
