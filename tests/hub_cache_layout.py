"""Lay out hub-cache entries the way huggingface_hub does, for offline kernel tests."""

from __future__ import annotations

from pathlib import Path


def cache_kernel(root: Path, repo: str, version: int) -> Path:
    """Lay out a cached kernel snapshot as the hub cache holds it (refs/v<N> → snapshots/<commit>)."""
    folder = root / f"kernels--{repo.replace('/', '--')}"
    commit = f"{version:040d}"
    (folder / "refs").mkdir(parents=True, exist_ok=True)
    (folder / "refs" / f"v{version}").write_text(commit)
    snapshot = folder / "snapshots" / commit
    (snapshot / "build").mkdir(parents=True, exist_ok=True)
    return snapshot
