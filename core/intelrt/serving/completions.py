"""``/v1/completions`` and ``/v1/chat/completions``: prompts → one engine request per choice
(checked against the server's limits), submitted to the decode thread, answered whole or streamed.

A client that disconnects ends its choices at the decode thread's next look, streamed or not
(a non-streamed request watches its connection for ``http.disconnect`` the whole time), and the
request is counted ``499``.
"""

from __future__ import annotations

import asyncio
import json
import logging
import secrets
import time
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from fastapi import Request
from fastapi.responses import JSONResponse, Response, StreamingResponse

from ..errors import ConfigurationError
from .decode_thread import Completion, Ended, Failed, Piece, QueueFull, Sink, _eos_ids
from .engine_request import engine_request
from .errors import ApiError, error_body
from .middleware import OUTCOME
from .protocol import ChatCompletionRequest, CompletionRequest
from .responses import ChoiceResult, Shape, usage
from .sampling_fields import GenerationDefaults, sampling_params
from .state import RETRY_AFTER_S, ServerState
from .text import TextAssembler
from .tool_calls import ToolCallSplitter, parse_tool_calls

if TYPE_CHECKING:
    from ..decoding.sampling import SampledToken
    from ..runtime.loaded import Loaded
    from .protocol import _Generation
    from .structured import ToolFormat

log = logging.getLogger(__name__)

COMPLETION_DEFAULT_TOKENS = 16
"""``max_tokens`` of a ``/v1/completions`` request that gives none (OpenAI's default)."""


class _Gone:
    """The client closed its connection (put in a request's sink by its watcher)."""


@dataclass
class Prepared:
    """A request made ready on the tokenizing thread: its prompts and per-choice engine requests."""

    prompts: list[list[int]]
    completions: list[Completion]
    echo: dict[int, str] = field(default_factory=dict)
    tools: ToolFormat | None = None


# -- prompts ---------------------------------------------------------------------------------------

def _too_long(state: ServerState, text: str, param: str) -> None:
    """Refuse a text that cannot fit the context whatever its tokens, before tokenizing it."""
    if len(text) > state.context * state.longest_token_chars:
        raise ApiError(400, f"This model's maximum context length is {state.context} tokens on this server; the "
                            f"{param} has {len(text):,} characters, more than any {state.context} tokens hold. "
                            "Shorten it.", param=param, code="context_length_exceeded")


def completion_prompts(state: ServerState, body: CompletionRequest) -> list[list[int]]:
    tokenizer = state.loaded.tokenizer
    prompt = body.prompt
    if isinstance(prompt, str):
        items: list[Any] = [prompt]
    elif prompt and all(isinstance(t, int) for t in prompt):
        items = [prompt]
    else:
        items = list(prompt)
    ids = []
    for item in items:
        if isinstance(item, list):
            ids.append(list(item))
        else:
            _too_long(state, item, "prompt")
            ids.append(list(tokenizer(item, add_special_tokens=body.add_special_tokens)["input_ids"]))
    return ids


def _template_arguments(tokenizer: Any) -> set[str]:
    """The parameters of the tokenizer's own ``apply_chat_template`` (transformers'
    ``PreTrainedTokenizerBase.apply_chat_template``: ``tokenize``, ``tools``, ``return_dict`` …): a
    request's ``chat_template_kwargs`` cannot set them (they would collide with the server's call)."""
    import inspect

    parameters = inspect.signature(tokenizer.apply_chat_template).parameters.values()
    return {p.name for p in parameters if p.kind not in (p.VAR_KEYWORD, p.VAR_POSITIONAL)}


def render_chat(state: ServerState, body: ChatCompletionRequest | Any, tools: bool = True) -> str:
    """The messages as the chat template writes them (``--chat-template`` or the tokenizer's,
    unless the request brings its own), tools and documents included."""
    tokenizer = state.loaded.tokenizer
    template = body.chat_template or state.template
    if not template:
        raise ApiError(400, "this model's tokenizer has no chat template: use /v1/completions, start the server "
                            "with --chat-template FILE, or save a tokenizer with a chat_template", param="messages")
    messages = [m.for_template() for m in body.messages]
    for i, message in enumerate(messages):
        _too_long(state, message["content"], f"messages[{i}].content")
    extra: dict[str, Any] = dict(body.chat_template_kwargs or {})
    taken = sorted(set(extra) & _template_arguments(tokenizer))
    if taken:
        raise ApiError(400, f"chat_template_kwargs: {', '.join(taken)} {'is' if len(taken) == 1 else 'are'} set by the "
                            "server itself (or by the request's own fields: tools, documents, add_generation_prompt, "
                            "continue_final_message); leave it out of chat_template_kwargs", param="chat_template_kwargs")
    if tools and body.tools:
        if "tools" not in template:
            raise ApiError(400, "this model's chat template takes no tools (it never mentions them): tool calling "
                                "needs a template that renders tools, e.g. --chat-template FILE", param="tools")
        extra["tools"] = [tool.model_dump(by_alias=True, exclude_none=True) for tool in body.tools]
    if getattr(body, "documents", None):
        extra["documents"] = body.documents
    try:
        text = tokenizer.apply_chat_template(messages, chat_template=template, tokenize=False,
                                             add_generation_prompt=body.add_generation_prompt,
                                             continue_final_message=body.continue_final_message, **extra)
    except Exception as exc:  # noqa: BLE001 - the template's own check of the conversation (roles, order)
        raise ApiError(400, f"the chat template refused these messages: {exc}", param="messages") from None
    return str(text)


def chat_prompt(state: ServerState, body: ChatCompletionRequest) -> list[list[int]]:
    text = render_chat(state, body)
    return [list(state.loaded.tokenizer(text, add_special_tokens=body.add_special_tokens)["input_ids"])]


# -- engine requests -----------------------------------------------------------------------------

def _seed(seed: int | None, index: int) -> int:
    """A request's seed for choice ``index`` (each choice its own, reproducibly), else a fresh one."""
    if seed is None:
        return secrets.randbits(63)
    return (seed * 1_000_003 + index) & (2**63 - 1)


def _constraint_factory(state: ServerState, body: _Generation) -> tuple[Callable[[], Any] | None, str,
                                                                          ToolFormat | None]:
    """(a maker of one choice's constraint, the request field it comes from, the tool format
    answers are parsed with)."""
    from .structured import AllowedTokens

    tools = body.effective_tool_choice if isinstance(body, ChatCompletionRequest) else "none"
    made: list[tuple[Callable[[], Any], str]] = []
    form = None
    if tools != "none":
        form = state.tool_format
        if form is None:
            raise ApiError(400, "tool calls need a chat template whose tool calls intelrt reads: Hermes-style "
                                "<tool_call>{\"name\": …, \"arguments\": …}</tool_call> (Qwen 2.5 / 3, Hermes); this "
                                "model's template writes no such calls (send --chat-template FILE, or "
                                "tool_choice='none')", param="tools")
        assert isinstance(body, ChatCompletionRequest)
        state.grammars.for_tools(body, form)  # compiles once: a schema xgrammar refuses fails the request now
        made.append((lambda: state.grammars.for_tools(body, form), "tools"))
    if body.response_format is not None and body.response_format.type != "text":
        fmt = body.response_format
        state.grammars.for_response_format(fmt)
        made.append((lambda: state.grammars.for_response_format(fmt), "response_format"))
    if body.allowed_token_ids is not None and not body.allowed_token_ids:
        raise ApiError(400, "allowed_token_ids is empty: no token could be generated; list the token ids the answer "
                            "may use, or leave the field out", param="allowed_token_ids")  # vLLM refuses it too
    if body.allowed_token_ids:
        from .sampling_fields import token_id

        ids = tuple(token_id(t, state.vocabulary, "allowed_token_ids") for t in body.allowed_token_ids)
        made.append((lambda: AllowedTokens(ids), "allowed_token_ids"))
    if len(made) > 1:
        raise ApiError(400, f"{made[0][1]} and {made[1][1]} would each constrain the answer: send one of them",
                       param=made[1][1])
    if not made:
        return None, "", form if tools != "none" else None
    return made[0][0], made[0][1], form


def prepare(state: ServerState, body: CompletionRequest | ChatCompletionRequest, adapter: str | None,
            sink: Sink) -> Prepared:
    """Prompts → one :class:`Completion` per prompt and ``n``, each checked against the limits
    (runs on the tokenizing thread)."""
    from ..runtime.loaded import check_prompts

    chat = isinstance(body, ChatCompletionRequest)
    prompts = chat_prompt(state, body) if isinstance(body, ChatCompletionRequest) else \
        completion_prompts(state, body)
    limits = state.limits
    assert limits is not None
    if body.truncate_prompt_tokens is not None:
        prompts = [p[-body.truncate_prompt_tokens:] for p in prompts]
    choices = len(prompts) * body.n
    if choices > limits.rows:
        raise ApiError(400, f"n={body.n} for {len(prompts)} prompt(s) asks for {choices} completions; this server "
                            f"decodes at most {limits.rows} at once (rows in flight): ask for fewer", param="n")
    param = "messages" if chat else "prompt"
    if any(not p for p in prompts):
        raise ApiError(400, "a prompt is empty after tokenization; send some text", param=param)
    for prompt in prompts:
        if len(prompt) >= limits.context:
            raise ApiError(400, f"This model's maximum context length is {limits.context} tokens on this server "
                                f"(prompt + max_tokens per request); the prompt has {len(prompt)} tokens. Shorten "
                                "the prompt.", param=param, code="context_length_exceeded")
    try:
        check_prompts(state.loaded.model, prompts)
    except ConfigurationError as exc:
        raise ApiError(400, str(exc), param=param) from None
    echo: dict[int, str] = {}
    echoed = isinstance(body, CompletionRequest) and body.echo
    if echoed:
        if body.top_logprobs_count is not None:
            raise ApiError(400, "echo with logprobs needs the prompt's log-probabilities, which the engine's prompt "
                                "pass does not return: send one of them", param="echo")
    limit = body.limit
    default = None if chat else COMPLETION_DEFAULT_TOKENS
    eos = () if body.ignore_eos else _eos_ids(state.loaded)
    make_constraint, constraint_field, form = _constraint_factory(state, body)
    defaults = GenerationDefaults.of(getattr(state.loaded.model, "generation_config", None))
    fields = {"logprobs": "top_logprobs" if isinstance(body, ChatCompletionRequest) and body.top_logprobs
              else "logprobs", "constraint": constraint_field,
              "max_new_tokens": "max_completion_tokens" if isinstance(body, ChatCompletionRequest) else "max_tokens"}
    completions = []
    for number, prompt in enumerate(prompts):
        room = limits.context - len(prompt)
        tokens = limit if limit is not None else min(default, room) if default is not None else room
        if tokens > room:
            raise ApiError(400, f"This model's maximum context length is {limits.context} tokens on this server "
                                f"(prompt + max_tokens per request); you requested {len(prompt) + tokens} tokens "
                                f"({len(prompt)} in the prompt, {tokens} for the completion). Lower max_tokens or "
                                "shorten the prompt.", param="max_completion_tokens" if chat else "max_tokens",
                           code="context_length_exceeded")
        for copy in range(body.n):
            index = number * body.n + copy
            sampling = sampling_params(body, defaults, state.vocabulary, max_new_tokens=tokens, eos=eos,
                                       seed=_seed(body.seed, index),
                                       constraint=make_constraint() if make_constraint else None, params=fields)
            request = engine_request(prompt, sampling, adapter)
            text = TextAssembler(state.loaded.tokenizer, body.stops, skip_special_tokens=body.skip_special_tokens,
                                 include_stop=body.include_stop_str_in_output)
            completions.append(Completion(index, request, text, sink))
            if echoed:
                echo[index] = state.loaded.tokenizer.decode(prompt, skip_special_tokens=body.skip_special_tokens)
    return Prepared(prompts, completions, echo, form)


# -- answering -----------------------------------------------------------------------------------

class _Timing:
    """Time to first token and the gaps between tokens, per request, into the metrics."""

    def __init__(self, state: ServerState, arrived: float) -> None:
        self.metrics, self.arrived = state.metrics, arrived
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


def _logprobs_of(event: Piece) -> list[SampledToken]:
    """The engine's tokens with their log-probabilities carried by ``event`` (``Piece.sampled``,
    when the request asked for logprobs; none from an engine without them)."""
    return list(getattr(event, "sampled", None) or ())


async def _watch(request: Request, sink: Sink) -> None:
    """Put :class:`_Gone` into ``sink`` when the client disconnects (the body is read already:
    the next message is the disconnect)."""
    while True:
        message = await request.receive()
        if message["type"] == "http.disconnect":
            sink.queue.put_nowait(_Gone())  # type: ignore[arg-type]
            return


def _text_of(loaded: Loaded) -> Callable[[int], str]:
    tokenizer = loaded.tokenizer
    return lambda token: str(tokenizer.decode([token]))


async def answer(state: ServerState, request: Request, body: CompletionRequest | ChatCompletionRequest,
                 arrived: float) -> Response:
    decode_thread = state.running()
    adapter = state.resolve_model(body.model)
    sink = Sink(asyncio.get_running_loop())
    prepared = await state.off_loop(prepare, state, body, adapter, sink)
    completions = prepared.completions
    try:
        decode_thread.submit(completions)
    except QueueFull:
        raise ApiError(429, f"the server's queue is full ({state.limits.max_queue if state.limits else 0} "
                            f"completions waiting); retry after {RETRY_AFTER_S} s", "rate_limit_error",
                       code="queue_full", headers={"Retry-After": str(RETRY_AFTER_S)}) from None
    except RuntimeError as exc:
        raise ApiError(503, str(exc), "server_error", code="shutting_down") from None
    prompt_tokens = sum(len(p) for p in prepared.prompts)
    state.metrics.prompt_tokens.inc(prompt_tokens)
    chat = isinstance(body, ChatCompletionRequest)
    shape = Shape(chat, body.model, _text_of(state.loaded), body.top_logprobs_count, response_id=body.request_id)
    timing = _Timing(state, arrived)
    if body.stream:
        include_usage = body.stream_options is not None and body.stream_options.include_usage
        return StalledClientTimeout(_stream(state, request, sink, prepared, shape, timing, prompt_tokens,
                                            include_usage), state.client_timeout, lambda: _stalled(state, request),
                                    media_type="text/event-stream", headers={"Cache-Control": "no-cache"})
    results = {c.index: ChoiceResult(c.index) for c in completions}
    finished = 0
    watcher = asyncio.get_running_loop().create_task(_watch(request, sink))
    try:
        while finished < len(completions):
            event = await sink.queue.get()
            if isinstance(event, _Gone):
                request.state.__setattr__(OUTCOME, 499)
                return Response(status_code=499)
            if isinstance(event, Failed):
                raise ApiError(event.status, event.message, "server_error")
            result = results[event.index]
            if isinstance(event, Piece):
                result.text += event.text
                result.logprobs += _logprobs_of(event)
                timing.tokens(event.index, event.tokens)
            elif isinstance(event, Ended):
                result.finish, result.tokens = event.reason, event.tokens
                finished += 1
    finally:
        watcher.cancel()
        if finished < len(completions):
            decode_thread.cancel(completions)
    if prepared.tools is not None:
        for result in results.values():
            content, calls = parse_tool_calls(result.text, prepared.tools)
            if calls:
                result.text, result.tool_calls, result.finish = content or "", calls, "tool_calls"
    timing.done()
    counts = usage(prompt_tokens, sum(r.tokens for r in results.values()))
    return JSONResponse(shape.whole(list(results.values()), counts, prepared.echo))


def _sse(body: dict[str, Any]) -> str:
    return f"data: {json.dumps(body, separators=(',', ':'))}\n\n"


def error_event(message: str, kind: str) -> str:
    """The end of a stream that failed after it began: an OpenAI error event, then ``[DONE]``."""
    return _sse(error_body(message, kind)) + "data: [DONE]\n\n"


STALLED_STATUS = 408
"""What a stream whose client stopped reading is counted as (Request Timeout)."""


class _Stalled(Exception):
    """The client took no bytes for ``client_timeout`` seconds."""


class StalledClientTimeout(StreamingResponse):
    """Starlette's streamed response whose every write must be taken by the client within
    ``client_timeout`` seconds (nginx's ``send_timeout``: the time between two successive writes,
    not the whole answer). uvicorn's ``send`` waits while the socket's buffers are full
    (``uvicorn/protocols/http/flow_control.py``, ``FlowControl.drain``); a client that stops
    reading would hold its row there until its ``max_tokens``, and its connection for ever. After
    the timeout the stream ends (its generator closed: the completions' rows are freed at the
    decode thread's next look) and ``on_stall`` runs; uvicorn then closes the connection."""

    def __init__(self, content: AsyncIterator[str], client_timeout: float, on_stall: Callable[[], None],
                 **kwargs: Any) -> None:
        super().__init__(content, **kwargs)
        self.client_timeout, self.on_stall = client_timeout, on_stall

    async def stream_response(self, send: Any) -> None:
        async def timed(message: dict[str, Any]) -> None:
            try:
                await asyncio.wait_for(send(message), self.client_timeout)
            except TimeoutError:
                raise _Stalled() from None

        try:
            await timed({"type": "http.response.start", "status": self.status_code, "headers": self.raw_headers})
            async for chunk in self.body_iterator:
                await timed({"type": "http.response.body", "body": chunk.encode(self.charset)
                             if isinstance(chunk, str) else chunk, "more_body": True})
            await timed({"type": "http.response.body", "body": b"", "more_body": False})
        except _Stalled:
            close = getattr(self.body_iterator, "aclose", None)
            if close is not None:
                await close()  # the generator's finally cancels what is left
            self.on_stall()


def _stalled(state: ServerState, request: Request) -> None:
    request.state.__setattr__(OUTCOME, STALLED_STATUS)
    log.warning("intelrt serve: a streaming client took nothing for %g s (--client-timeout): its completions were "
                "cancelled and the connection closed", state.client_timeout)


def _unexpected(exc: Exception) -> str:
    """An error event's message for a failure nobody foresaw (the log has the traceback)."""
    log.error("intelrt serve: a stream failed", exc_info=exc)
    return f"the server failed while streaming this answer ({type(exc).__name__}); its log has the details"


async def _stream(state: ServerState, request: Request, sink: Sink, prepared: Prepared, shape: Shape,
                  timing: _Timing, prompt_tokens: int, include_usage: bool) -> AsyncIterator[str]:
    """Server-sent events: chunks as text comes, a finish chunk per choice, usage if asked, ``[DONE]``."""
    completions = prepared.completions
    open_choices = {c.index for c in completions}
    splitters = {c.index: ToolCallSplitter(prepared.tools) for c in completions} if prepared.tools else {}
    offsets = {c.index: len(prepared.echo.get(c.index, "")) for c in completions}
    tokens = 0
    failed = False
    decode_thread = state.decode_thread
    try:
        if shape.chat:
            yield "".join(_sse(shape.role_chunk(i)) for i in sorted(open_choices))
        if prepared.echo:
            yield "".join(_sse(shape.chunk(i, text)) for i, text in sorted(prepared.echo.items()))
        while open_choices:
            events = [await sink.queue.get()]
            while not sink.queue.empty():
                events.append(sink.queue.get_nowait())
            parts = []
            for event in events:
                if isinstance(event, Failed):
                    failed = True
                    request.state.__setattr__(OUTCOME, event.status)
                    parts.append(_sse(error_body(event.message, "server_error")))
                    open_choices.clear()
                    break
                if isinstance(event, Piece):
                    timing.tokens(event.index, event.tokens)
                    text = event.text
                    if event.index in splitters:
                        text = splitters[event.index].feed(text)
                    entries = _logprobs_of(event)
                    if text or entries:
                        parts.append(_sse(shape.chunk(event.index, text, entries=entries,
                                                      offset=offsets[event.index])))
                        offsets[event.index] += len(text)
                elif isinstance(event, Ended):
                    finish, calls = event.reason, None
                    if event.index in splitters:
                        rest, found = splitters[event.index].finish()
                        if rest:
                            parts.append(_sse(shape.chunk(event.index, rest)))
                        if found:
                            calls, finish = found, "tool_calls"
                            parts.append(_sse(shape.chunk(event.index, tool_calls=calls)))
                    parts.append(_sse(shape.chunk(event.index, finish=finish)))
                    open_choices.discard(event.index)
                    tokens += event.tokens
            if parts:
                yield "".join(parts)
        if include_usage and not failed:
            yield _sse(shape.usage_chunk(usage(prompt_tokens, tokens)))
        yield "data: [DONE]\n\n"
        timing.done()
    except Exception as exc:  # noqa: BLE001 - the answer has begun: an error event, not a cut connection
        if decode_thread is not None:
            decode_thread.cancel(completions)
        open_choices.clear()
        request.state.__setattr__(OUTCOME, 500)
        yield error_event(_unexpected(exc), "server_error")
    finally:
        if open_choices:  # the client left: free their rows
            if decode_thread is not None:
                decode_thread.cancel(completions)
            request.state.__setattr__(OUTCOME, 499)
