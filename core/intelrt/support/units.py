"""Byte counts as people read them, for messages."""

from __future__ import annotations


def format_bytes(n_bytes: float) -> str:
    """``"1.5 GiB"``, ``"3.2 MiB"``, ``"512 B"``."""
    for unit, scale in (("GiB", 1024**3), ("MiB", 1024**2), ("KiB", 1024)):
        if n_bytes >= scale:
            return f"{n_bytes / scale:.1f} {unit}"
    return f"{n_bytes:.0f} B"
