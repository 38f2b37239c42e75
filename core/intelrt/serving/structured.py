"""Structured output by grammar-constrained decoding, with xgrammar: ``response_format``
``json_object`` / ``json_schema``, tool calls in the model's own format, ``allowed_token_ids``.

Each constraint is a ``TokenConstraint`` as the engine's sampler reads it
(``intelrt.decoding.sampling``): before a token is chosen, ``allowed_tokens_mask(vocab_size)``
(a bool tensor, ``True`` where a token may come next); after, ``advance(token_id)``;
``is_terminated()`` once the grammar is complete and its end token taken.

Why xgrammar (against outlines-core and lm-format-enforcer, all three tried here): it builds a
token mask in C++ from a byte-level view of the vocabulary (``TokenizerInfo.from_huggingface``
reads transformers' tokenizers as they are, where outlines-core needs the vocabulary re-encoded
by the caller), compiles a schema for a 151k vocabulary in well under a second and a mask in
microseconds (lm-format-enforcer walks the vocabulary in Python; its transformers integration no
longer imports under transformers 5), is the default backend of vLLM and SGLang, releases monthly,
and ships each model family's tool-call format (``xgrammar.get_model_structural_tag``), so the
format constrained is the one the chat template emits.
"""

from __future__ import annotations

import json
import logging
import threading
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from .errors import ApiError

if TYPE_CHECKING:
    import torch

    from .protocol import ChatCompletionRequest, ResponseFormat

log = logging.getLogger(__name__)


class GrammarConstraint:
    """One completion's grammar state (an ``xgrammar.GrammarMatcher``) as a ``TokenConstraint``."""

    def __init__(self, compiled: Any, vocab_size: int) -> None:
        import xgrammar as xgr

        self._matcher = xgr.GrammarMatcher(compiled)
        self._bitmask = xgr.allocate_token_bitmask(1, vocab_size)
        self.vocab_size = vocab_size

    def allowed_tokens_mask(self, vocab_size: int) -> torch.Tensor:
        import torch

        self._matcher.fill_next_token_bitmask(self._bitmask)
        bits = (self._bitmask[0, :, None] >> torch.arange(32, dtype=torch.int32)) & 1
        mask = bits.flatten().bool()[:vocab_size]
        if mask.numel() < vocab_size:  # ids past the tokenizer's (padding rows of the model's head)
            mask = torch.nn.functional.pad(mask, (0, vocab_size - mask.numel()), value=False)
        return mask

    def advance(self, token_id: int) -> None:
        if not self._matcher.accept_token(int(token_id)):
            raise ValueError(f"token {token_id} does not follow the grammar (the sampler must apply the mask)")

    def is_terminated(self) -> bool:
        return bool(self._matcher.is_terminated())


class AllowedTokens:
    """``allowed_token_ids`` (vLLM's extra) as a ``TokenConstraint``: the same set at every step."""

    def __init__(self, ids: tuple[int, ...]) -> None:
        self.ids = ids

    def allowed_tokens_mask(self, vocab_size: int) -> torch.Tensor:
        import torch

        mask = torch.zeros(vocab_size, dtype=torch.bool)
        mask[list(self.ids)] = True
        return mask

    def advance(self, token_id: int) -> None:
        """Nothing to remember: the set never changes."""

    def is_terminated(self) -> bool:
        return False


@dataclass(frozen=True)
class ToolFormat:
    """How a chat template writes tool calls: xgrammar's name of the format, its markers."""

    xgrammar_model: str
    begin: str
    end: str
    reasoning: bool
    """Whether the template has a reasoning block (``<think>``) before the answer."""


HERMES = "<tool_call>"
"""The marker of Hermes-style calls (Qwen 2.5 / 3, Hermes, many fine-tunes): ``<tool_call>`` then
``{"name": …, "arguments": {…}}`` then ``</tool_call>``."""


def tool_format(chat_template: str | None) -> ToolFormat | None:
    """The tool-call format ``chat_template`` uses, or ``None`` when it shows no tool support
    intelrt can constrain and parse (only Hermes-style ``<tool_call>`` JSON so far)."""
    if not chat_template or "tools" not in chat_template:
        return None
    if HERMES in chat_template and "</tool_call>" in chat_template:
        return ToolFormat("qwen_3", HERMES, "</tool_call>", "<think>" in chat_template)
    return None


_STRING_KEYWORDS = ("pattern", "format", "enum", "const")


def bounded_strings_without_control_characters(schema: Any) -> Any:
    """``schema`` with each length-bounded string (``minLength`` / ``maxLength``) written as the
    ``pattern`` of the same length over characters JSON allows unescaped.

    xgrammar 0.2.9 compiles a bounded string to ``"\"" [^\"\\\r\n]{min, max} "\""``
    (``Grammar.from_json_schema`` shows it), which lets raw control characters (U+0000-U+001F)
    through: the answer is then no JSON (``json.loads`` refuses it). Its ``pattern`` strings keep
    to the characters the pattern names, so the same bounds as a pattern keep the answer valid
    (quotes and backslashes stay out, as in xgrammar's own rule)."""
    if isinstance(schema, list):
        return [bounded_strings_without_control_characters(item) for item in schema]
    if not isinstance(schema, dict):
        return schema
    fixed = {key: bounded_strings_without_control_characters(value) for key, value in schema.items()}
    if fixed.get("type") == "string" and ("minLength" in fixed or "maxLength" in fixed) \
            and not any(key in fixed for key in _STRING_KEYWORDS):
        low, high = int(fixed.pop("minLength", 0)), fixed.pop("maxLength", None)
        fixed["pattern"] = f'^[^\\x00-\\x1f"\\\\]{{{low},{"" if high is None else int(high)}}}$'
    return fixed


class Grammars:
    """Compiled grammars for one tokenizer (xgrammar's compiler caches them); thread-safe."""

    def __init__(self, tokenizer: Any, vocab_size: int, stop_token_ids: tuple[int, ...]) -> None:
        self.tokenizer, self.vocab_size, self.stop_token_ids = tokenizer, vocab_size, stop_token_ids
        self._compiler: Any = None
        self._lock = threading.Lock()

    def _compiler_for(self) -> Any:
        with self._lock:
            if self._compiler is None:
                try:
                    import xgrammar as xgr
                except ImportError:
                    raise ApiError(501, "structured output and tool calls need xgrammar, which this server lacks: "
                                        "pip install 'intelrt[serve]'", "server_error",
                                   code="grammar_backend_missing") from None

                info = xgr.TokenizerInfo.from_huggingface(self.tokenizer, vocab_size=self.vocab_size,
                                                          stop_token_ids=list(self.stop_token_ids) or None)
                self._compiler = xgr.GrammarCompiler(info)
            return self._compiler

    def for_response_format(self, fmt: ResponseFormat) -> GrammarConstraint | None:
        """The constraint ``response_format`` asks for (``None`` for ``text``)."""
        if fmt.type == "text":
            return None
        compiler = self._compiler_for()
        if fmt.type == "json_object":
            return GrammarConstraint(compiler.compile_json_schema('{"type": "object"}', any_whitespace=False,
                                                                  strict_mode=False), self.vocab_size)
        assert fmt.json_schema is not None and fmt.json_schema.schema_ is not None  # protocol's check
        try:
            # Compact JSON (vLLM's --disable-any-whitespace): a weak model cannot pad it with
            # whitespace until max_tokens.
            schema = bounded_strings_without_control_characters(fmt.json_schema.schema_)
            compiled = compiler.compile_json_schema(json.dumps(schema), any_whitespace=False,
                                                    strict_mode=fmt.json_schema.strict is not False)
        except Exception as exc:  # noqa: BLE001 - xgrammar's refusal of the schema, for the client
            raise ApiError(400, f"response_format.json_schema.schema cannot be compiled to a grammar: {exc}",
                           param="response_format.json_schema.schema") from None
        return GrammarConstraint(compiled, self.vocab_size)

    def for_tools(self, body: ChatCompletionRequest, form: ToolFormat) -> GrammarConstraint | None:
        """The constraint of ``body``'s tools and tool_choice in ``form``: ``required`` and a named
        function force calls; ``auto`` leaves text free and constrains a call once its marker
        starts; ``none`` constrains nothing."""
        import xgrammar as xgr

        choice = body.effective_tool_choice
        if choice == "none":
            return None
        tools: list[Any] = [bounded_strings_without_control_characters(tool.model_dump(by_alias=True,
                                                                                       exclude_none=True))
                            for tool in body.tools or []]
        asked: Any = choice if isinstance(choice, str) else choice.model_dump()
        try:
            tag = xgr.get_model_structural_tag(form.xgrammar_model, tools=tools, tool_choice=asked,
                                               reasoning="auto" if form.reasoning else "disabled",
                                               parallel_tool_calls=body.parallel_tool_calls is not False,
                                               max_whitespace_cnt=1)
            compiled = self._compiler_for().compile_structural_tag(tag)
        except Exception as exc:  # noqa: BLE001 - a parameters schema xgrammar cannot compile
            raise ApiError(400, f"tools cannot be compiled to a grammar: {exc}", param="tools") from None
        return GrammarConstraint(compiled, self.vocab_size)
