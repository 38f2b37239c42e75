"""What the app's handlers share: the model and its tokenizer work, the limits, the decode thread,
the adapters, the metrics; readiness, draining, and the one ``ready:`` line."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from functools import cached_property
from typing import TYPE_CHECKING, Any, TypeVar

from .adapters import Adapters
from .errors import ApiError
from .limits import CLIENT_TIMEOUT_S
from .metrics import ServerMetrics

if TYPE_CHECKING:
    from ..runtime.loaded import Loaded
    from .decode_thread import DecodeThread
    from .limits import ServingLimits
    from .structured import Grammars, ToolFormat

log = logging.getLogger("intelrt.serving")

RETRY_AFTER_S = 1
"""What a ``429`` or a warming-up ``503`` tells the client to wait, in seconds."""
SHUTDOWN_MESSAGE = "the server is shutting down"
T = TypeVar("T")


@dataclass
class ServerState:
    loaded: Loaded
    limits: ServingLimits | None
    """``None`` for a feature-extraction model (no decode engine)."""
    model_name: str
    context: int
    """Tokens a request may hold (prompt + completion; an embedding input)."""
    metrics: ServerMetrics = field(default_factory=ServerMetrics)
    decode_thread: DecodeThread | None = None
    loop: asyncio.AbstractEventLoop | None = None
    draining: bool = False
    announce: Callable[[str], None] = log.info
    chat_template: str | None = None
    """``--chat-template``: the template text, instead of the tokenizer's."""
    client_timeout: float = CLIENT_TIMEOUT_S
    """``--client-timeout``: seconds a streaming client may take no bytes."""
    url: str | None = None
    """``http://HOST:PORT/v1`` once a server listens (set by ``intelrt.serving.server``)."""
    warm: bool = False
    announced: bool = False
    adapters: Adapters = field(init=False)

    def __post_init__(self) -> None:
        self.adapters = Adapters(self.model_name)
        # One thread tokenizes (a 2 MB prompt takes seconds; the event loop answers meanwhile).
        # One, because transformers' fast tokenizers set padding/truncation on a shared backend.
        self.tokenizing = ThreadPoolExecutor(1, thread_name_prefix="intelrt-tokenize")
        self.embedding = ThreadPoolExecutor(1, thread_name_prefix="intelrt-embed")

    @property
    def generates(self) -> bool:
        return self.limits is not None

    async def off_loop(self, function: Callable[..., T], *args: Any) -> T:
        """``function(*args)`` on the tokenizing thread."""
        return await asyncio.get_running_loop().run_in_executor(self.tokenizing, function, *args)

    # -- the tokenizer's facts ---------------------------------------------------------------
    @cached_property
    def vocabulary(self) -> int:
        """Rows of the model's input embeddings (ids a prompt may hold; logits the sampler sees)."""
        embeddings = self.loaded.model.get_input_embeddings()
        return int(getattr(embeddings, "num_embeddings", 0) or len(self.loaded.tokenizer))

    @cached_property
    def longest_token_chars(self) -> int:
        """The most characters one token decodes to: a text longer than this many per context slot
        cannot fit, and is refused before tokenizing."""
        tokenizer = self.loaded.tokenizer
        backend = getattr(tokenizer, "backend_tokenizer", None)
        vocab = backend.get_vocab(with_added_tokens=True) if backend is not None else tokenizer.get_vocab()
        return max((len(token) for token in vocab), default=1) + 1

    @cached_property
    def template(self) -> str | None:
        """The chat template requests are rendered with (``--chat-template`` or the tokenizer's)."""
        own = getattr(self.loaded.tokenizer, "chat_template", None)
        return self.chat_template or (own if isinstance(own, str) else None)

    @cached_property
    def tool_format(self) -> ToolFormat | None:
        from .structured import tool_format

        return tool_format(self.template)

    @cached_property
    def grammars(self) -> Grammars:
        from .decode_thread import _eos_ids
        from .structured import Grammars

        return Grammars(self.loaded.tokenizer, self.vocabulary, _eos_ids(self.loaded))

    # -- life ---------------------------------------------------------------------------------
    def start(self, loop: asyncio.AbstractEventLoop) -> None:
        self.loop = loop
        lines = [f"serving {self.model_name} ({self.loaded.plan.task}) on {self.loaded.plan.backend.name}"]
        if self.limits is not None:
            from .decode_thread import start_decode_thread

            self.decode_thread = start_decode_thread(self.loaded, self.limits, self.metrics)
            lines += [*self.decode_thread.describe(), *self.limits.lines()]
        else:
            lines.append(f"context: {self.context} tokens per input")
        for line in lines:
            self.announce(f"intelrt serve: {line}")
        loop.create_task(self._when_warm())

    async def _when_warm(self) -> None:
        decode_thread = self.decode_thread
        if decode_thread is not None:
            await asyncio.to_thread(decode_thread.ready.wait)
            if decode_thread.failure is not None:
                return
            warmed = decode_thread.warmed_up()
            if warmed is not None:
                self.announce(f"intelrt serve: {warmed}")
        self.warm = True
        self.announce_ready()

    def listening(self, url: str) -> None:
        """The server's socket is open at ``url`` (``http://HOST:PORT/v1``)."""
        self.url = url
        self.announce_ready()

    def announce_ready(self) -> None:
        """Once warm and listening (or warm, under an ASGI server that does not say where): the
        one line that says where the server is."""
        if self.announced or not self.warm or self.draining:
            return
        self.announced = True
        where = f"{self.url} — " if self.url else ""
        self.announce(f"ready: {where}model '{self.model_name}'")

    def begin_drain(self, timeout: float) -> None:
        """Stop taking requests; those already taken have ``timeout`` seconds to finish, then
        fail with ``503`` (thread-safe: a signal handler calls it)."""
        if self.draining or self.loop is None:
            return
        self.draining = True
        self.announce(f"intelrt serve: draining: no new requests; in-flight ones have {timeout:g} s to finish")
        decode_thread = self.decode_thread
        if decode_thread is not None:
            self.loop.call_soon_threadsafe(self.loop.call_later, timeout, decode_thread.abort,
                                           f"{SHUTDOWN_MESSAGE} and its drain timeout ({timeout:g} s) passed")

    def stop(self) -> None:
        if self.decode_thread is not None:
            self.decode_thread.abort(SHUTDOWN_MESSAGE)
            self.decode_thread.stop(timeout=30)
            # What is left once the decode thread has ended: 0 and 0, or a row or block leaked.
            completions, used, blocks = self.decode_thread.held()
            self.announce(f"intelrt serve: stopped: {completions} completions left in the engine, {used:,} of "
                          f"{blocks:,} KV blocks held")
        self.tokenizing.shutdown(wait=False, cancel_futures=True)
        self.embedding.shutdown(wait=False, cancel_futures=True)

    @property
    def ready(self) -> bool:
        if self.draining:
            return False
        if self.limits is None:
            return self.loop is not None
        decode_thread = self.decode_thread
        return decode_thread is not None and decode_thread.ready.is_set() and decode_thread.failure is None

    def readiness(self) -> dict[str, Any]:
        decode_thread = self.decode_thread
        status = ("ready" if self.ready else "draining" if self.draining else
                  "failed" if decode_thread is not None and decode_thread.failure else "warming up")
        body: dict[str, Any] = {"status": status}
        if status == "failed" and decode_thread is not None:
            body["reason"] = decode_thread.failure
        return body

    def check_accepting(self) -> None:
        if self.draining:
            raise ApiError(503, f"{SHUTDOWN_MESSAGE}: it takes no new requests", "server_error",
                           code="shutting_down")
        if self.limits is None:
            return
        decode_thread = self.decode_thread
        if decode_thread is None or decode_thread.failure is not None:
            raise ApiError(503, (decode_thread.failure if decode_thread else None) or "the server is not started",
                           "server_error", code="not_ready")
        if not decode_thread.ready.is_set():
            raise ApiError(503, "the model is warming up; retry when GET /ready answers 200", "server_error",
                           code="not_ready", headers={"Retry-After": str(RETRY_AFTER_S)})

    def running(self) -> DecodeThread:
        self.check_accepting()
        if self.decode_thread is None:
            raise self.wrong_task("text generation")
        return self.decode_thread

    def wrong_task(self, what: str) -> ApiError:
        task = self.loaded.plan.task
        other = "/v1/embeddings" if task == "feature-extraction" else "/v1/completions and /v1/chat/completions"
        return ApiError(400, f"this server's model {self.model_name!r} is loaded for {task}, which does no {what}: "
                             f"use {other}", param="model", code="wrong_model_task")

    def resolve_model(self, name: str) -> str | None:
        """The adapter ``name`` selects (``None``: the base model); ``404`` for an unknown one."""
        if name == self.model_name:
            return None
        if self.adapters.get(name) is not None:
            return name
        served = ", ".join(repr(n) for n in [self.model_name, *self.adapters.names()])
        raise ApiError(404, f"The model '{name}' does not exist: this server serves {served} (GET /v1/models)",
                       "not_found_error", param="model", code="model_not_found")

    def model_cards(self) -> list[dict[str, Any]]:
        """``/v1/models``' entries (vLLM's ``ModelCard``: ``root``, ``parent``, ``max_model_len``)."""
        cards = [{"id": self.model_name, "object": "model", "created": 0, "owned_by": "intelrt",
                  "root": str(self.loaded.plan.model.source), "parent": None, "max_model_len": self.context}]
        for adapter in self.adapters.all():
            cards.append({"id": adapter.name, "object": "model", "created": 0, "owned_by": "intelrt",
                          "root": adapter.path, "parent": self.model_name, "max_model_len": self.context})
        return cards
