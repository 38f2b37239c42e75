"""New tokens → the text a client receives, piece by piece, cut at a stop string.

Tokens are decoded incrementally with the tokenizer's own streaming decoder
(``tokenizers.decoders.DecodeStream``, what ``transformers serve`` uses): a character split over
several tokens comes out whole, and the pieces join to ``tokenizer.decode(tokens,
skip_special_tokens=True)`` — the text :meth:`Loaded.generate` returns (``skip_special_tokens``
can be turned off per request). Text that could be the
start of a stop string is held back until it is known not to be one; the stop string itself and
everything after it never reach the client.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any


class _FullDecode:
    """For tokenizers without a Rust backend: decode everything so far, hand out what is new
    (held back while it ends in an incomplete character)."""

    def __init__(self, tokenizer: Any, skip_special_tokens: bool) -> None:
        self.tokenizer, self.sent, self.skip = tokenizer, 0, skip_special_tokens
        self.tokens: list[int] = []

    def step(self, tokens: list[int]) -> str:
        self.tokens.extend(tokens)
        text = self.tokenizer.decode(self.tokens, skip_special_tokens=self.skip)
        if text.endswith("\ufffd"):
            return ""
        new, self.sent = text[self.sent:], len(text)
        return new


class _StreamDecode:
    def __init__(self, backend: Any, skip_special_tokens: bool) -> None:
        from tokenizers.decoders import DecodeStream

        self.backend = backend
        self.stream = DecodeStream(skip_special_tokens=skip_special_tokens)

    def step(self, tokens: list[int]) -> str:
        pieces = [self.stream.step(self.backend, token) for token in tokens]
        return "".join(p for p in pieces if p)


class TextAssembler:
    """One completion's text: ``feed`` it new tokens, send what it returns, and at the end what
    ``flush`` returns; ``stopped`` says a stop string was met (then nothing more comes).
    ``skip_special_tokens`` (vLLM's field of that name): leave special tokens' text out;
    ``include_stop``: the stop string that ended the text is part of it (vLLM's
    ``include_stop_str_in_output``)."""

    def __init__(self, tokenizer: Any, stop: Sequence[str] = (), *, skip_special_tokens: bool = True,
                 include_stop: bool = False) -> None:
        backend = getattr(tokenizer, "backend_tokenizer", None)
        self.tokenizer, self.skip, self.include_stop = tokenizer, skip_special_tokens, include_stop
        self._decode: _StreamDecode | _FullDecode = _StreamDecode(backend, skip_special_tokens) \
            if backend is not None else _FullDecode(tokenizer, skip_special_tokens)
        self.stop = tuple(s for s in stop if s)
        self.stopped = False
        self._tokens: list[int] = []
        self._decoded = ""
        self._held = ""

    def feed(self, tokens: list[int]) -> str:
        """The text these tokens add that is safe to send now."""
        if self.stopped or not tokens:
            return ""
        self._tokens.extend(tokens)
        new = self._decode.step(tokens)
        self._decoded += new
        return self._release(new, final=False)

    def flush(self) -> str:
        """The rest, at the end of the completion: what was held back as a possible stop string,
        and a character left incomplete by the last tokens (as ``tokenizer.decode`` writes it)."""
        if self.stopped:
            return ""
        whole = self.tokenizer.decode(self._tokens, skip_special_tokens=self.skip)
        rest = whole[len(self._decoded):] if whole.startswith(self._decoded) else ""
        return self._release(rest, final=True)

    def _release(self, new: str, final: bool) -> str:
        text = self._held + new
        self._held = ""
        found = [(i, s) for i, s in ((text.find(s), s) for s in self.stop) if i >= 0]
        if found:
            self.stopped = True
            cut, stop = min(found)
            return text[:cut + len(stop)] if self.include_stop else text[:cut]
        if final:
            return text
        # Only prefixes no longer than the text can be what it ends with: a stop string of a million
        # characters would otherwise cost a million slices per token, on the decode thread.
        keep = max((k for s in self.stop for k in range(1, min(len(s), len(text) + 1)) if text.endswith(s[:k])),
                   default=0)
        self._held = text[len(text) - keep:] if keep else ""
        return text[:len(text) - keep]
