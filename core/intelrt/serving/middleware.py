"""What wraps every request (pure ASGI, so streamed answers pass through untouched):

- :class:`RequireApiKey`: ``--api-key``: every ``/v1`` route answers ``401`` without
  ``Authorization: Bearer KEY`` (compared in constant time; the key is never logged), as
  ``vllm serve --api-key`` does (``/health``, ``/metrics``, ``/tokenize`` … stay open, preflight
  ``OPTIONS`` requests too);
- :class:`ObservedRequests`: one access-log line per request and the ``intelrt_requests_total``
  counter, labelled by the *route template* (``/v1/models/{model_id:path}``), never the raw path,
  so a scanner's random paths add one series (``other``), not one each. A handler that knows
  better than the status line (a client that left mid-stream: ``499``) says so in
  ``request.state.outcome``.

CORS is Starlette's ``CORSMiddleware`` (``create_app(cors=…)``).
"""

from __future__ import annotations

import hmac
import json
import logging
import time
from collections.abc import Awaitable, Callable, MutableMapping
from typing import Any

from .errors import error_body
from .metrics import ServerMetrics

Scope = MutableMapping[str, Any]
Message = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]
ASGIApp = Callable[[Scope, Receive, Send], Awaitable[None]]

access_log = logging.getLogger("intelrt.serving.access")
UNMATCHED_ROUTE = "other"
"""The metric label of every path no route matches."""
OUTCOME = "outcome"
"""The ``request.state`` key a handler sets to the status its answer really ended with."""


class RequireApiKey:
    def __init__(self, app: ASGIApp, api_key: str) -> None:
        self.app = app
        self._expected = f"Bearer {api_key}".encode()

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or scope["method"] == "OPTIONS" or not (
                scope["path"] == "/v1" or scope["path"].startswith("/v1/")):
            await self.app(scope, receive, send)
            return
        given = next((value for name, value in scope["headers"] if name == b"authorization"), b"")
        if hmac.compare_digest(given, self._expected):
            await self.app(scope, receive, send)
            return
        reason = "no API key given" if not given else "the API key is not this server's"
        body = json.dumps(error_body(f"{reason}: send the key of --api-key (INTELRT_API_KEY) as "
                                     "'Authorization: Bearer KEY'", "invalid_request_error",
                                     code="invalid_api_key")).encode()
        await send({"type": "http.response.start", "status": 401,
                    "headers": [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode()),
                                (b"www-authenticate", b"Bearer")]})
        await send({"type": "http.response.body", "body": body})


def _printable(text: str) -> str:
    """A path as a log line may show it (no control characters to forge lines with)."""
    return "".join(c if c.isprintable() else f"\\x{ord(c):02x}" for c in text)[:200]


class ObservedRequests:
    def __init__(self, app: ASGIApp, metrics: ServerMetrics, access: bool) -> None:
        self.app, self.metrics, self.access = app, metrics, access

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        started = time.monotonic()
        status = 500

        async def observed(message: Message) -> None:
            nonlocal status
            if message["type"] == "http.response.start":
                status = int(message["status"])
            await send(message)

        try:
            await self.app(scope, receive, observed)
        finally:
            outcome = (scope.get("state") or {}).get(OUTCOME)
            code = int(outcome) if outcome is not None else status
            route = scope.get("route")
            template = getattr(route, "path", None) or UNMATCHED_ROUTE
            self.metrics.requests.labels(template, str(code)).inc()
            if self.access:
                client = scope.get("client")
                who = f"{client[0]}:{client[1]}" if client else "-"
                access_log.info('access: %s "%s %s" %d %.1f ms', who, scope["method"], _printable(scope["path"]), code,
                                (time.monotonic() - started) * 1000)
