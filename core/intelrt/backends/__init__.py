"""The built-in backends (``cpu``, ``cuda``), intelrt's generic rules, and the plan-time rules every
backend shares (sizing, parallelism, decode and batching, the compact step's families)."""

from __future__ import annotations

from types import ModuleType

from . import cpu, cuda

BUILTIN_PLUGINS: tuple[tuple[str, ModuleType], ...] = (
    ("cpu", cpu),
    ("cuda", cuda),
)
"""intelrt's own plugins, registered before any installed one: each contributes its backend."""
