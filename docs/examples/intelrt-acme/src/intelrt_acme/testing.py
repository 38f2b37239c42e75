"""Simulated Acme machines for tests: the fake vendor runtime, never the plugin's own code.

``simulate_acme(2)`` puts the stand-in ``acme_runtime`` on ``sys.path`` and describes the
machine through its environment variables, so the plugin's detection runs unchanged.
``scenarios`` hands the same machine to the intelrt conformance suite::

    pytest -p intelrt.testing.fixtures --pyargs intelrt.testing.conformance --intelrt-plugin acme \\
        --intelrt-scenario intelrt_acme.testing:scenarios
"""

from __future__ import annotations

import contextlib
import functools
import importlib
import os
import sys
from collections.abc import Iterator
from pathlib import Path

from intelrt.testing.conformance import Scenario

STUB_DIR = Path(__file__).parent / "_vendor_stub"
"""Put this directory on ``PYTHONPATH`` (with ``ACME_SIM_DEVICES=N``) to simulate in a child process."""


@contextlib.contextmanager
def simulate_acme(count: int = 2, *, bf16: bool = True, memory_gib: float = 32.0) -> Iterator[None]:
    """Pretend ``count`` Acme cards are installed while the block runs."""
    values = {"ACME_SIM_DEVICES": str(count), "ACME_SIM_BF16": "1" if bf16 else "0",
              "ACME_SIM_MEMORY_GIB": str(memory_gib)}
    saved = {k: os.environ.get(k) for k in values}
    os.environ.update(values)
    sys.path.insert(0, str(STUB_DIR))
    sys.modules.pop("acme_runtime", None)
    importlib.invalidate_caches()
    try:
        yield
    finally:
        for key, old in saved.items():
            if old is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = old
        while str(STUB_DIR) in sys.path:
            sys.path.remove(str(STUB_DIR))
        sys.modules.pop("acme_runtime", None)
        importlib.invalidate_caches()


scenarios = [Scenario("acme:2", functools.partial(simulate_acme, 2)),
             Scenario("acme:1 without bf16", functools.partial(simulate_acme, 1, bf16=False))]
