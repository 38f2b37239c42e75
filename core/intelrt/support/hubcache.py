"""Is a hub repository usable offline? (kernels, models) — reads the local cache only, through
huggingface_hub's own cache layout and offline switch rather than a copy of them."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path


def hub_cache_dir() -> Path:
    from huggingface_hub import constants

    return Path(constants.HF_HUB_CACHE)


def is_repo_cached(repo_id: str, repo_type: str = "model") -> bool:
    """True when ``repo_id`` can be read from the local hub cache: for a model, its ``config.json``
    at the default revision (what ``from_pretrained`` reads first:
    ``huggingface_hub.try_to_load_from_cache``); for another repo type (a kernel, whose revisions
    are version refs), any snapshot of it (the folder huggingface_hub's ``repo_folder_name`` names)."""
    if repo_type == "model":
        from huggingface_hub import try_to_load_from_cache

        try:
            return isinstance(try_to_load_from_cache(repo_id, "config.json"), str)
        except ValueError:  # not a repo id huggingface_hub accepts (validate_hf_hub_args)
            return False
    from huggingface_hub.file_download import repo_folder_name

    folder = hub_cache_dir() / repo_folder_name(repo_id=repo_id, repo_type=repo_type) / "snapshots"
    return folder.is_dir() and any(folder.iterdir())


def hub_offline(env: Mapping[str, str] | None = None) -> bool:
    """Whether hub downloads are off: in this process, what huggingface_hub itself acts on
    (``huggingface_hub.is_offline_mode()``, read once when it is imported); for ``env``, the
    environment of a process still to start, the same variables read the same way
    (``HF_HUB_OFFLINE``, else ``TRANSFORMERS_OFFLINE``; huggingface_hub/constants.py)."""
    from huggingface_hub import constants

    if env is None:
        from huggingface_hub import is_offline_mode

        return is_offline_mode()
    value = env.get("HF_HUB_OFFLINE") or env.get("TRANSFORMERS_OFFLINE")
    return value is not None and value.upper() in constants.ENV_VARS_TRUE_VALUES
