"""Structured output, tool calls and sampling fields (issue 28).

Two layers:

- the HTTP layer's own parts, on the real tiny model and tokenizer: the request → SamplingParams
  translation; xgrammar constraints (``TokenConstraint``) steering the model's real logits — a
  json_schema answer validates against its schema for 50 seeded prompts; a tool call decoded
  under the grammar, parsed into OpenAI's ``tool_calls`` and rendered back through a chat
  template that has tools (Hermes / Qwen layout, built here: no hub);
- the same through the ``openai`` client against a real server, once this build's decode engine
  applies ``SamplingParams`` (issue 27's per-row sampler); skipped, with the reason, before.
"""

from __future__ import annotations

import json
import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import jsonschema
import openai
import pytest
from test_serve import NAME, PROMPTS, Server
from varied_weights import varied_copy

import intelrt
from intelrt.serving import create_app
from intelrt.serving.errors import ApiError
from intelrt.serving.protocol import ChatCompletionRequest, CompletionRequest
from intelrt.serving.sampling_fields import GenerationDefaults, sampling_params
from intelrt.serving.structured import Grammars, tool_format
from intelrt.serving.tool_calls import ToolCallSplitter, parse_tool_calls

SCHEMA = {"type": "object", "additionalProperties": False, "required": ["name", "age", "ok"],
          "properties": {"name": {"type": "string", "pattern": "^[A-Za-z ]{1,8}$"},
                         "age": {"type": "integer", "minimum": 0, "maximum": 120},
                         "ok": {"type": "boolean"},
                         "tags": {"type": "array", "items": {"enum": ["gpu", "hpu"]}, "maxItems": 3}}}
WEATHER = {"type": "function", "function": {
    "name": "get_weather", "description": "Weather in a city",
    "parameters": {"type": "object", "additionalProperties": False, "required": ["city"],
                   "properties": {"city": {"type": "string", "pattern": "^[A-Z][a-z]{0,9}$"},
                                  "unit": {"enum": ["celsius", "fahrenheit"]}}}}}
TIME = {"type": "function", "function": {"name": "get_time", "parameters": {
    "type": "object", "additionalProperties": False, "properties": {"zone": {"enum": ["UTC", "CET"]}},
    "required": ["zone"]}}}
#: A Hermes-style template with tools, as Qwen 2.5's writes them (cut to what the test needs).
TOOLS_TEMPLATE = (
    "{%- if tools %}<|im_start|>system\n# Tools\n<tools>\n{%- for tool in tools %}\n{{ tool | tojson }}"
    "{%- endfor %}\n</tools>\nFor each function call, return a json object with function name and arguments "
    "within <tool_call></tool_call> XML tags.<|im_end|>\n{%- endif %}"
    "{%- for message in messages %}"
    "{%- if message.role == 'assistant' and message.tool_calls %}<|im_start|>assistant\n"
    "{%- if message.content %}{{ message.content }}{%- endif %}"
    "{%- for call in message.tool_calls %}\n<tool_call>\n{\"name\": \"{{ call.function.name }}\", \"arguments\": "
    "{{ call.function.arguments | tojson }}}\n</tool_call>{%- endfor %}<|im_end|>\n"
    "{%- elif message.role == 'tool' %}<|im_start|>user\n<tool_response>\n{{ message.content }}\n</tool_response>"
    "<|im_end|>\n"
    "{%- else %}<|im_start|>{{ message.role }}\n{{ message.content }}<|im_end|>\n{%- endif %}"
    "{%- endfor %}{%- if add_generation_prompt %}<|im_start|>assistant\n{%- endif %}")


@pytest.fixture(scope="module")
def model_dir(tiny_model: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    return varied_copy(tiny_model, tmp_path_factory.mktemp("varied-structured"), seed=3)


@pytest.fixture(scope="module")
def tools_model(model_dir: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The model with a tokenizer whose chat template has tools."""
    directory = tmp_path_factory.mktemp("tools-model")
    shutil.copytree(model_dir, directory, dirs_exist_ok=True)
    config = json.loads((directory / "tokenizer_config.json").read_text())
    config["chat_template"] = TOOLS_TEMPLATE
    (directory / "tokenizer_config.json").write_text(json.dumps(config))
    for extra in directory.glob("chat_template.*"):
        extra.unlink()
    model = json.loads((directory / "config.json").read_text())
    model["max_position_embeddings"] = 2048  # rotary positions: room for two tool schemas in the prompt
    (directory / "config.json").write_text(json.dumps(model))
    return directory


@pytest.fixture(scope="module")
def loaded(tools_model: Path) -> intelrt.Loaded:
    return intelrt.load(tools_model)


def grammars(loaded: intelrt.Loaded) -> Grammars:
    vocabulary = loaded.model.get_input_embeddings().num_embeddings
    return Grammars(loaded.tokenizer, vocabulary, (loaded.tokenizer.eos_token_id,))


def constrained(loaded: intelrt.Loaded, rows: list[tuple[list[int], Any]], seed: int,
                budget: int = 120) -> list[str]:
    """Sample each row's continuation from the model's real logits under its constraint, with
    transformers' own ``generate`` (a ``LogitsProcessor`` does what the engine's sampler does per
    row: advance by the last token, mask what may not come next), at temperature 1 with ``seed``;
    the decoded texts."""
    import torch
    from transformers import LogitsProcessor, LogitsProcessorList

    tokenizer = loaded.tokenizer
    width = max(len(prompt) for prompt, _ in rows)
    pad = tokenizer.pad_token_id
    ids = torch.tensor([[pad] * (width - len(p)) + list(p) for p, _ in rows])
    mask = torch.tensor([[0] * (width - len(p)) + [1] * len(p) for p, _ in rows])
    constraints = [c for _, c in rows]

    class Constrained(LogitsProcessor):
        def __call__(self, input_ids: Any, scores: Any) -> Any:
            for row, constraint in enumerate(constraints):
                if input_ids.shape[1] > width and not constraint.is_terminated():
                    constraint.advance(int(input_ids[row, -1]))
                if not constraint.is_terminated():
                    allowed = constraint.allowed_tokens_mask(scores.shape[-1])
                    scores[row] = scores[row].masked_fill(~allowed, float("-inf"))
            return scores

    torch.manual_seed(seed)
    out = loaded.model.generate(input_ids=ids, attention_mask=mask, do_sample=True, temperature=1.0, top_k=0,
                                top_p=1.0, max_new_tokens=budget, pad_token_id=pad,
                                eos_token_id=tokenizer.eos_token_id, logits_processor=LogitsProcessorList([Constrained()]))
    texts = []
    for row, constraint in enumerate(constraints):
        new = out[row, width:].tolist()
        if not constraint.is_terminated() and tokenizer.eos_token_id in new:
            constraint.advance(tokenizer.eos_token_id)  # generate stopped the row before the processor saw it
        assert constraint.is_terminated(), f"row {row} not done in {budget} tokens: {tokenizer.decode(new)!r}"
        texts.append(str(tokenizer.decode(new, skip_special_tokens=True)))
    return texts


def chat_body(**fields: Any) -> ChatCompletionRequest:
    body = ChatCompletionRequest.model_validate({"model": NAME, "messages": [{"role": "user", "content": "x"}],
                                                 **fields})
    body.check()
    return body


# -- request → SamplingParams ----------------------------------------------------------------------

def test_sampling_fields_map_to_sampling_params_with_the_models_defaults() -> None:
    sampled = GenerationDefaults(do_sample=True, temperature=0.7, top_p=0.8, top_k=20, repetition_penalty=1.05)
    body = CompletionRequest.model_validate({"model": NAME, "prompt": "x", "presence_penalty": 0.5,
                                             "frequency_penalty": -0.25, "logit_bias": {"7": -100, "9": 3.5},
                                             "min_p": 0.05, "logprobs": 3, "stop_token_ids": [11]})
    params = sampling_params(body, sampled, 384, max_new_tokens=9, eos=(0,), seed=42)
    assert (params.temperature, params.top_p, params.top_k, params.min_p) == (0.7, 0.8, 20, 0.05)
    assert (params.repetition_penalty, params.presence_penalty, params.frequency_penalty) == (1.05, 0.5, -0.25)
    assert dict(params.logit_bias) == {7: -100.0, 9: 3.5} and params.logprobs == 3
    assert params.stop_token_ids == (0, 11) and params.seed == 42 and params.max_new_tokens == 9
    # The request wins over the model's defaults; a greedy request keeps no sampling-only field.
    mine = CompletionRequest.model_validate({"model": NAME, "prompt": "x", "temperature": 0, "top_k": 5})
    greedy = sampling_params(mine, sampled, 384, max_new_tokens=4)
    assert (greedy.temperature, greedy.top_k, greedy.top_p, greedy.seed) == (0.0, 0, 1.0, None)
    assert greedy.repetition_penalty == 1.05  # a penalty shapes greedy choices too
    # A model that does not sample decodes greedily; top_p alone samples at temperature 1 (OpenAI).
    alone = CompletionRequest.model_validate({"model": NAME, "prompt": "x", "top_p": 0.5})
    assert sampling_params(alone, GenerationDefaults(), 384, max_new_tokens=4).temperature == 1.0
    plain = CompletionRequest.model_validate({"model": NAME, "prompt": "x"})
    assert sampling_params(plain, GenerationDefaults(), 384, max_new_tokens=4).temperature == 0.0
    chat = chat_body(logprobs=True, top_logprobs=4, top_k=-1, temperature=1.0)
    params = sampling_params(chat, GenerationDefaults(), 384, max_new_tokens=4)
    assert params.logprobs == 4 and params.top_k == 0
    assert sampling_params(chat_body(logprobs=True), GenerationDefaults(), 384, max_new_tokens=4).logprobs == 0


def test_sampling_fields_refusals_name_the_request_field() -> None:
    body = CompletionRequest.model_validate({"model": NAME, "prompt": "x", "stop_token_ids": [400]})
    with pytest.raises(ApiError) as outside:
        sampling_params(body, GenerationDefaults(), 384, max_new_tokens=4)
    assert outside.value.param == "stop_token_ids" and "outside the model's vocabulary" in outside.value.message
    with pytest.raises(ApiError) as budget:
        sampling_params(CompletionRequest.model_validate({"model": NAME, "prompt": "x"}), GenerationDefaults(), 384,
                        max_new_tokens=0, params={"max_new_tokens": "max_completion_tokens"})
    assert budget.value.param == "max_completion_tokens"
    with pytest.raises(ApiError, match="top_logprobs needs logprobs=true"):
        chat_body(top_logprobs=2)


# -- grammars on the model's real logits -----------------------------------------------------------

def test_json_schema_answers_validate_for_50_seeded_prompts(loaded: intelrt.Loaded) -> None:
    from intelrt.serving.protocol import ResponseFormat

    fmt = ResponseFormat.model_validate({"type": "json_schema", "json_schema": {"name": "person", "schema": SCHEMA}})
    made = grammars(loaded)
    rows = [(loaded.tokenizer(f"{PROMPTS[i % len(PROMPTS)]} #{i}")["input_ids"], made.for_response_format(fmt))
            for i in range(50)]
    texts = constrained(loaded, rows, seed=0)
    for text in texts:
        jsonschema.validate(json.loads(text), SCHEMA)
    assert len(set(texts)) > 40  # the model's own choices inside the grammar, not one canned answer


def test_json_object_allows_objects_only(loaded: intelrt.Loaded) -> None:
    from intelrt.serving.protocol import ResponseFormat

    tokenizer = loaded.tokenizer
    made = grammars(loaded)
    fmt = ResponseFormat(type="json_object")
    first = made.for_response_format(fmt)
    assert first is not None
    allowed = [tokenizer.decode([t]) for t in first.allowed_tokens_mask(384).nonzero().flatten().tolist()]
    assert allowed and all(text.startswith("{") for text in allowed)
    whole = made.for_response_format(fmt)
    assert whole is not None
    for token in tokenizer('{"a": [1, 2], "b": {"c": null}}', add_special_tokens=False)["input_ids"]:
        whole.advance(token)
    assert not whole.is_terminated()
    whole.advance(tokenizer.eos_token_id)
    assert whole.is_terminated()
    array = made.for_response_format(fmt)
    assert array is not None
    with pytest.raises(ValueError, match="does not follow the grammar"):
        array.advance(tokenizer.convert_tokens_to_ids("["))


def test_bounded_strings_keep_control_characters_out(loaded: intelrt.Loaded) -> None:
    """xgrammar 0.2.9 lets raw control characters into a string with maxLength (its rule is
    ``[^"\\\r\n]{0,n}``): the schema is rewritten so none gets through."""
    import xgrammar as xgr

    from intelrt.serving.protocol import ResponseFormat
    from intelrt.serving.structured import bounded_strings_without_control_characters

    schema = {"type": "object", "properties": {"s": {"type": "string", "maxLength": 4}}, "required": ["s"]}
    info = xgr.TokenizerInfo.from_huggingface(loaded.tokenizer, vocab_size=384)
    raw = xgr.GrammarMatcher(xgr.GrammarCompiler(info).compile_json_schema(json.dumps(schema), any_whitespace=False))
    assert raw.accept_string('{"s": "a\x1f')  # the upstream rule, as it is
    fixed = bounded_strings_without_control_characters(schema)
    assert fixed["properties"]["s"] == {"type": "string", "pattern": '^[^\\x00-\\x1f"\\\\]{0,4}$'}
    fmt = ResponseFormat.model_validate({"type": "json_schema", "json_schema": {"name": "s", "schema": schema}})
    constraint = grammars(loaded).for_response_format(fmt)
    assert constraint is not None
    control = loaded.tokenizer.convert_tokens_to_ids("ğ")  # byte 0x1f in the byte-level alphabet
    for token in loaded.tokenizer('{"s": "a', add_special_tokens=False)["input_ids"]:
        constraint.advance(token)
    mask = constraint.allowed_tokens_mask(384)
    assert not mask[control] and mask[loaded.tokenizer.convert_tokens_to_ids("b")]


def test_a_schema_xgrammar_refuses_is_a_400() -> None:
    from intelrt.serving.protocol import ResponseFormat
    from intelrt.tiny import build_tokenizer

    fmt = ResponseFormat.model_validate({"type": "json_schema", "json_schema": {"name": "x",
                                                                               "schema": {"type": "nonsense"}}})
    loaded_tokenizer: Any = None
    import tempfile

    with tempfile.TemporaryDirectory() as directory:
        build_tokenizer(Path(directory))
        from transformers import AutoTokenizer

        loaded_tokenizer = AutoTokenizer.from_pretrained(directory)
    with pytest.raises(ApiError) as refused:
        Grammars(loaded_tokenizer, 384, (0,)).for_response_format(fmt)
    assert refused.value.param == "response_format.json_schema.schema"


def test_the_tool_format_comes_from_the_chat_template() -> None:
    form = tool_format(TOOLS_TEMPLATE)
    assert form is not None and form.begin == "<tool_call>" and form.xgrammar_model == "qwen_3"
    from intelrt.tiny import CHAT_TEMPLATE

    assert tool_format(CHAT_TEMPLATE) is None  # no tools in it
    assert tool_format("{{ tools }} [TOOL_CALLS] {{ messages }}") is None  # a format intelrt does not read


def test_a_tool_call_round_trips_through_a_chat_template_with_tools(loaded: intelrt.Loaded) -> None:
    from intelrt.serving.completions import render_chat
    from intelrt.serving.state import ServerState

    state = ServerState(loaded, None, NAME, 512)
    form = state.tool_format
    assert form is not None
    made = grammars(loaded)
    choices: list[Any] = ["required", {"type": "function", "function": {"name": "get_time"}}, "required",
                          {"type": "function", "function": {"name": "get_weather"}}, "required", "required"]
    bodies = [chat_body(tools=[WEATHER, TIME], tool_choice=choice, parallel_tool_calls=False,
                        messages=[{"role": "user", "content": f"What is the weather in city {i}?"}])
              for i, choice in enumerate(choices)]
    rows = []
    for body in bodies:
        prompt_text = render_chat(state, body)
        assert "<tools>" in prompt_text and '"get_weather"' in prompt_text
        rows.append((loaded.tokenizer(prompt_text, add_special_tokens=False)["input_ids"], made.for_tools(body, form)))
    for choice, text in zip(choices, constrained(loaded, rows, seed=1, budget=100), strict=True):
        content, calls = parse_tool_calls(text, form)
        assert len(calls) == 1, text
        call = calls[0]["function"]
        tool = {"get_weather": WEATHER, "get_time": TIME}[call["name"]]
        if isinstance(choice, dict):
            assert call["name"] == choice["function"]["name"]
        jsonschema.validate(json.loads(call["arguments"]), tool["function"]["parameters"])
        # The streamed view of the same text sends the content before the call and keeps the call.
        splitter = ToolCallSplitter(form)
        sent = "".join(splitter.feed(text[i:i + 3]) for i in range(0, len(text), 3))
        rest, streamed = splitter.finish()
        assert [c["function"] for c in streamed] == [call] and (sent + rest).strip() == (content or "")
        # The client sends the call back with the tool's answer: the template renders both.
        follow = ChatCompletionRequest.model_validate({"model": NAME, "tools": [WEATHER, TIME], "messages": [
            {"role": "user", "content": "What is the weather in Paris?"},
            {"role": "assistant", "content": content, "tool_calls": calls},
            {"role": "tool", "tool_call_id": calls[0]["id"], "content": "sunny, 21 C"}]})
        follow.check()
        rendered = render_chat(state, follow)
        arguments = json.dumps(json.loads(call["arguments"]))
        assert f'<tool_call>\n{{"name": "{call["name"]}", "arguments": {arguments}}}\n</tool_call>' in rendered
        assert "<tool_response>\nsunny, 21 C\n</tool_response>" in rendered


def test_tool_calls_parse_like_hermes_and_leave_broken_ones_as_text() -> None:
    form = tool_format(TOOLS_TEMPLATE)
    assert form is not None
    text = 'Let me check.\n<tool_call>\n{"name": "get_weather", "arguments": {"city": "Paris"}}\n</tool_call>\n' \
           '<tool_call>\n{"name": "get_time", "arguments": {"zone": "UTC"}}\n</tool_call>'
    content, calls = parse_tool_calls(text, form)
    assert content == "Let me check."
    assert [(c["function"]["name"], json.loads(c["function"]["arguments"])) for c in calls] == [
        ("get_weather", {"city": "Paris"}), ("get_time", {"zone": "UTC"})]
    assert len({c["id"] for c in calls}) == 2
    broken = "<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\"\n</tool_call>"
    assert parse_tool_calls(broken, form) == (broken, [])
    assert parse_tool_calls("no calls here", form) == ("no calls here", [])


def test_tools_refusals_name_the_field(loaded: intelrt.Loaded) -> None:
    with pytest.raises(ApiError) as unknown:
        chat_body(tools=[WEATHER], tool_choice={"type": "function", "function": {"name": "nope"}})
    assert unknown.value.param == "tool_choice"
    with pytest.raises(ApiError) as both:
        chat_body(tools=[WEATHER], response_format={"type": "json_object"})
    assert both.value.param == "response_format"
    with pytest.raises(ApiError, match="tool_choice needs tools"):
        chat_body(tool_choice="required")


# -- through the openai client -----------------------------------------------------------------------


@pytest.fixture(scope="module")
def server(tools_model: Path) -> Iterator[Server]:
    with Server(create_app(intelrt.load(tools_model), model_name=NAME, max_batch=8,
                           announce=lambda line: None)) as running:
        yield running


def test_served_json_schema_answers_validate_for_50_seeded_prompts(server: Server) -> None:
    client = server.client()
    fmt = {"type": "json_schema", "json_schema": {"name": "person", "schema": SCHEMA, "strict": True}}
    for seed in range(50):
        answer = client.chat.completions.create(model=NAME, messages=[{"role": "user", "content": f"person {seed}"}],
                                                response_format=fmt, temperature=1.0, seed=seed, max_tokens=160)
        jsonschema.validate(json.loads(answer.choices[0].message.content or ""), SCHEMA)


def test_served_tool_call_round_trip(server: Server) -> None:
    client = server.client()
    messages: list[Any] = [{"role": "user", "content": "What is the weather in Paris?"}]
    answer = client.chat.completions.create(model=NAME, messages=messages, tools=[WEATHER, TIME],
                                            tool_choice="required", parallel_tool_calls=False, max_tokens=160,
                                            temperature=1.0, seed=1)
    choice = answer.choices[0]
    assert choice.finish_reason == "tool_calls" and choice.message.tool_calls
    call = choice.message.tool_calls[0]
    jsonschema.validate(json.loads(call.function.arguments),
                        {"get_weather": WEATHER, "get_time": TIME}[call.function.name]["function"]["parameters"])
    messages += [choice.message.model_dump(exclude_none=True),
                 {"role": "tool", "tool_call_id": call.id, "content": "sunny"}]
    again = client.chat.completions.create(model=NAME, messages=messages, tools=[WEATHER, TIME], max_tokens=8)
    assert again.choices[0].finish_reason in ("stop", "length", "tool_calls")


def test_served_logprobs_in_both_shapes(server: Server) -> None:
    client = server.client()
    completion = client.completions.create(model=NAME, prompt=PROMPTS[0], max_tokens=6, temperature=0, logprobs=3)
    lp = completion.choices[0].logprobs
    assert lp is not None and len(lp.tokens) == completion.usage.completion_tokens
    assert all(v <= 0 for v in lp.token_logprobs)
    # the legacy shape is a dict by decoded text (as OpenAI's and vLLM's): byte tokens that each
    # decode to '\ufffd' share one key, so a step lists 3 alternatives or fewer, never more
    assert all(1 <= len(top) <= 3 for top in lp.top_logprobs)
    assert all(max(top.values()) == chosen for top, chosen in zip(lp.top_logprobs, lp.token_logprobs, strict=True))
    chat = client.chat.completions.create(model=NAME, messages=[{"role": "user", "content": "hi"}], max_tokens=5,
                                          temperature=0, logprobs=True, top_logprobs=2)
    content = chat.choices[0].logprobs.content  # type: ignore[union-attr]
    assert content is not None and all(len(t.top_logprobs) == 2 for t in content)


def test_served_logit_bias_forces_a_token(server: Server) -> None:
    target = 65
    answer = server.client().completions.create(model=NAME, prompt=PROMPTS[1], max_tokens=5, temperature=0,
                                                logit_bias={str(target): 100}, extra_body={"ignore_eos": True})
    with pytest.raises(openai.BadRequestError):
        server.client().completions.create(model=NAME, prompt="x", logit_bias={"5": 200})
    tokens = intelrt.load(server.state.loaded.plan.model.source).tokenizer(answer.choices[0].text,
                                                                          add_special_tokens=False)["input_ids"]
    assert set(tokens) == {target}
