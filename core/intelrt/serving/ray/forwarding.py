"""One HTTP request as the ingress hands it to a replica through a Ray Serve deployment handle,
and the replica's side: the request run through the replica's own FastAPI app (the app plain
``intelrt serve`` runs), its ASGI messages streamed back in batches.

Why a handle call and not Ray Serve's HTTP proxy straight to the replicas: the proxy picks a
replica from the request's path and headers, before the body is read (``ray/serve/_private/
proxy.py`` sends only the ASGI scope), so no router can see the prompt there. Ray Serve's own LLM
application has the same two tiers for the same reason (``ray.serve.llm``: an OpenAI ingress
calling ``LLMServer`` replicas through a handle, routed by ``PrefixCacheAffinityRouter``).
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

Message = dict[str, Any]
"""An ASGI message (``http.response.start``, ``http.response.body``)."""

APP_EXIT_WAIT_S = 5.0
"""How long a replica lets the app end a request whose caller went away (its rows freed) before cancelling it."""


@dataclass
class ForwardedRequest:
    """What a replica needs to answer one HTTP request, and what the router reads.

    ``prompt`` is the text Ray's ``PrefixCacheAffinityRouter`` matches prefixes on (it reads the
    first argument's ``prompt`` attribute): a completion's prompt, or a chat's messages; ``None``
    when the request has none (``/v1/models`` …). ``replica``: a replica's full id
    (``ReplicaID.to_full_id_str()``) the request must go to (``/metrics`` asks each one)."""

    method: str
    path: str
    query_string: bytes = b""
    headers: list[tuple[bytes, bytes]] = field(default_factory=list)
    body: bytes = b""
    client: tuple[str, int] | None = None
    prompt: Any = None
    replica: str | None = None

    @classmethod
    def of(cls, scope: dict[str, Any], body: bytes) -> ForwardedRequest:
        client = scope.get("client")
        return cls(scope["method"], scope["path"], scope.get("query_string", b""), list(scope.get("headers", [])),
                   body, tuple(client) if client else None, routing_text(scope["path"], body))

    def scope(self) -> dict[str, Any]:
        return {"type": "http", "asgi": {"version": "3.0", "spec_version": "2.3"}, "http_version": "1.1",
                "method": self.method, "scheme": "http", "path": self.path, "raw_path": self.path.encode(),
                "root_path": "", "query_string": self.query_string, "headers": self.headers, "client": self.client,
                "server": None}


def routing_text(path: str, body: bytes) -> Any:
    """A completion's ``prompt`` or a chat's ``messages`` from a JSON body (``None`` otherwise, and
    for a body that is not JSON: the replica's app answers it with the error)."""
    if not body or not path.startswith("/v1/"):
        return None
    try:
        parsed = json.loads(body)
    except ValueError:
        return None
    if not isinstance(parsed, dict):
        return None
    value = parsed.get("messages") if path.endswith("/chat/completions") else parsed.get("prompt")
    return value if isinstance(value, (str, list)) and value else None


async def run_app(app: Callable[..., Awaitable[None]], request: ForwardedRequest) -> AsyncIterator[list[Message]]:
    """``request`` through the ASGI ``app``; its messages in batches (all those sent since the last
    batch: one Ray stream item per batch, not per token, under load). When the caller stops reading
    (the client left, the ingress cancelled), the app sees ``http.disconnect`` and ends the request
    itself — its completions' rows freed — before it would be cancelled."""
    queue: asyncio.Queue[Message | None] = asyncio.Queue()
    gone = asyncio.Event()
    delivered = False

    async def receive() -> Message:
        nonlocal delivered
        if not delivered:
            delivered = True
            return {"type": "http.request", "body": request.body, "more_body": False}
        await gone.wait()
        return {"type": "http.disconnect"}

    async def send(message: Message) -> None:
        queue.put_nowait(message)

    task = asyncio.ensure_future(app(request.scope(), receive, send))
    task.add_done_callback(lambda _: queue.put_nowait(None))
    try:
        while True:
            first = await queue.get()
            if first is None:
                break
            batch = [first]
            while not queue.empty():
                message = queue.get_nowait()
                if message is None:
                    yield batch
                    await task  # the app's own exception, if it raised one
                    return
                batch.append(message)
            yield batch
        await task
    finally:
        if not task.done():
            gone.set()
            await asyncio.wait({task}, timeout=APP_EXIT_WAIT_S)
            task.cancel()
