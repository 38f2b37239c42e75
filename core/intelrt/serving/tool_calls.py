"""A chat answer's text → OpenAI's ``tool_calls``, in the format the chat template emits
(:class:`~intelrt.serving.structured.ToolFormat`; Hermes-style ``<tool_call>{"name", "arguments"}
</tool_call>`` as Qwen's templates write it, what vLLM's ``hermes`` tool parser reads).

While a streamed answer runs, :class:`ToolCallSplitter` sends text up to a call's marker (text
that may be the start of one is held back, as a stop string's is) and keeps the rest; the calls
are parsed when the answer ends.
"""

from __future__ import annotations

import json
import re
import uuid
from dataclasses import dataclass, field
from typing import Any

from .structured import ToolFormat


def call_id() -> str:
    """A tool call's id (vLLM's ``random_tool_call_id`` shape)."""
    return f"chatcmpl-tool-{uuid.uuid4().hex}"


def parse_tool_calls(text: str, form: ToolFormat) -> tuple[str | None, list[dict[str, Any]]]:
    """(the content outside the calls — ``None`` when there is none —, the calls) of ``text``.
    A call whose JSON does not parse stays in the content, as the model wrote it."""
    pattern = re.compile(re.escape(form.begin) + r"\s*(.*?)\s*(?:" + re.escape(form.end) + r"|$)", re.DOTALL)
    calls: list[dict[str, Any]] = []
    kept: list[str] = []
    last = 0
    for match in pattern.finditer(text):
        try:
            found = json.loads(match.group(1))
        except ValueError:
            continue
        if not isinstance(found, dict) or not isinstance(found.get("name"), str):
            continue
        arguments = found.get("arguments", found.get("parameters", {}))
        kept.append(text[last:match.start()])
        last = match.end()
        calls.append({"id": call_id(), "type": "function",
                      "function": {"name": found["name"],
                                   "arguments": arguments if isinstance(arguments, str) else json.dumps(arguments)}})
    kept.append(text[last:])
    content = "".join(kept).strip()
    return (content or None) if calls else text, calls


@dataclass
class ToolCallSplitter:
    """One streamed choice's text, split into what may go out now and what a call may hold."""

    form: ToolFormat
    _held: str = ""
    _calls_started: bool = False
    text: str = field(default="")

    def feed(self, new: str) -> str:
        """The part of ``new`` that is content for certain (sent now)."""
        self.text += new
        if self._calls_started:
            return ""
        pending = self._held + new
        at = pending.find(self.form.begin)
        if at >= 0:
            self._calls_started = True
            self._held = ""
            return pending[:at]
        keep = max((k for k in range(1, len(self.form.begin)) if pending.endswith(self.form.begin[:k])), default=0)
        self._held = pending[len(pending) - keep:] if keep else ""
        return pending[:len(pending) - keep]

    def finish(self) -> tuple[str, list[dict[str, Any]]]:
        """(content not sent yet, the calls) when the answer ends."""
        if not self._calls_started:
            held, self._held = self._held, ""
            return held, []
        start = self.text.find(self.form.begin)
        content, calls = parse_tool_calls(self.text[start:], self.form)
        if not calls:  # not a call after all: the text goes out as the model wrote it
            return self.text[start:], []
        return content or "", calls
