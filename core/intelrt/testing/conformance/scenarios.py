"""Machines the conformance suite plans on: none, simulated Intel GPUs, simulated Gaudi, and any a
plugin author adds for their own simulated runtime."""

from __future__ import annotations

import contextlib
import importlib
from collections.abc import Callable, Iterable
from contextlib import AbstractContextManager
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class Scenario:
    """A named machine: ``start()`` returns a context manager that simulates it while active."""

    name: str
    start: Callable[[], AbstractContextManager[Any]]


def _simulated(kind: str, count: int, **kwargs: Any) -> Callable[[], AbstractContextManager[Any]]:
    def start() -> AbstractContextManager[Any]:
        from ..simulation import simulate

        return simulate(kind, count, **kwargs)

    return start


def default_scenarios() -> list[Scenario]:
    """This machine as it is, four simulated Intel GPUs, eight simulated Gaudi 2."""
    return [
        Scenario("no accelerator", contextlib.nullcontext),
        Scenario("xpu:4", _simulated("xpu", 4)),
        # PT_ENABLE_INT64_SUPPORT preset, as the Gaudi guide tells users to: the hpu plugin then asks
        # the (simulated) stack in-process instead of starting a probe process per simulation.
        Scenario("hpu:8", _simulated("hpu", 8, env={"PT_ENABLE_INT64_SUPPORT": "1"})),
    ]


def load_scenarios(spec: str) -> list[Scenario]:
    """``MODULE:NAME`` → scenarios. ``NAME`` is a :class:`Scenario`, a list of them, or a
    zero-argument function returning a context manager (the scenario is then named ``NAME``)."""
    module_name, _, attr = spec.partition(":")
    if not module_name or not attr:
        raise ValueError(f"--intelrt-scenario {spec!r}: use MODULE:NAME, e.g. intelrt_acme.testing:scenarios")
    try:
        target = getattr(importlib.import_module(module_name), attr)
    except (ImportError, AttributeError) as exc:
        raise ValueError(f"--intelrt-scenario {spec!r}: cannot load it ({exc})") from None
    if isinstance(target, Scenario):
        return [target]
    if isinstance(target, Iterable) and not isinstance(target, str):
        items = list(target)
        if all(isinstance(s, Scenario) for s in items):
            return items
    if callable(target):
        return [Scenario(attr, target)]
    raise ValueError(f"--intelrt-scenario {spec!r}: {attr} is neither a Scenario, a list of Scenarios, "
                     "nor a function returning a context manager")
