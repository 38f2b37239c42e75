"""The bodies the server answers with: ``text_completion`` and ``chat.completion`` (whole or as
stream chunks), their ``logprobs`` in each endpoint's own layout, ``tool_calls``, ``usage``.

Layouts follow OpenAI's API reference and vLLM's ``protocol.py`` (``CompletionLogProbs``:
``tokens``, ``token_logprobs``, ``top_logprobs``, ``text_offset``; ``ChatCompletionLogProbs``:
``content`` of ``{token, logprob, bytes, top_logprobs}``), from the engine's
:class:`~intelrt.decoding.sampling.SampledToken` per generated token.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from ..decoding.sampling import SampledToken


def new_id(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex}"


def usage(prompt_tokens: int, completion_tokens: int) -> dict[str, int]:
    return {"prompt_tokens": prompt_tokens, "completion_tokens": completion_tokens,
            "total_tokens": prompt_tokens + completion_tokens}


TokenText = Callable[[int], str]
"""A token id → its text (``tokenizer.decode([id])``, as vLLM names tokens in logprobs)."""


def _finite(value: float | None) -> float:
    """JSON has no infinities: a token the sampler could not pick (-inf) reads as vLLM's -9999."""
    return value if value is not None and value > -9999.0 else -9999.0


def _by_text(alternatives: Sequence[Any], text_of: TokenText) -> dict[str, float]:
    """The legacy ``top_logprobs`` dict: alternatives best first, keyed by their text. Tokens that
    decode alike (byte pieces all reading '\ufffd') share a key, which keeps the best one's logprob."""
    found: dict[str, float] = {}
    for alternative in alternatives:
        found.setdefault(text_of(alternative.token_id), _finite(alternative.logprob))
    return found


def completion_logprobs(entries: Sequence[SampledToken], text_of: TokenText, offset: int = 0) -> dict[str, Any]:
    """``/v1/completions``'s ``logprobs`` object; ``offset``: where the first token's text starts in
    the choice's text (after an echoed prompt, or earlier chunks)."""
    tokens, token_logprobs, tops, offsets = [], [], [], []
    for entry in entries:
        text = text_of(entry.token_id)
        tokens.append(text)
        token_logprobs.append(_finite(entry.logprob))
        tops.append(_by_text(entry.top_logprobs, text_of) if entry.top_logprobs else None)
        offsets.append(offset)
        offset += len(text)
    return {"tokens": tokens, "token_logprobs": token_logprobs, "top_logprobs": tops, "text_offset": offsets}


def _chat_token(token_id: int, logprob: float | None, text_of: TokenText) -> dict[str, Any]:
    text = text_of(token_id)
    return {"token": text, "logprob": _finite(logprob), "bytes": list(text.encode("utf-8", errors="replace"))}


def chat_logprobs(entries: Sequence[SampledToken], text_of: TokenText, top: int) -> dict[str, Any]:
    """``/v1/chat/completions``'s ``logprobs`` object (``top``: alternatives listed per token)."""
    content = []
    for entry in entries:
        item = _chat_token(entry.token_id, entry.logprob, text_of)
        item["top_logprobs"] = [_chat_token(t.token_id, t.logprob, text_of) for t in entry.top_logprobs[:top]]
        content.append(item)
    return {"content": content}


@dataclass
class ChoiceResult:
    """What one choice produced so far."""

    index: int
    text: str = ""
    finish: str | None = None
    tokens: int = 0
    logprobs: list[SampledToken] = field(default_factory=list)
    tool_calls: list[dict[str, Any]] = field(default_factory=list)


class Shape:
    """How one endpoint's responses look: ``text_completion`` or ``chat.completion``; ``top``: the
    alternatives per token its logprobs list (``None``: no logprobs)."""

    def __init__(self, chat: bool, model: str, text_of: TokenText, top: int | None = None,
                 response_id: str | None = None) -> None:
        self.chat, self.model, self.text_of, self.top = chat, model, text_of, top
        self.id = response_id or new_id("chatcmpl" if chat else "cmpl")
        self.created = int(time.time())

    def _envelope(self, obj: str, choices: list[dict[str, Any]]) -> dict[str, Any]:
        return {"id": self.id, "object": obj, "created": self.created, "model": self.model, "choices": choices}

    def _logprobs(self, entries: Sequence[SampledToken], offset: int = 0) -> dict[str, Any] | None:
        if self.top is None:
            return None
        if self.chat:
            return chat_logprobs(entries, self.text_of, self.top)
        return completion_logprobs(entries, self.text_of, offset)

    def role_chunk(self, index: int) -> dict[str, Any]:
        choice = {"index": index, "delta": {"role": "assistant", "content": ""}, "logprobs": None,
                  "finish_reason": None}
        return self._envelope("chat.completion.chunk", [choice])

    def chunk(self, index: int, text: str | None = None, finish: str | None = None,
              entries: Sequence[SampledToken] = (), offset: int = 0,
              tool_calls: list[dict[str, Any]] | None = None) -> dict[str, Any]:
        """One stream chunk: new ``text`` of choice ``index`` (with its tokens' logprobs), or its
        ``finish`` reason, or its ``tool_calls`` (whole, as one delta each)."""
        logprobs = self._logprobs(entries, offset) if entries else None
        if self.chat:
            delta: dict[str, Any] = {"content": text} if text else {}
            if tool_calls:
                delta["tool_calls"] = [{"index": i, **call} for i, call in enumerate(tool_calls)]
            choice = {"index": index, "delta": delta, "logprobs": logprobs, "finish_reason": finish}
            return self._envelope("chat.completion.chunk", [choice])
        return self._envelope("text_completion", [{"index": index, "text": text or "", "logprobs": logprobs,
                                                   "finish_reason": finish}])

    def usage_chunk(self, counts: dict[str, int]) -> dict[str, Any]:
        body = self._envelope("chat.completion.chunk" if self.chat else "text_completion", [])
        body["usage"] = counts
        return body

    def whole(self, results: Sequence[ChoiceResult], counts: dict[str, int],
              prefix: dict[int, str] | None = None) -> dict[str, Any]:
        """The non-streamed answer (``prefix``: an echoed prompt per choice, before its text)."""
        choices = []
        for result in sorted(results, key=lambda r: r.index):
            if self.chat:
                message: dict[str, Any] = {"role": "assistant", "content": result.text}
                if result.tool_calls:
                    message["content"] = result.text or None
                    message["tool_calls"] = result.tool_calls
                choices.append({"index": result.index, "message": message,
                                "logprobs": self._logprobs(result.logprobs), "finish_reason": result.finish})
            else:
                head = (prefix or {}).get(result.index, "")
                choices.append({"index": result.index, "text": head + result.text,
                                "logprobs": self._logprobs(result.logprobs, len(head)),
                                "finish_reason": result.finish})
        body = self._envelope("chat.completion" if self.chat else "text_completion", choices)
        body["usage"] = counts
        return body
