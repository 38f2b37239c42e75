"""The FastAPI app: OpenAI's ``/v1/models``, ``/v1/completions`` and ``/v1/chat/completions``,
``/health`` (liveness), ``/ready`` (readiness: loaded and warmed up, not draining) and
``/metrics`` (Prometheus). :func:`create_app` builds it for a loaded model; run it with
:func:`intelrt.serve` (which drains on ``SIGTERM``) or any ASGI server.
"""

from __future__ import annotations

import asyncio
import json
import logging
import secrets
import threading
import time
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse, Response, StreamingResponse
from starlette.exceptions import HTTPException as StarletteHTTPException

from ..decoding.inflight import RowRequest
from ..errors import ConfigurationError
from .limits import ServingLimits, limits_for
from .metrics import CONTENT_TYPE, ServerMetrics
from .protocol import ChatCompletionRequest, CompletionRequest, Shape, error_body, usage
from .scheduler import Completion, Ended, Failed, Piece, QueueFull, Scheduler, Sink, start_scheduler
from .text import TextAssembler

if TYPE_CHECKING:
    from ..runtime.loaded import Loaded

log = logging.getLogger(__name__)

COMPLETION_DEFAULT_TOKENS = 16
"""``max_tokens`` of a ``/v1/completions`` request that gives none (OpenAI's default)."""
RETRY_AFTER_S = 1
"""What a ``429`` tells the client to wait, in seconds."""
DISCONNECT_POLL_S = 1.0
"""How often a non-streamed request checks whether its client is still there."""
SHUTDOWN_MESSAGE = "the server is shutting down"


class ApiError(Exception):
    """An answer with an OpenAI error object."""

    def __init__(self, status: int, message: str, kind: str = "invalid_request_error", param: str | None = None,
                 code: str | None = None, headers: dict[str, str] | None = None) -> None:
        super().__init__(message)
        self.status, self.message, self.kind, self.param, self.code = status, message, kind, param, code
        self.headers = headers

    def response(self) -> JSONResponse:
        return JSONResponse(error_body(self.message, self.kind, self.param, self.code), status_code=self.status,
                            headers=self.headers)


@dataclass
class ServerState:
    """What the app's handlers share: the model, its limits, the decode thread, the metrics."""

    loaded: Loaded
    limits: ServingLimits
    model_name: str
    metrics: ServerMetrics = field(default_factory=ServerMetrics)
    scheduler: Scheduler | None = None
    loop: asyncio.AbstractEventLoop | None = None
    draining: bool = False
    announce: Callable[[str], None] = log.info

    def start(self, loop: asyncio.AbstractEventLoop) -> None:
        self.loop = loop
        self.scheduler = start_scheduler(self.loaded, self.limits, self.metrics)
        for line in [f"serving {self.model_name} on {self.loaded.plan.backend.name}",
                     *self.scheduler.describe(), *self.limits.lines()]:
            self.announce(f"intelrt serve: {line}")

    def announce_when_ready(self, url: str) -> None:
        """Once the decode thread has warmed up, say where the server is and the id clients send
        (SPEC S3); a warm-up failure says so itself (logged, and on ``/ready``)."""
        def wait() -> None:
            scheduler = self.scheduler
            while scheduler is not None and scheduler.failure is None and not self.draining:
                if scheduler.ready.wait(0.5):
                    self.announce(f"intelrt serve: ready on {url} — model id {self.model_name!r} "
                                  "(GET /v1/models lists it, GET /ready answers 200)")
                    return

        threading.Thread(target=wait, name="intelrt-serve-ready", daemon=True).start()

    def begin_drain(self, timeout: float) -> None:
        """Stop taking requests; those already taken have ``timeout`` seconds to finish, then
        fail with ``503`` (thread-safe: a signal handler calls it)."""
        if self.draining or self.loop is None:
            return
        self.draining = True
        self.announce(f"intelrt serve: draining: no new requests; in-flight ones have {timeout:g} s to finish")
        scheduler = self.scheduler
        if scheduler is not None:
            self.loop.call_soon_threadsafe(self.loop.call_later, timeout, scheduler.abort,
                                           f"{SHUTDOWN_MESSAGE} and its drain timeout ({timeout:g} s) passed")

    def stop(self) -> None:
        if self.scheduler is not None:
            self.scheduler.abort(SHUTDOWN_MESSAGE)
            self.scheduler.stop(timeout=30)

    @property
    def ready(self) -> bool:
        scheduler = self.scheduler
        return scheduler is not None and scheduler.ready.is_set() and scheduler.failure is None and not self.draining

    def check_accepting(self) -> Scheduler:
        scheduler = self.scheduler
        if self.draining:
            raise ApiError(503, f"{SHUTDOWN_MESSAGE}: it takes no new requests", "server_error",
                           code="shutting_down")
        if scheduler is None or scheduler.failure is not None:
            raise ApiError(503, (scheduler.failure if scheduler else None) or "the server is not started",
                           "server_error", code="not_ready")
        if not scheduler.ready.is_set():
            raise ApiError(503, "the model is warming up; retry when GET /ready answers 200", "server_error",
                           code="not_ready", headers={"Retry-After": str(RETRY_AFTER_S)})
        return scheduler

    def check_model(self, name: str) -> None:
        if name != self.model_name:
            raise ApiError(404, f"The model '{name}' does not exist: this server serves '{self.model_name}' "
                           "(GET /v1/models)", param="model", code="model_not_found")


def create_app(loaded: Loaded, *, model_name: str | None = None, max_batch: int | None = None,
               context_length: int | None = None, max_queue: int | None = None,
               announce: Callable[[str], None] | None = None) -> FastAPI:
    """An ASGI app serving ``loaded`` with the OpenAI API.

    ``model_name``: the id clients send as ``model`` (default: the model's source as given to
    ``intelrt.load``). ``max_batch``, ``context_length``, ``max_queue``: the server's limits
    (defaults from the plan and the device: :func:`intelrt.serving.limits.serving_limits`).
    ``announce``: where the start-up summary goes (default: this module's logger, at INFO). The
    decode thread starts with the app's lifespan and warms up; ``GET /ready`` answers 200 after."""
    loaded._require_task("text-generation")
    loaded._require_tokenizer("intelrt serve")
    state = ServerState(loaded, limits_for(loaded, max_batch=max_batch, context_length=context_length,
                                           max_queue=max_queue),
                        model_name or str(loaded.plan.model.source))
    if announce is not None:
        state.announce = announce

    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        state.start(asyncio.get_running_loop())
        try:
            yield
        finally:
            await asyncio.to_thread(state.stop)

    app = FastAPI(title="intelrt serve", lifespan=lifespan)
    app.state.intelrt = state

    @app.exception_handler(ApiError)
    async def api_error(request: Request, exc: ApiError) -> JSONResponse:
        state.metrics.requests.labels(request.url.path, str(exc.status)).inc()
        return exc.response()

    @app.exception_handler(RequestValidationError)
    async def invalid(request: Request, exc: RequestValidationError) -> JSONResponse:
        return await api_error(request, _validation_error(exc))

    @app.exception_handler(StarletteHTTPException)
    async def http_error(request: Request, exc: StarletteHTTPException) -> JSONResponse:
        kind = "not_found_error" if exc.status_code == 404 else "invalid_request_error"
        return await api_error(request, ApiError(exc.status_code, str(exc.detail), kind))

    @app.exception_handler(Exception)
    async def internal(request: Request, exc: Exception) -> JSONResponse:
        log.error("intelrt serve: %s %s failed", request.method, request.url.path, exc_info=exc)
        return await api_error(request, ApiError(500, f"internal error ({type(exc).__name__}); the server log has "
                                                      "the details", "server_error"))

    @app.get("/health")
    async def health() -> dict[str, str]:
        """Liveness: the process answers."""
        return {"status": "ok"}

    @app.get("/ready")
    async def ready() -> JSONResponse:
        """Readiness: 200 once the model is loaded and warmed up, 503 before, on failure and while draining."""
        scheduler = state.scheduler
        status = ("ready" if state.ready else "draining" if state.draining else
                  "failed" if scheduler is not None and scheduler.failure else "warming up")
        body: dict[str, Any] = {"status": status}
        if status == "failed" and scheduler is not None:
            body["reason"] = scheduler.failure
        return JSONResponse(body, status_code=200 if state.ready else 503)

    @app.get("/metrics")
    async def metrics() -> Response:
        state.metrics.ready.set(1 if state.ready else 0)
        return Response(state.metrics.render(), media_type=CONTENT_TYPE)

    @app.get("/v1/models")
    async def models() -> dict[str, Any]:
        state.metrics.requests.labels("/v1/models", "200").inc()
        return {"object": "list", "data": [{"id": state.model_name, "object": "model", "created": 0,
                                            "owned_by": "intelrt"}]}

    @app.post("/v1/completions", response_model=None)
    async def completions(body: CompletionRequest, request: Request) -> Response:
        arrived = time.monotonic()
        scheduler = state.check_accepting()
        state.check_model(body.model)
        prompts = _prompt_ids(state.loaded, body.prompt)
        return await _answer(state, scheduler, request, body, prompts, Shape(False, state.model_name), arrived,
                             body.max_tokens, COMPLETION_DEFAULT_TOKENS)

    @app.post("/v1/chat/completions", response_model=None)
    async def chat_completions(body: ChatCompletionRequest, request: Request) -> Response:
        arrived = time.monotonic()
        scheduler = state.check_accepting()
        state.check_model(body.model)
        prompts = [_chat_ids(state.loaded, body)]
        return await _answer(state, scheduler, request, body, prompts, Shape(True, state.model_name), arrived,
                             body.limit, None)

    return app


def _validation_error(exc: RequestValidationError) -> ApiError:
    errors = exc.errors()
    first = errors[0] if errors else {}
    if first.get("type") == "json_invalid":
        return ApiError(400, f"the request body is not valid JSON ({first.get('ctx', {}).get('error', 'parse error')})")
    where = [str(p) for p in first.get("loc", ()) if p != "body"]
    message = str(first.get("msg", "invalid request"))
    if first.get("type") == "extra_forbidden":
        message = "unrecognized request argument; intelrt serve accepts OpenAI's fields only"
    param = ".".join(where) or None
    return ApiError(400, f"{param}: {message}" if param else message, param=param)


def _prompt_ids(loaded: Loaded, prompt: Any) -> list[list[int]]:
    tokenizer = loaded.tokenizer
    if isinstance(prompt, str):
        prompts = [prompt]
    elif prompt and all(isinstance(t, int) for t in prompt):
        return [list(prompt)]
    else:
        prompts = list(prompt)
    if not prompts:
        raise ApiError(400, "prompt is empty", param="prompt")
    ids = [p if isinstance(p, list) else list(tokenizer(p)["input_ids"]) for p in prompts]
    return ids


def _chat_ids(loaded: Loaded, body: ChatCompletionRequest) -> list[int]:
    tokenizer = loaded.tokenizer
    if not getattr(tokenizer, "chat_template", None):
        raise ApiError(400, "this model's tokenizer has no chat template: use /v1/completions, or save a tokenizer "
                            "with a chat_template next to the model", param="messages")
    messages = [{"role": m.role, "content": m.text(), **({"name": m.name} if m.name else {})} for m in body.messages]
    try:
        text = tokenizer.apply_chat_template(messages, add_generation_prompt=True, tokenize=False)
    except Exception as exc:  # noqa: BLE001 - the template's own check of the conversation (roles, order)
        raise ApiError(400, f"the chat template refused these messages: {exc}", param="messages") from None
    return list(tokenizer(text, add_special_tokens=False)["input_ids"])


def _sampling(loaded: Loaded, body: Any) -> tuple[float, float]:
    """(temperature — 0: greedy —, top_p) for ``body``: what it sets, else the model's
    generation_config; a ``top_p`` alone samples at temperature 1 (OpenAI's default)."""
    config = getattr(loaded.model, "generation_config", None)
    if body.temperature is not None:
        temperature = float(body.temperature)
    elif body.top_p is not None and body.top_p < 1:
        temperature = 1.0
    elif config is not None and config.do_sample:
        temperature = float(config.temperature if config.temperature is not None else 1.0)
    else:
        temperature = 0.0
    default_top_p = getattr(config, "top_p", None) if body.top_p is None and config is not None \
        and config.do_sample else None
    top_p = float(body.top_p if body.top_p is not None else default_top_p if default_top_p is not None else 1.0)
    return temperature, top_p


def _eos(loaded: Loaded) -> tuple[int, ...]:
    value = getattr(getattr(loaded.model, "generation_config", None), "eos_token_id", None)
    if value is None:
        return ()
    return (int(value),) if isinstance(value, int) else tuple(int(v) for v in value)


def _completions(state: ServerState, body: Any, prompts: list[list[int]], limit: int | None,
                 default: int | None, sink: Sink) -> list[Completion]:
    """One :class:`Completion` per prompt and ``n``, each checked against the server's limits."""
    from ..runtime.loaded import check_prompts

    limits = state.limits
    choices = len(prompts) * body.n
    if choices > limits.rows:
        raise ApiError(400, f"n={body.n} for {len(prompts)} prompt(s) asks for {choices} completions; this server "
                            f"decodes at most {limits.rows} at once (rows in flight): ask for fewer", param="n")
    if any(not p for p in prompts):
        raise ApiError(400, "a prompt is empty after tokenization; send some text", param="prompt")
    for prompt in prompts:
        if len(prompt) >= limits.context:
            raise ApiError(400, f"This model's maximum context length is {limits.context} tokens on this server "
                                f"(prompt + max_tokens per request); the prompt has {len(prompt)} tokens. Shorten "
                                "the prompt.", param="prompt" if default is not None else "messages",
                           code="context_length_exceeded")
    try:
        check_prompts(state.loaded.model, prompts)
    except ConfigurationError as exc:
        raise ApiError(400, str(exc), param="prompt") from None
    temperature, top_p = _sampling(state.loaded, body)
    eos = _eos(state.loaded)
    completions = []
    for number, prompt in enumerate(prompts):
        room = limits.context - len(prompt)
        tokens = limit if limit is not None else min(default, room) if default is not None else room
        if tokens > room:
            raise ApiError(400, f"This model's maximum context length is {limits.context} tokens on this server "
                                f"(prompt + max_tokens per request); you requested {len(prompt) + tokens} tokens "
                                f"({len(prompt)} in the prompt, {tokens} for the completion). Lower max_tokens or "
                                "shorten the prompt.", param="max_tokens", code="context_length_exceeded")
        for copy in range(body.n):
            seed = _seed(body.seed, number * body.n + copy)
            request = RowRequest(tuple(prompt), tokens, eos, temperature, top_p, seed)
            completions.append(Completion(number * body.n + copy, request,
                                          TextAssembler(state.loaded.tokenizer, body.stops), sink))
    return completions


def _seed(seed: int | None, index: int) -> int:
    """A request's seed for choice ``index`` (each choice its own, reproducibly), else a fresh one."""
    if seed is None:
        return secrets.randbits(63)
    return (seed * 1_000_003 + index) & (2**63 - 1)


async def _answer(state: ServerState, scheduler: Scheduler, request: Request, body: Any, prompts: list[list[int]],
                  shape: Shape, arrived: float, limit: int | None, default: int | None) -> Response:
    sink = Sink(asyncio.get_running_loop())
    completions = _completions(state, body, prompts, limit, default, sink)
    try:
        scheduler.submit(completions)
    except QueueFull:
        raise ApiError(429, f"the server's queue is full ({state.limits.max_queue} completions waiting); retry "
                            f"after {RETRY_AFTER_S} s", "rate_limit_error", code="queue_full",
                       headers={"Retry-After": str(RETRY_AFTER_S)}) from None
    except RuntimeError as exc:
        raise ApiError(503, str(exc), "server_error", code="shutting_down") from None
    prompt_tokens = sum(len(p) for p in prompts)
    state.metrics.prompt_tokens.inc(prompt_tokens)
    timing = _Timing(state.metrics, arrived)
    endpoint = request.url.path
    if body.stream:
        include_usage = body.stream_options is not None and body.stream_options.include_usage
        return StreamingResponse(_stream(state, scheduler, sink, completions, shape, timing, prompt_tokens,
                                         include_usage, endpoint),
                                 media_type="text/event-stream", headers={"Cache-Control": "no-cache"})
    texts = {c.index: "" for c in completions}
    finishes: dict[int, str] = {}
    tokens = 0
    try:
        while len(finishes) < len(completions):
            try:
                event = await asyncio.wait_for(sink.queue.get(), DISCONNECT_POLL_S)
            except TimeoutError:
                if await request.is_disconnected():
                    state.metrics.requests.labels(endpoint, "499").inc()
                    return Response(status_code=499)
                continue
            if isinstance(event, Failed):
                raise ApiError(event.status, event.message, "server_error")
            if isinstance(event, Piece):
                texts[event.index] += event.text
                timing.tokens(event.index, event.tokens)
            elif isinstance(event, Ended):
                finishes[event.index] = event.reason
                tokens += event.tokens
    finally:
        if len(finishes) < len(completions):
            scheduler.cancel(completions)
    timing.done()
    state.metrics.requests.labels(endpoint, "200").inc()
    return JSONResponse(shape.whole(texts, finishes, usage(prompt_tokens, tokens)))


class _Timing:
    """Time to first token and the gaps between tokens, per request, into the metrics."""

    def __init__(self, metrics: ServerMetrics, arrived: float) -> None:
        self.metrics, self.arrived = metrics, arrived
        self.first: float | None = None
        self.last: dict[int, float] = {}

    def tokens(self, index: int, count: int) -> None:
        if count <= 0:
            return
        now = time.monotonic()
        if self.first is None:
            self.first = now
            self.metrics.time_to_first_token.observe(now - self.arrived)
        previous = self.last.get(index)
        if previous is not None:
            gap = (now - previous) / count
            for _ in range(count):
                self.metrics.inter_token_latency.observe(gap)
        self.last[index] = now

    def done(self) -> None:
        self.metrics.request_latency.observe(time.monotonic() - self.arrived)


def _sse(body: dict[str, Any]) -> str:
    return f"data: {json.dumps(body, separators=(',', ':'))}\n\n"


async def _stream(state: ServerState, scheduler: Scheduler, sink: Sink, completions: list[Completion], shape: Shape,
                  timing: _Timing, prompt_tokens: int, include_usage: bool, endpoint: str) -> AsyncIterator[str]:
    """Server-sent events: chunks as text comes, a finish chunk per choice, usage if asked, ``[DONE]``."""
    open_choices = {c.index for c in completions}
    tokens = 0
    status = "200"
    try:
        if shape.chat:
            yield "".join(_sse(shape.chunk(i, role=True)) for i in sorted(open_choices))
        while open_choices:
            events = [await sink.queue.get()]
            while not sink.queue.empty():
                events.append(sink.queue.get_nowait())
            parts = []
            for event in events:
                if isinstance(event, Failed):
                    status = str(event.status)
                    parts.append(_sse(error_body(event.message, "server_error")))
                    open_choices.clear()
                    break
                if isinstance(event, Piece):
                    timing.tokens(event.index, event.tokens)
                    if event.text:
                        parts.append(_sse(shape.chunk(event.index, event.text)))
                elif isinstance(event, Ended):
                    parts.append(_sse(shape.chunk(event.index, finish=event.reason)))
                    open_choices.discard(event.index)
                    tokens += event.tokens
            if parts:
                yield "".join(parts)
        if include_usage and status == "200":
            yield _sse(shape.usage_chunk(usage(prompt_tokens, tokens)))
        yield "data: [DONE]\n\n"
        timing.done()
    finally:
        if open_choices:  # the client left (or the stream failed): free their rows
            scheduler.cancel(completions)
            status = "499"
        state.metrics.requests.labels(endpoint, status).inc()
