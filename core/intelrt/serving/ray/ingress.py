"""The application's HTTP ingress: a thin ASGI forwarder behind Ray Serve's HTTP proxy. It reads a
request's body, hands it to the model's replicas through a deployment handle (Ray's router picks
the replica from the prompt: :mod:`.routing`) and streams the replica's answer back — the answer
of the replica's own FastAPI app, untouched. It holds no OpenAI logic of its own.

What it adds is what no single replica can do:

- **a replica that dies before a byte of its answer was sent**: the request goes to another
  replica (Ray has taken the dead one out of the router), up to :data:`RETRIES` times; a stream
  that had begun ends with an OpenAI error event and ``[DONE]`` (the event plain ``intelrt serve``
  ends a failed stream with), never a cut connection;
- **``GET /metrics``**: every replica's metrics in one exposition, each sample labelled with its
  ``replica``, and ``intelrt_replica_up`` (0 for a replica that did not answer in
  :data:`METRICS_TIMEOUT_S`).
"""

from __future__ import annotations

import asyncio
import logging
from typing import Any

from ..errors import error_body
from .forwarding import ForwardedRequest, Message

log = logging.getLogger("intelrt.serving")

RETRIES = 3
"""Replicas a request that has sent nothing yet is tried on after the first one died."""
METRICS_TIMEOUT_S = 5.0
"""How long ``/metrics`` waits for each replica's own metrics."""
REPLICA_GONE_MESSAGE = "the replica serving this request stopped"


def _replica_gone_errors() -> tuple[type[BaseException], ...]:
    from ray.exceptions import ActorUnavailableError, RayActorError

    return (RayActorError, ActorUnavailableError)


async def read_body(receive: Any) -> bytes:
    chunks = []
    while True:
        message = await receive()
        if message["type"] == "http.disconnect":
            raise asyncio.CancelledError
        chunks.append(message.get("body", b""))
        if not message.get("more_body"):
            return b"".join(chunks)


def _is_event_stream(start: Message) -> bool:
    return any(k.lower() == b"content-type" and v.startswith(b"text/event-stream") for k, v in start.get("headers", ()))


async def _send_json(send: Any, status: int, body: bytes, content_type: bytes = b"application/json") -> None:
    await send({"type": "http.response.start", "status": status,
                "headers": [(b"content-type", content_type), (b"content-length", str(len(body)).encode())]})
    await send({"type": "http.response.body", "body": body, "more_body": False})


class _Asgi:
    """An ASGI 3 app object (uvicorn takes a bound method for an ASGI 2 app)."""

    def __init__(self, ingress: Ingress) -> None:
        self.ingress = ingress

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        await self.ingress.asgi(scope, receive, send)


class Ingress:
    """The ingress deployment's class: ``__serve_build_asgi_app__`` gives Ray Serve its ASGI app."""

    def __init__(self, replicas: Any, replica_deployment: str) -> None:
        self.replicas = replicas
        self.replica_deployment = replica_deployment

    def __serve_build_asgi_app__(self) -> Any:
        return _Asgi(self)

    async def asgi(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope["type"] == "lifespan":
            while (message := await receive())["type"] != "lifespan.shutdown":
                if message["type"] == "lifespan.startup":
                    await send({"type": "lifespan.startup.complete"})
            await send({"type": "lifespan.shutdown.complete"})
            return
        if scope["type"] != "http":
            return
        body = await read_body(receive)
        if scope["method"] == "GET" and scope["path"] == "/metrics":
            from .metrics import CONTENT_TYPE

            await _send_json(send, 200, await self.metrics(), CONTENT_TYPE.encode())
            return
        await self.forward(ForwardedRequest.of(scope, body), send)

    async def forward(self, request: ForwardedRequest, send: Any) -> None:
        """``request`` to a replica, its answer to ``send``; another replica while nothing was sent."""
        gone = _replica_gone_errors()
        sent_body = False
        start: Message | None = None
        for attempt in range(RETRIES + 1):
            call = self.replicas.options(stream=True).handle_http.remote(request)
            try:
                async for batch in call:
                    for message in batch:
                        if message["type"] == "http.response.start":
                            start = message  # held until the first bytes: until then a retry is still clean
                            continue
                        if start is not None and not sent_body:
                            await send(start)
                        sent_body = True
                        await send(message)
                if start is not None and not sent_body:
                    await send(start)
                    await send({"type": "http.response.body", "body": b"", "more_body": False})
                return
            except gone as exc:
                if not sent_body:
                    log.warning("intelrt serve: %s before answering (%s); %s", REPLICA_GONE_MESSAGE, type(exc).__name__,
                                "trying another replica" if attempt < RETRIES else "no replica left to try")
                    start = None
                    continue
                log.warning("intelrt serve: %s mid-answer (%s): the stream ends with an error event",
                            REPLICA_GONE_MESSAGE, type(exc).__name__)
                await send(self._ending(start, exc))
                return
            finally:
                call.cancel()  # a no-op once the answer is complete; frees the replica's row when the client left
        message = (f"{REPLICA_GONE_MESSAGE} before answering, {RETRIES + 1} times: no replica could take it; "
                   "the server's log says why")
        import json

        await _send_json(send, 503, json.dumps(error_body(message, "server_error", code="replica_unavailable")).encode())

    @staticmethod
    def _ending(start: Message | None, exc: BaseException) -> Message:
        """The last message of an answer whose replica died mid-way: an error event and ``[DONE]``
        for a stream of events, else the end of the body as it was."""
        if start is not None and _is_event_stream(start):
            from ..completions import error_event

            text = error_event(f"{REPLICA_GONE_MESSAGE} mid-answer ({type(exc).__name__}); the answer is incomplete",
                               "server_error")
            return {"type": "http.response.body", "body": text.encode(), "more_body": False}
        return {"type": "http.response.body", "body": b"", "more_body": False}

    async def metrics(self) -> bytes:
        """Every replica's ``/metrics``, labelled by replica (:mod:`.metrics`)."""
        from ray import serve

        from .metrics import merge, replica_ids

        ids = replica_ids(serve.get_replica_context().app_name, self.replica_deployment)
        answers: dict[str, bytes | None] = {}
        # One replica at a time: pinned requests sent together were seen to wait out their timeout
        # (Ray's routing tasks each take the next pending request; a pinned one fits one replica only).
        for full_id in ids:
            try:
                answers[full_id] = await self._replica_metrics(full_id)
            except Exception as exc:  # noqa: BLE001 - a replica that does not answer is reported as down
                log.warning("intelrt serve: %s did not answer for its metrics (%s)", full_id, type(exc).__name__)
                answers[full_id] = None
        return merge(answers)

    async def _replica_metrics(self, replica: str) -> bytes:
        request = ForwardedRequest("GET", "/metrics", replica=replica)
        call = self.replicas.options(stream=True).handle_http.remote(request)
        chunks: list[bytes] = []

        async def collect() -> None:
            async for batch in call:
                chunks.extend(m.get("body", b"") for m in batch if m["type"] == "http.response.body")

        try:
            await asyncio.wait_for(collect(), METRICS_TIMEOUT_S)
        finally:
            call.cancel()
        return b"".join(chunks)
