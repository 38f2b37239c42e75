"""Installed versions, read the way plugins need them (no import of the package itself)."""

from __future__ import annotations

import importlib.util
from importlib import metadata

from packaging.version import InvalidVersion, Version


def package_version(distribution: str, module: str | None = None) -> str | None:
    """Version of an installed distribution whose module is importable, else ``None``."""
    module = module or distribution.replace("-", "_")
    try:
        if importlib.util.find_spec(module) is None:
            return None
    except (ImportError, ValueError):
        return None
    try:
        return metadata.version(distribution)
    except metadata.PackageNotFoundError:
        return None


def parse(version: str | None) -> Version | None:
    """``"2.13.0+cpu"`` → ``Version("2.13.0")``; ``None`` or garbage → ``None``."""
    if not version:
        return None
    try:
        return Version(version.split("+")[0])
    except InvalidVersion:
        return None


def at_least(version: str | None, floor: str) -> bool:
    parsed = parse(version)
    return parsed is not None and parsed >= Version(floor)


def torch_version() -> str | None:
    """The running torch's version string (imports torch), or ``None`` without torch."""
    try:
        import torch
    except ImportError:
        return None
    return str(torch.__version__)
