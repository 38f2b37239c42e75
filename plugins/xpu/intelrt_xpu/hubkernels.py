"""Can a hub kernel be loaded here without the network? (read-only look at the caches; SPEC C4)

Mirrors how kernels 0.17 resolves a kernel (``kernels.load.get_kernel``): first the
``LOCAL_KERNELS`` overrides (``repo_id=path:repo_id2=path2``), then — offline — the hub cache
(``KERNELS_CACHE`` or the hub cache; ``kernels--org--name`` or legacy ``models--org--name``
folders, version ``N`` found as the ref ``vN``). transformers uses ``kernels`` only in the
version range its own ``kernels`` extra names; outside it, every hub-kernel path is off.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from intelrt.plugin import (
    hub_offline,
    parse,
)

FA2_REPO = "kernels-community/flash-attn2"
#: Flash kernels transformers 5.24 lists with CUDA (or ROCm) builds only (FLASH_ATTN_KERNEL_DEVICES).
NVIDIA_ONLY_REPOS = ("kernels-community/flash-attn3", "kernels-community/vllm-flash-attn3",
                     "kernels-community/flash-attn4")


def fa2_version(torch_version: str | None) -> int:
    """The flash-attn2 kernel version transformers 5.24 asks for (FLASH_ATTN_KERNEL_VERSIONS)."""
    parsed = parse(torch_version)
    return 4 if parsed is not None and parsed.release[:2] >= (2, 10) else 3


def local_kernels(env: Mapping[str, str]) -> dict[str, str]:
    """``LOCAL_KERNELS`` as kernels parses it: ``repo_id=path`` entries separated by ``:``."""
    value = env.get("LOCAL_KERNELS")
    overrides: dict[str, str] = {}
    for entry in (value.split(":") if value else []):
        repo, sep, path = entry.partition("=")
        if sep:
            overrides[repo.strip()] = path
    return overrides


def _cache_dirs(env: Mapping[str, str]) -> list[Path]:
    if env.get("KERNELS_CACHE"):
        return [Path(env["KERNELS_CACHE"])]
    if env.get("HF_HUB_CACHE"):
        return [Path(env["HF_HUB_CACHE"])]
    if env.get("HF_HOME"):
        return [Path(env["HF_HOME"]) / "hub"]
    from intelrt.plugin import hub_cache_dir

    return [hub_cache_dir()]


def cached_snapshot(repo: str, version: int, env: Mapping[str, str]) -> Path | None:
    """The cached snapshot of ``repo`` at version ``version`` (ref ``v<version>``), or ``None``."""
    for root in _cache_dirs(env):
        for kind in ("kernels", "models"):
            folder = root / f"{kind}--{repo.replace('/', '--')}"
            ref = folder / "refs" / f"v{version}"
            try:
                commit = ref.read_text(encoding="utf-8").strip()
            except OSError:
                continue
            snapshot = folder / "snapshots" / commit
            if snapshot.is_dir():
                return snapshot
    return None


@dataclass(frozen=True)
class KernelSource:
    """Where a kernel would come from at load time."""

    repo: str
    version: int
    where: str
    """``local`` (LOCAL_KERNELS), ``cache`` (hub cache), ``download`` (online, not cached) or ``missing``."""
    path: str | None = None

    @property
    def usable(self) -> bool:
        return self.where != "missing"

    @property
    def offline_ready(self) -> bool:
        return self.where in ("local", "cache")

    def describe(self) -> str:
        return {"local": f"{self.repo} from LOCAL_KERNELS ({self.path})",
                "cache": f"{self.repo} v{self.version} from the hub cache",
                "download": f"{self.repo} v{self.version}, downloaded at load time (not cached yet)",
                "missing": f"{self.repo} v{self.version} is not cached and HF_HUB_OFFLINE is set"}[self.where]


def locate(repo: str, version: int, env: Mapping[str, str]) -> KernelSource:
    local = local_kernels(env).get(repo)
    if local and os.path.isdir(local):
        return KernelSource(repo, version, "local", local)
    snapshot = cached_snapshot(repo, version, env)
    if snapshot is not None:
        return KernelSource(repo, version, "cache", str(snapshot))
    return KernelSource(repo, version, "missing" if hub_offline(env) else "download")


def fetch_hint(source: KernelSource) -> str:
    return (f"fetch it once with network: python -c \"import kernels; kernels.get_kernel('{source.repo}', "
            f"version={source.version})\" (without HF_HUB_OFFLINE), or point LOCAL_KERNELS={source.repo}=/path "
            "at a local build")
