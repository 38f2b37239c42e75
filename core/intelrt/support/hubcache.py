"""Is a hub repository usable offline? (kernels, models) — reads the local cache only."""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path


def hub_cache_dir() -> Path:
    from huggingface_hub import constants

    return Path(constants.HF_HUB_CACHE)


def is_repo_cached(repo_id: str, repo_type: str = "model") -> bool:
    """True when a snapshot of ``repo_id`` exists in the local hub cache."""
    folder = hub_cache_dir() / f"{repo_type}s--{repo_id.replace('/', '--')}" / "snapshots"
    return folder.is_dir() and any(folder.iterdir())


def hub_offline(env: Mapping[str, str] | None = None) -> bool:
    environ = os.environ if env is None else env
    return str(environ.get("HF_HUB_OFFLINE", "")).lower() in ("1", "true", "yes", "on")
