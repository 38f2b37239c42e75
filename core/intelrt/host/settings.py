"""The environment variables that steer the plugin host (each documented in docs/environment.md)."""

from __future__ import annotations

ENTRY_POINT_GROUP = "intelrt"
"""Installed plugins declare themselves in this entry-point group (SPEC C6)."""
ALLOW_VAR = "INTELRT_PLUGINS"
"""Comma-separated allow-list of installed plugins (entry-point or distribution names)."""
BLOCK_VAR = "INTELRT_DISABLE_PLUGINS"
"""Comma-separated block-list; wins over the allow-list and also blocks built-in plugins."""
DEBUG_VAR = "INTELRT_DEBUG"
"""``1``: trace every hook call and result to stderr."""
TIMEOUT_VAR = "INTELRT_HOOK_TIMEOUT"
"""Seconds one hook call may take."""
