"""The OpenAI API as this server speaks it: request bodies (validated by pydantic, strictly: ``"5"``
is not a number, ``"yes"`` not a boolean), their checks across fields, and the fields it refuses.

Every field of OpenAI's API and of ``vllm serve``'s extras (``vllm/entrypoints/openai/protocol.py``:
``CompletionRequest``, ``ChatCompletionRequest``) is either applied or refused with ``400`` naming
it and the reason — unless it has its neutral value (``best_of: 1``, ``priority: 0`` …): nothing a
client asks for is dropped without a word. Unknown fields are refused too. ``docs/serving.md``
has the table; :data:`REFUSED` is its source for the refused ones.
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator

from .errors import ApiError

MAX_STOP_SEQUENCES = 4
"""OpenAI's limit on ``stop`` sequences per request."""
MAX_TOP_LOGPROBS = 20
"""The most alternatives per token ``logprobs`` / ``top_logprobs`` may ask for (OpenAI's chat limit,
vLLM's default ``max_logprobs``)."""
LOGIT_BIAS_BOUND = 100.0
"""OpenAI's bounds on a ``logit_bias`` value: -100 .. 100."""
INT64 = 2**63
"""Seeds are 64-bit signed integers (vLLM's bounds, ``torch.iinfo(torch.long)``)."""

#: Fields intelrt serve does not apply, with why, and the value that asks for nothing (accepted).
REFUSED: dict[str, tuple[Any, str]] = {
    "suffix": (None, "no fill-in-the-middle: the served model's template has no suffix slot"),
    "use_beam_search": (False, "beam search is not part of intelrt's decode engine"),
    "length_penalty": (1.0, "only beam search uses it, and intelrt's engine has none"),
    "min_tokens": (0, "the engine does not hold back end-of-sequence tokens"),
    "prompt_logprobs": (None, "the engine's prompt pass returns no per-token log-probabilities"),
    "bad_words": ([], "the engine bans no word sequences; use logit_bias with the words' token ids"),
    "spaces_between_special_tokens": (True, "the tokenizer's own streaming decoder decides the spaces"),
    "guided_json": (None, "use response_format={'type': 'json_schema', 'json_schema': {...}}"),
    "guided_regex": (None, "regular-expression grammars are not served; use response_format json_schema"),
    "guided_choice": (None, "use response_format json_schema with an enum"),
    "guided_grammar": (None, "free grammars are not served; use response_format json_schema"),
    "structural_tag": (None, "use tools (their calls are constrained) or response_format json_schema"),
    "guided_decoding_backend": (None, "intelrt serve has one grammar backend (xgrammar)"),
    "guided_whitespace_pattern": (None, "xgrammar's JSON grammar decides the whitespace"),
    "priority": (0, "the queue is first come, first served"),
    "logits_processors": (None, "the server runs no code a request names"),
    "return_tokens_as_token_ids": (None, "logprobs name tokens by their text"),
    "cache_salt": (None, "the engine has no prefix cache to salt"),
    "kv_transfer_params": (None, "no disaggregated prefill"),
    "vllm_xargs": (None, "no engine extensions take extra arguments"),
    "mm_processor_kwargs": (None, "the server decodes text only"),
    "functions": (None, "deprecated by OpenAI: send tools"),
    "function_call": (None, "deprecated by OpenAI: send tool_choice"),
    "audio": (None, "the server decodes text only"),
    "modalities": (["text"], "the server decodes text only"),
    "prediction": (None, "no speculative decoding from a predicted output"),
    "web_search_options": (None, "the server searches nothing"),
    "store": (False, "the server stores no completions"),
    "metadata": (None, "the server stores no completions to tag"),
    "reasoning_effort": (None, "the server runs no reasoning parser"),
    "service_tier": ("auto", "one tier"),
    "include_reasoning": (True, "the server runs no reasoning parser"),
}
#: Neutral values that also mean "nothing asked" (``None`` for any field above, ``default`` tier).
_ALSO_NEUTRAL: dict[str, tuple[Any, ...]] = {"service_tier": ("default",), "store": (False,), "modalities": ([],)}


class _Body(BaseModel):
    """Strict types (no ``"5"`` for 5), unknown fields refused."""

    model_config = ConfigDict(extra="forbid", strict=True)


class StreamOptions(_Body):
    include_usage: bool = False
    continuous_usage_stats: bool = False


class JsonSchemaFormat(_Body):
    name: str = Field(min_length=1, max_length=64)
    description: str | None = None
    schema_: dict[str, Any] | None = Field(None, alias="schema")
    strict: bool | None = None


class ResponseFormat(_Body):
    type: Literal["text", "json_object", "json_schema"]
    json_schema: JsonSchemaFormat | None = None


class FunctionDefinition(_Body):
    name: str = Field(min_length=1, max_length=64, pattern=r"^[A-Za-z0-9_\-.]+$")
    description: str | None = None
    parameters: dict[str, Any] | None = None
    strict: bool | None = None


class Tool(_Body):
    type: Literal["function"]
    function: FunctionDefinition


class NamedFunction(_Body):
    name: str


class NamedToolChoice(_Body):
    type: Literal["function"]
    function: NamedFunction


class _Generation(_Body):
    """Fields common to ``/v1/completions`` and ``/v1/chat/completions``."""

    model: str
    max_tokens: int | None = Field(None, ge=1)
    temperature: float | None = Field(None, ge=0, le=2)
    top_p: float | None = Field(None, gt=0, le=1)
    n: int = Field(1, ge=1)
    stream: bool = False
    stream_options: StreamOptions | None = None
    stop: str | list[str] | None = None
    seed: int | None = Field(None, ge=-INT64, lt=INT64)
    user: str | None = None
    presence_penalty: float | None = Field(None, ge=-2, le=2)
    frequency_penalty: float | None = Field(None, ge=-2, le=2)
    logit_bias: dict[str, float] | None = None
    response_format: ResponseFormat | None = None
    # vLLM's extras (``extra_body`` of the openai client)
    top_k: int | None = Field(None, ge=-1)
    min_p: float | None = Field(None, ge=0, le=1)
    repetition_penalty: float | None = Field(None, gt=0, le=2)
    stop_token_ids: list[int] | None = None
    ignore_eos: bool = False
    skip_special_tokens: bool = True
    include_stop_str_in_output: bool = False
    allowed_token_ids: list[int] | None = None
    truncate_prompt_tokens: int | None = Field(None, ge=1)
    request_id: str | None = Field(None, max_length=256)
    best_of: int | None = Field(None, ge=1)
    # refused unless neutral (REFUSED says why)
    suffix: str | None = None
    use_beam_search: bool = False
    length_penalty: float = 1.0
    min_tokens: int = 0
    prompt_logprobs: int | None = None
    bad_words: list[str] = Field(default_factory=list)
    spaces_between_special_tokens: bool = True
    guided_json: Any = None
    guided_regex: str | None = None
    guided_choice: list[str] | None = None
    guided_grammar: str | None = None
    structural_tag: str | None = None
    guided_decoding_backend: str | None = None
    guided_whitespace_pattern: str | None = None
    priority: int = 0
    logits_processors: list[Any] | None = None
    return_tokens_as_token_ids: bool | None = None
    cache_salt: str | None = None
    kv_transfer_params: dict[str, Any] | None = None
    vllm_xargs: dict[str, Any] | None = None

    def check(self) -> None:
        """What pydantic's per-field checks cannot see: refused fields, bounds inside a mapping,
        fields that need each other."""
        for name, (neutral, why) in REFUSED.items():
            value = getattr(self, name, neutral)
            if value is not None and value != neutral and value not in _ALSO_NEUTRAL.get(name, ()):
                raise ApiError(400, f"{name}={value!r} is not supported by intelrt serve: {why}", param=name)
        if isinstance(self.stop, list) and len(self.stop) > MAX_STOP_SEQUENCES:
            raise ApiError(400, f"stop: at most {MAX_STOP_SEQUENCES} stop sequences, got {len(self.stop)}",
                           param="stop")
        if "" in self.stops:  # it would match before every token: the stop would be dropped without a word
            raise ApiError(400, "stop: an empty string is not a stop sequence (it would match everywhere); remove it",
                           param="stop")
        if self.stream_options is not None:
            if not self.stream:
                raise ApiError(400, "stream_options needs stream=true", param="stream_options")
            if self.stream_options.continuous_usage_stats:
                raise ApiError(400, "stream_options.continuous_usage_stats=True is not supported by intelrt serve: "
                                    "usage comes once, at the end (include_usage)",
                               param="stream_options.continuous_usage_stats")
        for key, bias in (self.logit_bias or {}).items():
            if not key.strip().lstrip("-").isdigit():
                raise ApiError(400, f"logit_bias: key {key!r} is not a token id (keys are token ids as strings, "
                                    "e.g. {\"50256\": -100})", param="logit_bias")
            if not -LOGIT_BIAS_BOUND <= bias <= LOGIT_BIAS_BOUND:
                raise ApiError(400, f"logit_bias[{key!r}]={bias}: a bias is between -100 and 100",
                               param="logit_bias")
        if self.best_of is not None and self.best_of != self.n:
            raise ApiError(400, f"best_of={self.best_of} is not supported by intelrt serve: choosing the best of "
                                "more completions than n needs ranking them, which the server does not do; leave "
                                "it out (or equal to n)", param="best_of")
        fmt = self.response_format
        if fmt is not None and fmt.type == "json_schema" and (fmt.json_schema is None or fmt.json_schema.schema_
                                                              is None):
            raise ApiError(400, "response_format: type json_schema needs json_schema.schema (a JSON schema object)",
                           param="response_format.json_schema")

    @property
    def stops(self) -> tuple[str, ...]:
        if self.stop is None:
            return ()
        return (self.stop,) if isinstance(self.stop, str) else tuple(self.stop)

    @property
    def top_logprobs_count(self) -> int | None:
        """How many alternatives per token the answer lists (``0``: the chosen token's only;
        ``None``: no logprobs at all)."""
        raise NotImplementedError

    @property
    def limit(self) -> int | None:
        return self.max_tokens


Prompt = str | list[str] | list[int] | list[list[int]]


class CompletionRequest(_Generation):
    """``POST /v1/completions``: a prompt (text, token ids, or a list of either) to continue."""

    prompt: Prompt
    logprobs: int | None = Field(None, ge=0, le=MAX_TOP_LOGPROBS)
    echo: bool = False
    add_special_tokens: bool = True

    @field_validator("prompt", mode="before")
    @classmethod
    def _prompt_shape(cls, value: Any) -> Any:
        """One message for every wrong shape (pydantic's would list each union member's complaint)."""
        def ids(item: Any) -> bool:
            return isinstance(item, list) and all(isinstance(t, int) and not isinstance(t, bool) for t in item)

        if not (isinstance(value, str) or ids(value) or isinstance(value, list) and (
                all(isinstance(p, str) for p in value) or all(ids(p) for p in value))):
            raise ValueError("prompt must be a string, a list of strings, a list of token ids or a list of token-id "
                             "lists")
        return value

    def check(self) -> None:
        super().check()
        value = self.prompt
        if isinstance(value, list) and value and isinstance(value[0], list) and not all(value):
            raise ApiError(400, "prompt: a token-id list is empty", param="prompt")
        if not value:
            raise ApiError(400, "prompt is empty", param="prompt")

    @property
    def top_logprobs_count(self) -> int | None:
        return self.logprobs


class ContentPart(BaseModel):
    """A part of a message's content: ``text`` is read; other kinds are refused by ``check``."""

    model_config = ConfigDict(extra="allow", strict=True)

    type: str
    text: str | None = None


class FunctionCall(_Body):
    name: str
    arguments: str


class ToolCall(_Body):
    id: str
    type: Literal["function"]
    function: FunctionCall


class ChatMessage(_Body):
    role: Literal["system", "developer", "user", "assistant", "tool"]
    content: str | list[ContentPart] | None = None
    name: str | None = None
    tool_calls: list[ToolCall] | None = None
    tool_call_id: str | None = None
    refusal: str | None = None
    reasoning_content: str | None = None

    def text(self) -> str:
        if self.content is None:
            return ""
        return self.content if isinstance(self.content, str) else "".join(p.text or "" for p in self.content)

    def for_template(self) -> dict[str, Any]:
        """The message as chat templates read it (transformers' and vLLM's layout: ``tool_calls``
        with ``function.arguments`` as an object, ``tool_call_id`` on a tool's answer)."""
        import json

        message: dict[str, Any] = {"role": self.role, "content": self.text()}
        if self.name:
            message["name"] = self.name
        if self.tool_calls:
            calls = []
            for call in self.tool_calls:
                try:
                    arguments: Any = json.loads(call.function.arguments)
                except ValueError:
                    arguments = call.function.arguments
                calls.append({"id": call.id, "type": "function",
                              "function": {"name": call.function.name, "arguments": arguments}})
            message["tool_calls"] = calls
        if self.tool_call_id:
            message["tool_call_id"] = self.tool_call_id
        return message


class ChatCompletionRequest(_Generation):
    """``POST /v1/chat/completions``: messages, rendered with the tokenizer's chat template."""

    messages: list[ChatMessage] = Field(min_length=1)
    max_completion_tokens: int | None = Field(None, ge=1)
    logprobs: bool = False
    top_logprobs: int | None = Field(None, ge=0, le=MAX_TOP_LOGPROBS)
    tools: list[Tool] | None = None
    tool_choice: Literal["none", "auto", "required"] | NamedToolChoice | None = None
    parallel_tool_calls: bool | None = None
    # vLLM's extras
    chat_template: str | None = None
    chat_template_kwargs: dict[str, Any] | None = None
    add_generation_prompt: bool = True
    continue_final_message: bool = False
    add_special_tokens: bool = False
    documents: list[dict[str, str]] | None = None
    echo: bool = False
    # refused unless neutral
    functions: list[Any] | None = None
    function_call: Any = None
    audio: dict[str, Any] | None = None
    modalities: list[str] | None = None
    prediction: dict[str, Any] | None = None
    web_search_options: dict[str, Any] | None = None
    store: bool | None = None
    metadata: dict[str, str] | None = None
    reasoning_effort: str | None = None
    service_tier: str | None = None
    include_reasoning: bool = True

    def check(self) -> None:
        super().check()
        if self.max_tokens is not None and self.max_completion_tokens is not None \
                and self.max_tokens != self.max_completion_tokens:
            raise ApiError(400, "max_tokens and max_completion_tokens disagree; send one of them",
                           param="max_completion_tokens")
        if self.top_logprobs and not self.logprobs:
            raise ApiError(400, "top_logprobs needs logprobs=true", param="top_logprobs")
        if self.echo:
            raise ApiError(400, "echo=True is not supported by intelrt serve on chat completions: send the text to "
                                "continue as the last assistant message with continue_final_message=true",
                           param="echo")
        if self.continue_final_message and self.add_generation_prompt:
            raise ApiError(400, "continue_final_message=true needs add_generation_prompt=false (the last message "
                                "is continued, not answered)", param="continue_final_message")
        for i, message in enumerate(self.messages):
            if isinstance(message.content, list):
                for j, part in enumerate(message.content):
                    where = f"messages[{i}].content[{j}]"
                    if part.type != "text":
                        raise ApiError(400, f"{where}: content parts of type {part.type!r} are not supported by "
                                            "intelrt serve: it decodes text only (send type 'text')",
                                       param=f"{where}.type")
                    if part.text is None:
                        raise ApiError(400, f"{where}: a text part needs text", param=f"{where}.text")
            if message.tool_calls and message.role != "assistant":
                raise ApiError(400, f"messages[{i}]: only assistant messages carry tool_calls",
                               param=f"messages[{i}].tool_calls")
            if message.role == "tool" and not message.tool_call_id:
                raise ApiError(400, f"messages[{i}]: a tool message needs tool_call_id (the id of the call it "
                                    "answers)", param=f"messages[{i}].tool_call_id")
        choice = self.tool_choice
        if choice is not None and choice != "none" and not self.tools:
            raise ApiError(400, "tool_choice needs tools", param="tool_choice")
        if isinstance(choice, NamedToolChoice) and choice.function.name not in {t.function.name for t in
                                                                                self.tools or []}:
            raise ApiError(400, f"tool_choice names the function {choice.function.name!r}, which is not among tools",
                           param="tool_choice")
        names = [t.function.name for t in self.tools or []]
        if len(set(names)) != len(names):
            raise ApiError(400, "tools: two functions share a name", param="tools")
        if self.tools and self.response_format is not None and self.response_format.type != "text" \
                and self.tool_choice != "none":
            raise ApiError(400, "response_format and tools cannot constrain one answer together: send one, or "
                                "tool_choice='none'", param="response_format")

    @property
    def limit(self) -> int | None:
        return self.max_completion_tokens or self.max_tokens

    @property
    def top_logprobs_count(self) -> int | None:
        return (self.top_logprobs or 0) if self.logprobs else None

    @property
    def effective_tool_choice(self) -> str | NamedToolChoice:
        """OpenAI's default: ``auto`` with tools, ``none`` without."""
        if not self.tools:
            return "none"
        return self.tool_choice if self.tool_choice is not None else "auto"


class EmbeddingRequest(_Body):
    """``POST /v1/embeddings``: texts or token ids to embed."""

    model: str
    input: str | list[str] | list[int] | list[list[int]]
    encoding_format: Literal["float", "base64"] = "float"
    dimensions: int | None = Field(None, ge=1)
    user: str | None = None
    truncate_prompt_tokens: int | None = Field(None, ge=1)
    normalize: bool | None = None
    add_special_tokens: bool = True

    def check(self) -> None:
        if not self.input or isinstance(self.input, list) and any(isinstance(i, list) and not i for i in self.input):
            raise ApiError(400, "input is empty", param="input")


class TokenizeRequest(_Body):
    """``POST /tokenize`` (vLLM's): a prompt, or chat messages rendered with the chat template."""

    model: str | None = None
    prompt: str | None = None
    messages: list[ChatMessage] | None = None
    add_special_tokens: bool | None = None
    add_generation_prompt: bool = True
    continue_final_message: bool = False
    return_token_strs: bool = False
    chat_template: str | None = None
    chat_template_kwargs: dict[str, Any] | None = None
    tools: list[Tool] | None = None

    def check(self) -> None:
        if (self.prompt is None) == (self.messages is None):
            raise ApiError(400, "send prompt or messages (one of them)", param="prompt")


class DetokenizeRequest(_Body):
    """``POST /detokenize`` (vLLM's): token ids back to text."""

    model: str | None = None
    tokens: list[int]

    def check(self) -> None:
        pass


class LoadAdapterRequest(_Body):
    """``POST /v1/load_lora_adapter`` (vLLM's)."""

    lora_name: str = Field(min_length=1, max_length=128)
    lora_path: str = Field(min_length=1)

    def check(self) -> None:
        pass


class UnloadAdapterRequest(_Body):
    """``POST /v1/unload_lora_adapter`` (vLLM's)."""

    lora_name: str = Field(min_length=1)
    lora_int_id: int | None = None

    def check(self) -> None:
        pass
