"""The one download of planning's inputs: a hub model's ``config.json``, fetched for ``load()``
when it is not in the local hub cache (planning itself never downloads, SPEC C4)."""

from __future__ import annotations

import logging
from collections.abc import Callable
from pathlib import Path

from ..errors import ModelSourceError
from ..support.hubcache import hub_offline
from ..support.redaction import redact_text

log = logging.getLogger(__name__)


def config_fetcher(token: str | None = None) -> Callable[[str], Path]:
    """``fetch(hub_id)`` for :func:`~intelrt.planning.model_source.resolve_model`: downloads the
    model's ``config.json`` (with ``token`` when given) and returns its directory."""

    def fetch(source: str) -> Path:
        if hub_offline():
            raise ModelSourceError(
                f"{source}: not in the local hub cache and HF_HUB_OFFLINE is set; unset it to download, "
                "or pass a local directory.")
        from huggingface_hub import hf_hub_download

        log.info("downloading config.json of %s", source)
        try:
            config_path = hf_hub_download(source, "config.json", token=token)
        except Exception as exc:  # noqa: BLE001 - every hub failure (HTTP, connection, missing file) is one clear error
            raise ModelSourceError(
                f"{source}: config.json could not be downloaded ({type(exc).__name__}: {redact_text(str(exc))}). "
                "Check the model id, the network and HF_ENDPOINT (and token= for a gated model), or pass a local "
                "directory.") from None
        return Path(config_path).parent

    return fetch
