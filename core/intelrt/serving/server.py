"""Run the app under uvicorn, saying where it is — the start-up summary, then
``ready: http://HOST:PORT/v1 — model 'NAME'`` once the socket is open and the model warm, and an
access line per request (``log_output``; the same from ``intelrt serve`` and ``intelrt.serve()``)
— with a graceful ``SIGTERM``: stop taking requests, let the ones already taken finish (at most
``drain_timeout`` seconds, then they fail with ``503``), exit 0."""

from __future__ import annotations

import contextlib
import logging
import signal
import socket
import sys
import threading
from collections.abc import Callable, Iterator, Mapping, Sequence
from types import FrameType
from typing import TYPE_CHECKING, Any, TextIO

import uvicorn

from .app import CorsOptions, create_app
from .limits import CLIENT_TIMEOUT_S, DRAIN_TIMEOUT_S
from .state import ServerState

if TYPE_CHECKING:
    from fastapi import FastAPI

    from ..runtime.loaded import Loaded

CLOSE_GRACE_S = 5.0
"""Beyond the drain timeout, how long uvicorn waits for the failed requests' answers to be written."""
SIGNALS = (signal.SIGINT, signal.SIGTERM)
SERVING_LOGGER = "intelrt.serving"
"""The start-up summary, the ``ready:`` line (``intelrt.serving``) and the access log
(``intelrt.serving.access``)."""


def url_of(host: str, port: int) -> str:
    """``http://HOST:PORT/v1`` (an IPv6 address in brackets; ``0.0.0.0`` and ``::`` as they are:
    they name every interface)."""
    shown = f"[{host}]" if ":" in host and not host.startswith("[") else host
    return f"http://{shown}:{port}/v1"


class DrainingServer(uvicorn.Server):
    """uvicorn's server, draining the app before it stops; a signal ends it with a normal return
    (uvicorn re-raises the signal after its shutdown, which would end the process with it)."""

    def __init__(self, config: uvicorn.Config, state: ServerState, drain_timeout: float) -> None:
        super().__init__(config)
        self.state, self.drain_timeout = state, drain_timeout

    async def startup(self, sockets: list[socket.socket] | None = None) -> None:
        await super().startup(sockets)
        bound = [s.getsockname() for server in self.servers for s in (server.sockets or ())]
        if bound and not self.should_exit:
            host, port = bound[0][0], bound[0][1]
            self.state.listening(url_of(str(host), int(port)))

    def handle_exit(self, sig: int, frame: FrameType | None) -> None:
        self.state.begin_drain(self.drain_timeout)
        super().handle_exit(sig, frame)

    @contextlib.contextmanager
    def capture_signals(self) -> Iterator[None]:
        if threading.current_thread() is not threading.main_thread():
            yield  # only the main thread receives signals; an embedding framework stops us itself
            return
        # an ignored signal stays ignored: a background job's SIGINT (intelrt.cli.interrupt)
        original = {sig: signal.signal(sig, self.handle_exit) for sig in SIGNALS
                    if signal.getsignal(sig) is not signal.SIG_IGN}
        try:
            yield
        finally:
            for sig, handler in original.items():
                signal.signal(sig, handler)


@contextlib.contextmanager
def serving_log(output: TextIO | None) -> Iterator[None]:
    """``intelrt.serving``'s records (INFO and up) to ``output`` while the server runs, whatever
    the process's logging set-up (``None``: leave them to it)."""
    if output is None:
        yield
        return
    from ..support.redaction import redact_log_output

    logger = logging.getLogger(SERVING_LOGGER)
    handler = logging.StreamHandler(output)
    handler.setFormatter(logging.Formatter("%(message)s"))
    redact_log_output(handler)
    before = (logger.level, logger.propagate)
    logger.addHandler(handler)
    logger.setLevel(logging.INFO)
    logger.propagate = False
    try:
        yield
    finally:
        logger.removeHandler(handler)
        logger.setLevel(before[0])
        logger.propagate = before[1]


def engine_app(loaded: Loaded, *, gpu_memory_utilization: float | None = None, max_batch_tokens: int | None = None,
               prefix_caching: bool | None = None, **app_options: Any) -> FastAPI:
    """The app :func:`serve` runs (and each Ray Serve replica, :mod:`intelrt.serving.ray`): the
    engine options replace ``loaded.decode_tuning``'s before the engine is sized, the rest go to
    :func:`~intelrt.serving.app.create_app`."""
    from ..decoding.tuning import with_engine_options

    loaded.decode_tuning = with_engine_options(loaded.decode_tuning, gpu_memory_utilization=gpu_memory_utilization,
                                               max_batch_tokens=max_batch_tokens, prefix_caching=prefix_caching)
    return create_app(loaded, **app_options)


def serve(loaded: Loaded, host: str = "127.0.0.1", port: int = 8000, *, model_name: str | None = None,
          max_batch: int | None = None, context_length: int | None = None, max_queue: int | None = None,
          drain_timeout: float = DRAIN_TIMEOUT_S, log_level: str = "warning",
          announce: Callable[[str], None] | None = None, api_key: str | None = None,
          cors: CorsOptions | None = None, chat_template: str | None = None, access_log: bool = True,
          lora: Mapping[str, str] | Sequence[tuple[str, str]] = (), client_timeout: float = CLIENT_TIMEOUT_S,
          log_output: TextIO | None = sys.stderr, gpu_memory_utilization: float | None = None,
          max_batch_tokens: int | None = None, prefix_caching: bool | None = None, **uvicorn_options: Any) -> None:
    """Serve ``loaded`` with the OpenAI API on ``host``:``port`` until ``SIGTERM`` or ``SIGINT``
    (then drain, and return). ``model_name``, ``max_batch``, ``context_length``, ``max_queue``,
    ``announce``, ``api_key``, ``cors``, ``chat_template``, ``access_log``, ``lora``, ``client_timeout``: see
    :func:`intelrt.serving.app.create_app`; ``drain_timeout``: seconds in-flight requests get
    after the signal; ``log_level``: uvicorn's own (its start-up lines are replaced by the
    ``ready:`` line); ``log_output``: where intelrt's serving lines go (``None``: to the
    process's logging set-up). ``gpu_memory_utilization``, ``max_batch_tokens``,
    ``prefix_caching``: the decode engine's settings, as :func:`intelrt.load` takes them (given
    here, they replace ``loaded.decode_tuning``'s before the engine is sized)."""
    if drain_timeout < 0:
        raise ValueError(f"drain_timeout must be >= 0 seconds, got {drain_timeout}")
    app = engine_app(loaded, gpu_memory_utilization=gpu_memory_utilization, max_batch_tokens=max_batch_tokens,
                     prefix_caching=prefix_caching, model_name=model_name, max_batch=max_batch,
                     context_length=context_length, max_queue=max_queue, announce=announce, api_key=api_key, cors=cors,
                     chat_template=chat_template, access_log=access_log, lora=lora, client_timeout=client_timeout)
    config = uvicorn.Config(app, host=host, port=port, log_level=log_level, access_log=False,
                            timeout_graceful_shutdown=int(drain_timeout + CLOSE_GRACE_S), **uvicorn_options)
    with serving_log(log_output):
        if api_key is None and not is_loopback(host):
            logging.getLogger(SERVING_LOGGER).warning(
                "warning: serving on %s:%s without an API key — anyone who can reach this address can use the model. "
                "Pass --api-key KEY (or INTELRT_API_KEY=KEY; api_key= from Python), or listen on 127.0.0.1", host, port)
        DrainingServer(config, app.state.intelrt, drain_timeout).run()


def is_loopback(host: str) -> bool:
    """``host`` (an address or a name) reaches this machine only: ``127.0.0.0/8``, ``::1``, ``localhost``."""
    import ipaddress

    if host.strip().lower() in ("localhost", "localhost.localdomain"):
        return True
    try:
        return ipaddress.ip_address(host.strip().strip("[]")).is_loopback
    except ValueError:
        return False  # a name: it may resolve to any interface
