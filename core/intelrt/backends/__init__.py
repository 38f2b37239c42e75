"""Built-in plugins: generic defaults, and the ``cpu`` and ``cuda`` reference backends."""

from __future__ import annotations

from types import ModuleType

from . import cpu, cuda, defaults, graphs

BUILTIN_PLUGINS: tuple[tuple[str, ModuleType], ...] = (
    ("defaults", defaults),
    ("cpu", cpu),
    ("cuda", cuda),
    ("graphs", graphs),
)
