"""The FastAPI app: OpenAI's ``/v1/models`` (and ``/v1/models/{id}``), ``/v1/completions``,
``/v1/chat/completions``, ``/v1/embeddings``; vLLM's ``/tokenize``, ``/detokenize``, ``/version``,
``/v1/load_lora_adapter`` and ``/v1/unload_lora_adapter``; ``/health`` (liveness), ``/ready``
(readiness: loaded and warmed up, not draining) and ``/metrics`` (Prometheus).
:func:`create_app` builds it for a loaded model; run it with :func:`intelrt.serve` (which drains
on ``SIGTERM``) or any ASGI server.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import AsyncIterator, Callable, Mapping, Sequence
from contextlib import asynccontextmanager
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse, Response
from starlette.exceptions import HTTPException as StarletteHTTPException

from .._version import __version__
from ..backends.sizing import model_positions
from ..errors import ConfigurationError
from .body import parse_json, validate
from .completions import answer, render_chat
from .errors import ApiError
from .limits import CLIENT_TIMEOUT_S, limits_for
from .metrics import CONTENT_TYPE
from .middleware import ObservedRequests, RequireApiKey
from .protocol import (
    ChatCompletionRequest,
    CompletionRequest,
    DetokenizeRequest,
    EmbeddingRequest,
    LoadAdapterRequest,
    TokenizeRequest,
    UnloadAdapterRequest,
)
from .responses import new_id
from .state import ServerState

if TYPE_CHECKING:
    from ..runtime.loaded import Loaded

log = logging.getLogger(__name__)

SERVED_TASKS = ("text-generation", "feature-extraction")


@dataclass(frozen=True)
class CorsOptions:
    """Starlette's ``CORSMiddleware`` settings (``vllm serve``'s ``--allowed-origins`` …)."""

    allowed_origins: tuple[str, ...] = ()
    allowed_methods: tuple[str, ...] = ("*",)
    allowed_headers: tuple[str, ...] = ("*",)
    allow_credentials: bool = False


ENCODER_INPUT = 512
"""Tokens an input of an encoder server may have when the model's config bounds none (BERT's)."""


def _context(loaded: Loaded) -> int:
    """The tokens one input of a server without the decode engine (embeddings) may have."""
    found = model_positions(loaded.model.config)
    return found[1] if found is not None else ENCODER_INPUT


def create_app(loaded: Loaded, *, model_name: str | None = None, max_batch: int | None = None,
               context_length: int | None = None, max_queue: int | None = None,
               announce: Callable[[str], None] | None = None, api_key: str | None = None,
               cors: CorsOptions | None = None, chat_template: str | None = None, access_log: bool = True,
               lora: Mapping[str, str] | Sequence[tuple[str, str]] = (),
               client_timeout: float = CLIENT_TIMEOUT_S) -> FastAPI:
    """An ASGI app serving ``loaded`` with the OpenAI API.

    ``model_name``: the id clients send as ``model`` (default: the model's source as given to
    ``intelrt.load``). ``max_batch``, ``context_length``, ``max_queue``: the server's limits
    (defaults from the plan and the device: :func:`intelrt.serving.limits.serving_limits`).
    ``announce``: where the start-up summary and the ``ready:`` line go (default: the
    ``intelrt.serving`` logger, at INFO). ``api_key``: every ``/v1`` route needs it as a bearer
    token. ``cors``: allowed origins etc. (default: no cross-origin requests). ``chat_template``:
    the template text chat requests are rendered with, instead of the tokenizer's.
    ``access_log``: one line per request on the ``intelrt.serving.access`` logger. ``lora``:
    adapters to load at start, name → directory. ``client_timeout``: seconds a streaming client may
    take no bytes before its completions are cancelled (``limits.CLIENT_TIMEOUT_S``). A text-generation model's decode thread starts
    with the app's lifespan and warms up; ``GET /ready`` answers 200 after."""
    if loaded.plan.task not in SERVED_TASKS:
        raise ConfigurationError(f"intelrt serve serves text-generation and feature-extraction models; this one is "
                                 f"loaded for {loaded.plan.task!r}")
    loaded._require_tokenizer("intelrt serve")
    if api_key is not None and not api_key:
        raise ConfigurationError("api_key is empty: pass a key, or none for a server without one")
    if not client_timeout > 0:
        raise ConfigurationError(f"client_timeout={client_timeout!r}: seconds a streaming client may take no bytes, "
                                 "> 0 (e.g. 60)")
    generates = loaded.plan.task == "text-generation"
    limits = limits_for(loaded, max_batch=max_batch, context_length=context_length, max_queue=max_queue) \
        if generates else None
    name = model_name or str(loaded.plan.model.source)
    state = ServerState(loaded, limits, name, limits.context if limits else _context(loaded),
                        chat_template=chat_template, client_timeout=client_timeout)
    if announce is not None:
        state.announce = announce
    adapters = list(lora.items()) if isinstance(lora, Mapping) else list(lora)
    if adapters:
        from .adapters import read_adapter

        for adapter_name, path in adapters:
            read_adapter(adapter_name, path)  # a bad directory fails the start, not the first request

    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        state.start(asyncio.get_running_loop())
        if adapters and _adapter_engine(state) is None:
            reason = state.decode_thread.reason if state.decode_thread is not None else "no decode engine"
            raise ConfigurationError(f"--lora cannot be served: this model decodes one completion at a time "
                                     f"({reason}), without per-request adapters; serve the merged model instead")
        for adapter_name, path in adapters:
            await asyncio.to_thread(state.adapters.load, adapter_name, path, _adapter_engine(state))
        try:
            yield
        finally:
            await asyncio.to_thread(state.stop)

    app = FastAPI(title="intelrt serve", version=__version__, lifespan=lifespan)
    app.state.intelrt = state
    if api_key:
        app.add_middleware(RequireApiKey, api_key=api_key)
    if cors is not None and cors.allowed_origins:
        from starlette.middleware.cors import CORSMiddleware

        app.add_middleware(CORSMiddleware, allow_origins=list(cors.allowed_origins),
                           allow_methods=list(cors.allowed_methods), allow_headers=list(cors.allowed_headers),
                           allow_credentials=cors.allow_credentials)
    app.add_middleware(ObservedRequests, metrics=state.metrics, access=access_log)

    @app.exception_handler(ApiError)
    async def api_error(request: Request, exc: ApiError) -> JSONResponse:
        return exc.response()

    @app.exception_handler(StarletteHTTPException)
    async def http_error(request: Request, exc: StarletteHTTPException) -> JSONResponse:
        kind = "not_found_error" if exc.status_code == 404 else "invalid_request_error"
        return ApiError(exc.status_code, str(exc.detail), kind).response()

    @app.exception_handler(Exception)
    async def internal(request: Request, exc: Exception) -> JSONResponse:
        log.error("intelrt serve: %s %s failed", request.method, request.url.path, exc_info=exc)
        return ApiError(500, f"internal error ({type(exc).__name__}); the server log has the details",
                        "server_error").response()

    async def read(request: Request, model: type[Any]) -> Any:
        return validate(model, parse_json(await request.body()))

    @app.get("/health")
    async def health() -> dict[str, str]:
        """Liveness: the process answers."""
        return {"status": "ok"}

    @app.get("/ready")
    async def ready() -> JSONResponse:
        """Readiness: 200 once the model is loaded and warmed up, 503 before, on failure and while draining."""
        return JSONResponse(state.readiness(), status_code=200 if state.ready else 503)

    @app.get("/metrics")
    async def metrics() -> Response:
        state.metrics.ready.set(1 if state.ready else 0)
        return Response(state.metrics.render(), media_type=CONTENT_TYPE)

    @app.get("/version")
    async def version() -> dict[str, str]:
        return {"version": __version__}

    @app.get("/v1/models")
    async def models() -> dict[str, Any]:
        return {"object": "list", "data": state.model_cards()}

    @app.get("/v1/models/{model_id:path}")
    async def model(model_id: str) -> dict[str, Any]:
        card = next((c for c in state.model_cards() if c["id"] == model_id), None)
        if card is None:
            state.resolve_model(model_id)  # raises the 404 naming what is served
        return card  # type: ignore[return-value]

    @app.post("/v1/completions", response_model=None)
    async def completions(request: Request) -> Response:
        arrived = time.monotonic()
        state.check_accepting()
        return await answer(state, request, await read(request, CompletionRequest), arrived)

    @app.post("/v1/chat/completions", response_model=None)
    async def chat_completions(request: Request) -> Response:
        arrived = time.monotonic()
        state.check_accepting()
        return await answer(state, request, await read(request, ChatCompletionRequest), arrived)

    @app.post("/v1/embeddings")
    async def embeddings(request: Request) -> dict[str, Any]:
        from .embeddings import embed, encoded, input_ids

        state.check_accepting()
        body: EmbeddingRequest = await read(request, EmbeddingRequest)
        state.resolve_model(body.model)
        if state.generates:
            raise state.wrong_task("embedding")
        hidden = int(state.loaded.model.config.get_text_config().hidden_size)
        if body.dimensions is not None and body.dimensions != hidden:
            raise ApiError(400, f"dimensions={body.dimensions} is not supported: this model's embeddings have "
                                f"{hidden} dimensions and it was not trained to be cut shorter", param="dimensions")
        ids = await state.off_loop(input_ids, state.loaded, body, state.context)
        loop = asyncio.get_running_loop()
        vectors = await loop.run_in_executor(state.embedding, embed, state.loaded, ids, body.normalize is not False)
        tokens = sum(len(i) for i in ids)
        state.metrics.prompt_tokens.inc(tokens)
        return {"id": new_id("embd"), "object": "list", "created": int(time.time()), "model": body.model,
                "data": [{"index": i, "object": "embedding", "embedding": encoded(v, body.encoding_format)}
                         for i, v in enumerate(vectors)],
                "usage": {"prompt_tokens": tokens, "total_tokens": tokens}}

    @app.post("/tokenize")
    async def tokenize(request: Request) -> dict[str, Any]:
        body: TokenizeRequest = await read(request, TokenizeRequest)
        if body.model is not None:
            state.resolve_model(body.model)

        def run() -> dict[str, Any]:
            tokenizer = state.loaded.tokenizer
            if body.messages is not None:
                text = render_chat(state, body)
                special = bool(body.add_special_tokens)
            else:
                text = body.prompt or ""
                special = body.add_special_tokens is not False
            ids = list(tokenizer(text, add_special_tokens=special)["input_ids"])
            answer: dict[str, Any] = {"count": len(ids), "max_model_len": state.context, "tokens": ids}
            if body.return_token_strs:
                answer["token_strs"] = tokenizer.convert_ids_to_tokens(ids)
            return answer

        return await state.off_loop(run)

    @app.post("/detokenize")
    async def detokenize(request: Request) -> dict[str, Any]:
        body: DetokenizeRequest = await read(request, DetokenizeRequest)
        if body.model is not None:
            state.resolve_model(body.model)
        bad = next((t for t in body.tokens if not 0 <= t < state.vocabulary), None)
        if bad is not None:
            raise ApiError(400, f"tokens: token id {bad} is outside the model's vocabulary (0 .. "
                                f"{state.vocabulary - 1})", param="tokens")
        return {"prompt": await state.off_loop(state.loaded.tokenizer.decode, body.tokens)}

    @app.post("/v1/load_lora_adapter")
    async def load_lora_adapter(request: Request) -> dict[str, Any]:
        body: LoadAdapterRequest = await read(request, LoadAdapterRequest)
        adapter = await asyncio.to_thread(state.adapters.load, body.lora_name, body.lora_path,
                                          _adapter_engine(state))
        return {"object": "lora_adapter", "lora_name": adapter.name, "lora_path": adapter.path,
                "message": f"Success: LoRA adapter '{adapter.name}' added successfully."}

    @app.post("/v1/unload_lora_adapter")
    async def unload_lora_adapter(request: Request) -> dict[str, Any]:
        body: UnloadAdapterRequest = await read(request, UnloadAdapterRequest)
        await asyncio.to_thread(state.adapters.unload, body.lora_name, _adapter_engine(state))
        return {"object": "lora_adapter", "lora_name": body.lora_name,
                "message": f"Success: LoRA adapter '{body.lora_name}' removed successfully."}

    return app


def _adapter_engine(state: ServerState) -> Any:
    """The decode thread when it loads adapters per request (``load_adapter`` / ``unload_adapter``), else ``None``."""
    decode_thread = state.decode_thread
    if decode_thread is None or not hasattr(decode_thread, "load_adapter"):
        return None
    return decode_thread
