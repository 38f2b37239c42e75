"""``intelrt serve``: an OpenAI-compatible server on intelrt's decode engine.

``app.py`` (the FastAPI app and its routes), ``state.py`` (what the handlers share),
``protocol.py`` (the request bodies), ``body.py`` (reading and validating one), ``errors.py``
(OpenAI error objects), ``responses.py`` (the answers' bodies), ``completions.py`` (completions
and chat, whole and streamed), ``sampling_fields.py`` (request fields → the engine's sampling
parameters), ``engine_request.py`` (what the engine takes and applies), ``structured.py``
(grammars: JSON, tool calls), ``tool_calls.py`` (answers → ``tool_calls``), ``embeddings.py``,
``adapters.py`` (LoRA adapters), ``middleware.py`` (API key, access log, metric labels),
``decode_thread.py`` (the decode thread and its queue), ``limits.py`` (rows, context, queue from the
plan and the device), ``text.py`` (tokens to streamed text), ``metrics.py`` (Prometheus),
``server.py`` (uvicorn, the ``ready:`` line, a draining ``SIGTERM``). Needs the ``serve`` extra
(FastAPI, uvicorn, prometheus-client, xgrammar); importing this package alone needs none of it.
"""

from __future__ import annotations

from importlib.util import find_spec
from typing import TYPE_CHECKING, Any

from ..errors import ConfigurationError

if TYPE_CHECKING:
    from fastapi import FastAPI

    from ..runtime.loaded import Loaded

#: The modules the ``serve`` extra installs (module name → distribution).
SERVE_EXTRA = {"fastapi": "fastapi", "uvicorn": "uvicorn", "prometheus_client": "prometheus-client"}


def require_serve_extra() -> None:
    """Refuse clearly when the ``serve`` extra is missing."""
    missing = [dist for module, dist in SERVE_EXTRA.items() if find_spec(module) is None]
    if missing:
        raise ConfigurationError(f"intelrt serve needs {', '.join(missing)}: pip install 'intelrt[serve]'")


def serve(loaded: Loaded, host: str = "127.0.0.1", port: int = 8000, **options: Any) -> None:
    """Serve ``loaded`` with the OpenAI API until ``SIGTERM``/``SIGINT`` (see
    :func:`intelrt.serving.server.serve` for the options)."""
    require_serve_extra()
    from .server import serve as run

    run(loaded, host, port, **options)


def create_app(loaded: Loaded, **options: Any) -> FastAPI:
    """The ASGI app serving ``loaded`` (see :func:`intelrt.serving.app.create_app`)."""
    require_serve_extra()
    from .app import create_app as build

    return build(loaded, **options)
