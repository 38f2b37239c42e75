"""The OpenAI API as this server speaks it: request bodies (validated by pydantic), response and
stream-chunk bodies, error objects.

A field OpenAI defines but this server does not apply is refused with ``400`` naming it, unless
it has its neutral value (``frequency_penalty: 0``, ``logprobs: null`` …): nothing a client asks
for is dropped without a word. Unknown fields are refused too.
"""

from __future__ import annotations

import time
import uuid
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

MAX_STOP_SEQUENCES = 4
"""OpenAI's limit on ``stop`` sequences per request."""

#: OpenAI fields this server does not apply, with the value that asks for nothing.
NEUTRAL = {"presence_penalty": 0.0, "frequency_penalty": 0.0, "logit_bias": None, "logprobs": None,
           "top_logprobs": None, "best_of": None, "echo": False, "suffix": None, "tools": None, "tool_choice": None,
           "functions": None, "function_call": None, "parallel_tool_calls": None, "response_format": None}


class StreamOptions(BaseModel):
    model_config = ConfigDict(extra="forbid")

    include_usage: bool = False


class _Sampling(BaseModel):
    """Fields common to both endpoints."""

    model_config = ConfigDict(extra="forbid")

    model: str
    max_tokens: int | None = Field(None, ge=1)
    temperature: float | None = Field(None, ge=0, le=2)
    top_p: float | None = Field(None, gt=0, le=1)
    n: int = Field(1, ge=1)
    stream: bool = False
    stream_options: StreamOptions | None = None
    stop: str | list[str] | None = None
    seed: int | None = None
    user: str | None = None
    presence_penalty: float | None = None
    frequency_penalty: float | None = None
    logit_bias: dict[str, float] | None = None

    @field_validator("stop")
    @classmethod
    def _stop(cls, value: str | list[str] | None) -> str | list[str] | None:
        if isinstance(value, list) and len(value) > MAX_STOP_SEQUENCES:
            raise ValueError(f"at most {MAX_STOP_SEQUENCES} stop sequences, got {len(value)}")
        return value

    @model_validator(mode="after")
    def _applied(self) -> _Sampling:
        for name, neutral in NEUTRAL.items():
            value = getattr(self, name, neutral)
            if value not in (neutral, None) and value != {} and not (name == "logprobs" and value is False) \
                    and not (name == "best_of" and value == 1):
                raise ValueError(f"{name}={value!r} is not supported by intelrt serve; leave it out")
        if self.stream_options is not None and not self.stream:
            raise ValueError("stream_options needs stream=true")
        return self

    @property
    def stops(self) -> tuple[str, ...]:
        if self.stop is None:
            return ()
        return (self.stop,) if isinstance(self.stop, str) else tuple(self.stop)


class CompletionRequest(_Sampling):
    """``POST /v1/completions``: a prompt (text, token ids, or a list of either) to continue."""

    prompt: str | list[str] | list[int] | list[list[int]]
    logprobs: int | None = None
    best_of: int | None = None
    echo: bool = False
    suffix: str | None = None

    @field_validator("prompt", mode="before")
    @classmethod
    def _prompt_shape(cls, value: Any) -> Any:
        def ids(item: Any) -> bool:
            return isinstance(item, list) and all(isinstance(t, int) and not isinstance(t, bool) for t in item)

        if not (isinstance(value, str) or ids(value) or isinstance(value, list) and (
                all(isinstance(p, str) for p in value) or all(ids(p) for p in value))):
            raise ValueError("prompt must be a string, a list of strings, a list of token ids or a list of token-id "
                             "lists")
        return value


class TextPart(BaseModel):
    model_config = ConfigDict(extra="forbid")

    type: Literal["text"]
    text: str


class ChatMessage(BaseModel):
    model_config = ConfigDict(extra="forbid")

    role: Literal["system", "developer", "user", "assistant", "tool"]
    content: str | list[TextPart] | None = None
    name: str | None = None

    def text(self) -> str:
        if self.content is None:
            return ""
        return self.content if isinstance(self.content, str) else "".join(p.text for p in self.content)


class ChatCompletionRequest(_Sampling):
    """``POST /v1/chat/completions``: messages, rendered with the tokenizer's chat template."""

    messages: list[ChatMessage] = Field(min_length=1)
    max_completion_tokens: int | None = Field(None, ge=1)
    logprobs: bool | None = None
    top_logprobs: int | None = None
    tools: list[Any] | None = None
    tool_choice: Any = None
    functions: list[Any] | None = None
    function_call: Any = None
    parallel_tool_calls: bool | None = None
    response_format: dict[str, Any] | None = None

    @model_validator(mode="after")
    def _one_limit(self) -> ChatCompletionRequest:
        if self.max_tokens is not None and self.max_completion_tokens is not None \
                and self.max_tokens != self.max_completion_tokens:
            raise ValueError("max_tokens and max_completion_tokens disagree; send one of them")
        if self.response_format == {"type": "text"}:
            self.response_format = None
        return self

    @property
    def limit(self) -> int | None:
        return self.max_completion_tokens or self.max_tokens


def error_body(message: str, kind: str = "invalid_request_error", param: str | None = None,
               code: str | None = None) -> dict[str, Any]:
    """An OpenAI error object."""
    return {"error": {"message": message, "type": kind, "param": param, "code": code}}


def new_id(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex}"


class Shape:
    """How one endpoint's responses look: ``text_completion`` or ``chat.completion``."""

    def __init__(self, chat: bool, model: str) -> None:
        self.chat, self.model = chat, model
        self.id = new_id("chatcmpl" if chat else "cmpl")
        self.created = int(time.time())

    def _envelope(self, obj: str, choices: list[dict[str, Any]]) -> dict[str, Any]:
        return {"id": self.id, "object": obj, "created": self.created, "model": self.model, "choices": choices}

    def chunk(self, index: int, text: str | None = None, finish: str | None = None,
              role: bool = False) -> dict[str, Any]:
        """One stream chunk: new ``text`` of choice ``index``, or its ``finish`` reason."""
        if self.chat:
            delta: dict[str, Any] = {"role": "assistant", "content": ""} if role else (
                {"content": text} if text else {})
            choice = {"index": index, "delta": delta, "logprobs": None, "finish_reason": finish}
            return self._envelope("chat.completion.chunk", [choice])
        return self._envelope("text_completion", [{"index": index, "text": text or "", "logprobs": None,
                                                   "finish_reason": finish}])

    def usage_chunk(self, usage: dict[str, int]) -> dict[str, Any]:
        body = self._envelope("chat.completion.chunk" if self.chat else "text_completion", [])
        body["usage"] = usage
        return body

    def whole(self, texts: dict[int, str], finishes: dict[int, str], usage: dict[str, int]) -> dict[str, Any]:
        """The non-streamed answer."""
        if self.chat:
            choices = [{"index": i, "message": {"role": "assistant", "content": texts[i]}, "logprobs": None,
                        "finish_reason": finishes[i]} for i in sorted(texts)]
            body = self._envelope("chat.completion", choices)
        else:
            body = self._envelope("text_completion", [{"index": i, "text": texts[i], "logprobs": None,
                                                       "finish_reason": finishes[i]} for i in sorted(texts)])
        body["usage"] = usage
        return body


def usage(prompt_tokens: int, completion_tokens: int) -> dict[str, int]:
    return {"prompt_tokens": prompt_tokens, "completion_tokens": completion_tokens,
            "total_tokens": prompt_tokens + completion_tokens}
