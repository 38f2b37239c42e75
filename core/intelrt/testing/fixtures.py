"""pytest plugin (entry point ``pytest11``): fixtures for intelrt and plugin authors."""

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
    """A fresh :class:`intelrt.plugins.PluginHost` with built-ins and installed plugins."""
    from intelrt.plugins import PluginHost, reset_host

    reset_host()
    return PluginHost()


@pytest.fixture(scope="session")
def tiny_model_path() -> Path:
    """The tiny causal LM that ``intelrt run`` uses by default (built once into the intelrt cache)."""
    from intelrt.tiny import default_model_path

    return default_model_path()
