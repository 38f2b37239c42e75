"""Run the app under uvicorn, with a graceful ``SIGTERM``: stop taking requests, let the ones
already taken finish (at most ``drain_timeout`` seconds, then they fail with ``503``), exit 0."""

from __future__ import annotations

import contextlib
import signal
import socket
import threading
from collections.abc import Callable, Iterator
from types import FrameType
from typing import TYPE_CHECKING

import uvicorn

from .app import ServerState, create_app
from .limits import DRAIN_TIMEOUT_S

if TYPE_CHECKING:
    from ..runtime.loaded import Loaded

"""Seconds in-flight requests get to finish after ``SIGTERM``."""
CLOSE_GRACE_S = 5.0
"""Beyond the drain timeout, how long uvicorn waits for the failed requests' answers to be written."""
SIGNALS = (signal.SIGINT, signal.SIGTERM)


class DrainingServer(uvicorn.Server):
    """uvicorn's server, draining the app before it stops; a signal ends it with a normal return
    (uvicorn re-raises the signal after its shutdown, which would end the process with it)."""

    def __init__(self, config: uvicorn.Config, state: ServerState, drain_timeout: float) -> None:
        super().__init__(config)
        self.state, self.drain_timeout = state, drain_timeout

    async def startup(self, sockets: list[socket.socket] | None = None) -> None:
        """uvicorn's start-up (the app's lifespan, the listening sockets), then the readiness line
        with the address actually bound (``--port 0`` binds a free port)."""
        await super().startup(sockets=sockets)
        if self.started and self.servers and self.servers[0].sockets:
            host, port = self.servers[0].sockets[0].getsockname()[:2]
            self.state.announce_when_ready(f"http://[{host}]:{port}" if ":" in host else f"http://{host}:{port}")

    def handle_exit(self, sig: int, frame: FrameType | None) -> None:
        self.state.begin_drain(self.drain_timeout)
        super().handle_exit(sig, frame)

    @contextlib.contextmanager
    def capture_signals(self) -> Iterator[None]:
        if threading.current_thread() is not threading.main_thread():
            yield  # only the main thread receives signals; an embedding framework stops us itself
            return
        original = {sig: signal.signal(sig, self.handle_exit) for sig in SIGNALS}
        try:
            yield
        finally:
            for sig, handler in original.items():
                signal.signal(sig, handler)


def serve(loaded: Loaded, host: str = "127.0.0.1", port: int = 8000, *, model_name: str | None = None,
          max_batch: int | None = None, context_length: int | None = None, max_queue: int | None = None,
          drain_timeout: float = DRAIN_TIMEOUT_S, log_level: str = "info",
          announce: Callable[[str], None] | None = None) -> None:
    """Serve ``loaded`` with the OpenAI API on ``host``:``port`` until ``SIGTERM`` or ``SIGINT``
    (then drain, and return). ``model_name``, ``max_batch``, ``context_length``, ``max_queue``,
    ``announce``: see :func:`intelrt.serving.app.create_app`; ``drain_timeout``: seconds in-flight
    requests get after the signal."""
    if drain_timeout < 0:
        raise ValueError(f"drain_timeout must be >= 0 seconds, got {drain_timeout}")
    app = create_app(loaded, model_name=model_name, max_batch=max_batch, context_length=context_length,
                     max_queue=max_queue, announce=announce)
    config = uvicorn.Config(app, host=host, port=port, log_level=log_level,
                            timeout_graceful_shutdown=int(drain_timeout + CLOSE_GRACE_S))
    DrainingServer(config, app.state.intelrt, drain_timeout).run()
