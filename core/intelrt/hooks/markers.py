"""pluggy's markers for intelrt: ``hookspec`` marks the specifications, ``hookimpl`` a plugin's
implementations (``@intelrt.hookimpl``)."""

from __future__ import annotations

import pluggy

PROJECT = "intelrt"
"""pluggy's project name: the prefix every hook shares and the entry-point group plugins use."""

hookspec = pluggy.HookspecMarker(PROJECT)
hookimpl = pluggy.HookimplMarker(PROJECT)
"""Decorator for hook implementations: ``@intelrt.hookimpl`` (``tryfirst=True`` to answer before
a built-in backend, ``trylast=True`` to answer after)."""
