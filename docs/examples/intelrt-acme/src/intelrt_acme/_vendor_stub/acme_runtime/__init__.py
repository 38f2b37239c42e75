"""Stand-in for the Acme vendor runtime (``acme_runtime``), for simulation only.

It answers from environment variables, so a simulated machine also works in child processes
(``intelrt plan`` in a subprocess): ``ACME_SIM_DEVICES`` (card count), ``ACME_SIM_BF16``
(``1``/``0``), ``ACME_SIM_MEMORY_GIB``. Like a real driver it reads the visibility variable
``ACME_VISIBLE_DEVICES`` once, at the first device call, and keeps that view.
"""

from __future__ import annotations

import os

__version__ = "3.1.0+simulated"

_visible: list[int] | None = None


def _ids() -> list[int]:
    global _visible
    if _visible is None:
        count = int(os.environ.get("ACME_SIM_DEVICES", "0"))
        mask = os.environ.get("ACME_VISIBLE_DEVICES")
        if mask is None:
            _visible = list(range(count))
        else:
            _visible = [int(p) for p in mask.split(",") if p.strip().isdigit() and int(p) < count]
    return _visible


def device_count() -> int:
    return len(_ids())


def device_name(index: int) -> str:
    if not 0 <= index < device_count():
        raise RuntimeError(f"Acme card {index} out of range ({device_count()} visible)")
    return "Acme A1 (simulated)"


def total_memory(index: int) -> int:
    device_name(index)
    return int(float(os.environ.get("ACME_SIM_MEMORY_GIB", "32")) * 1024**3)


def supports_bf16() -> bool:
    return os.environ.get("ACME_SIM_BF16", "1") == "1"
