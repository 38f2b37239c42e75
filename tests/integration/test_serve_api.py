"""``intelrt serve`` as OpenAI clients use it (issue 28, and issue 34's HTTP cases): the real
``openai`` client and raw HTTP against a real uvicorn server on 127.0.0.1 — strict JSON types,
errors naming ``param``, lone surrogates, endpoints (``/v1/models/{id}``, ``/v1/embeddings``,
``/tokenize``, ``/detokenize``, ``/version``), vLLM's extras that the engine applies or that are
refused with the reason, the API key, CORS, ``--chat-template``, bounded metric labels, the
``ready:`` line and the access log, a 2 MB prompt that stalls nothing, and a non-streamed client
that leaves (its row freed, counted 499)."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import openai
import pytest
from test_serve import (
    NAME,
    PROMPTS,
    Server,
    _error,
    expected_ids,
    httpx,
    metric,
    text_of,
    wait_ready,
)
from varied_weights import varied_copy

import intelrt
from intelrt.serving import create_app
from intelrt.serving.app import CorsOptions

KEY = "sk-test-0123456789abcdef"


@pytest.fixture(scope="module")
def model_dir(tiny_model: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    return varied_copy(tiny_model, tmp_path_factory.mktemp("varied-api"), seed=1)


@pytest.fixture(scope="module")
def offline(model_dir: Path) -> intelrt.Loaded:
    return intelrt.load(model_dir)


@pytest.fixture(scope="module")
def server(model_dir: Path) -> Iterator[Server]:
    lines: list[str] = []
    with Server(create_app(intelrt.load(model_dir), model_name=NAME, max_batch=4, announce=lines.append)) as running:
        running.lines = lines  # type: ignore[attr-defined]
        yield running


def post(server: Server, path: str, body: Any, **kwargs: Any) -> httpx.Response:
    content = body if isinstance(body, bytes) else json.dumps(body).encode()
    return httpx.post(f"{server.url}{path}", content=content, headers={"content-type": "application/json",
                                                                       **kwargs.pop("headers", {})}, **kwargs)


# -- strict bodies, errors naming their field ------------------------------------------------------

@pytest.mark.parametrize("field, value", [("max_tokens", "5"), ("stream", "yes"), ("temperature", "0.5"),
                                          ("n", 1.0), ("seed", True), ("top_k", "4")])
def test_wrong_json_types_are_refused_not_coerced(server: Server, field: str, value: Any) -> None:
    error = _error(post(server, "/v1/completions", {"model": NAME, "prompt": "hi", field: value}), 400)
    assert error["param"] == field
    assert error["message"].startswith(f"{field}: Input should be a valid")


def test_errors_name_the_field_without_pydantic_prefixes(server: Server) -> None:
    cases = [({"model": NAME, "prompt": "hi", "stop": ["a", "b", "c", "d", "e"]}, "stop", "at most 4 stop"),
             ({"model": NAME, "prompt": ["hi", [1, 2]]}, "prompt", "prompt must be a string"),
             ({"model": NAME, "prompt": "hi", "logit_bias": {"x": 1}}, "logit_bias", "is not a token id"),
             ({"model": NAME, "prompt": "hi", "logit_bias": {"5": 101}}, "logit_bias", "between -100 and 100"),
             ({"model": NAME, "prompt": "hi", "best_of": 3}, "best_of", "best_of=3 is not supported"),
             ({"model": NAME, "prompt": "hi", "guided_json": {"type": "object"}}, "guided_json",
              "use response_format"),
             ({"model": NAME}, "prompt", "this field is required")]
    for body, param, says in cases:
        error = _error(post(server, "/v1/completions", body), 400)
        assert error["param"] == param and says in error["message"], error
        assert "Value error" not in error["message"]
    chat = _error(post(server, "/v1/chat/completions", {"model": NAME, "messages": [
        {"role": "user", "content": [{"type": "image_url", "image_url": {"url": "http://x/y.png"}}]}]}), 400)
    assert chat["param"] == "messages[0].content[0].type" and "decodes text only" in chat["message"]
    nested = _error(post(server, "/v1/chat/completions", {"model": NAME, "messages": [{"role": "user",
                                                                                      "content": 5}]}), 400)
    assert nested["param"] == "messages[0].content"


def test_a_lone_surrogate_is_a_400_naming_the_field(server: Server) -> None:
    raw = b'{"model": "tiny", "prompt": "ok \\ud800 then"}'
    error = _error(post(server, "/v1/completions", raw), 400)
    assert error["param"] == "prompt" and "lone surrogate" in error["message"]
    chat = b'{"model": "tiny", "messages": [{"role": "user", "content": "\\udfff"}]}'
    assert _error(post(server, "/v1/chat/completions", chat), 400)["param"] == "messages[0].content"
    # (the openai client cannot send one: its own json.dumps(...).encode() fails before any request)


def test_response_format_text_is_accepted(server: Server, offline: intelrt.Loaded) -> None:
    answer = server.client().completions.create(model=NAME, prompt=PROMPTS[0], max_tokens=6, temperature=0,
                                                extra_body={"response_format": {"type": "text"}})
    assert answer.choices[0].text == text_of(offline, expected_ids(offline, PROMPTS[0], 6))
    chat = server.client().chat.completions.create(model=NAME, messages=[{"role": "user", "content": "hi"}],
                                                   max_tokens=4, response_format={"type": "text"})
    assert chat.choices[0].message.content is not None


def test_tool_calls_and_tool_messages_in_the_history_are_rendered(server: Server, offline: intelrt.Loaded) -> None:
    """An assistant turn with ``tool_calls`` and the ``tool`` answer reach the chat template (this
    template writes only contents) instead of being called unrecognized arguments."""
    history = [{"role": "user", "content": "weather in Paris?"},
               {"role": "assistant", "content": None, "tool_calls": [
                   {"id": "call_1", "type": "function", "function": {"name": "weather", "arguments": '{"city": "P"}'}}]},
               {"role": "tool", "tool_call_id": "call_1", "content": "sunny"}]
    answer = server.client().chat.completions.create(model=NAME, messages=history, max_tokens=5, temperature=0)
    prompt = offline.tokenizer.apply_chat_template(
        [{"role": m["role"], "content": m["content"] or ""} for m in history], add_generation_prompt=True,
        tokenize=False)
    ids = offline.tokenizer(prompt, add_special_tokens=False)["input_ids"]
    assert answer.choices[0].message.content == text_of(offline, expected_ids(offline, ids, 5))
    missing = _error(post(server, "/v1/chat/completions", {"model": NAME, "messages": [
        {"role": "tool", "content": "sunny"}]}), 400)
    assert missing["param"] == "messages[0].tool_call_id"


# -- vLLM's extras the engine applies, and what it cannot apply yet ---------------------------------

def test_stop_token_ids_and_ignore_eos(server: Server, offline: intelrt.Loaded) -> None:
    ids = expected_ids(offline, PROMPTS[2], 20)
    stop = ids[5]
    answer = server.client().completions.create(model=NAME, prompt=PROMPTS[2], max_tokens=20, temperature=0,
                                                extra_body={"stop_token_ids": [stop]})
    cut = ids[:ids.index(stop) + 1]
    assert answer.choices[0].finish_reason == "stop" and answer.usage.completion_tokens == len(cut)
    assert answer.choices[0].text == text_of(offline, cut)
    long = server.client().completions.create(model=NAME, prompt=PROMPTS[1], max_tokens=12, temperature=0,
                                              extra_body={"ignore_eos": True})
    assert long.usage.completion_tokens == 12 and long.choices[0].finish_reason == "length"


def test_skip_special_tokens_and_include_stop_str(server: Server, offline: intelrt.Loaded) -> None:
    full = text_of(offline, expected_ids(offline, PROMPTS[2], 30))
    stop = full[10:13]
    kept = server.client().completions.create(model=NAME, prompt=PROMPTS[2], max_tokens=30, temperature=0, stop=stop,
                                              extra_body={"include_stop_str_in_output": True})
    assert kept.choices[0].text == full[:full.find(stop) + len(stop)]
    eos = offline.tokenizer.eos_token
    raw = server.client().completions.create(model=NAME, prompt=PROMPTS[1], max_tokens=40, temperature=0,
                                             extra_body={"skip_special_tokens": False})
    ids = expected_ids(offline, PROMPTS[1], 40)
    assert raw.choices[0].text == offline.tokenizer.decode(ids, skip_special_tokens=False)
    assert (eos in raw.choices[0].text) == (ids[-1] == offline.tokenizer.eos_token_id)


def test_echo_puts_the_prompt_before_the_completion(server: Server, offline: intelrt.Loaded) -> None:
    answer = server.client().completions.create(model=NAME, prompt=PROMPTS[0], max_tokens=5, temperature=0, echo=True)
    assert answer.choices[0].text == PROMPTS[0] + text_of(offline, expected_ids(offline, PROMPTS[0], 5))
    streamed = server.client().completions.create(model=NAME, prompt=PROMPTS[0], max_tokens=5, temperature=0,
                                                  echo=True, stream=True)
    assert "".join(c.choices[0].text for c in streamed) == answer.choices[0].text


@pytest.mark.parametrize("extra", [
    {"logprobs": 2}, {"presence_penalty": 0.5}, {"frequency_penalty": 0.5}, {"logit_bias": {"5": 10}},
    {"repetition_penalty": 1.2}, {"top_k": 5, "temperature": 1, "seed": 3}, {"min_p": 0.1, "temperature": 1, "seed": 3},
    {"response_format": {"type": "json_object"}}], ids=lambda extra: next(iter(extra)))
def test_every_sampling_field_is_applied_by_the_engine(server: Server, extra: dict[str, Any]) -> None:
    """Each field is taken (not refused, not dropped): the answer differs from plain greedy decoding
    where the field changes it, as it would in ``generate``."""
    body = {"model": NAME, "prompt": PROMPTS[2], "max_tokens": 12, "temperature": 0}
    plain = post(server, "/v1/completions", body)
    assert plain.status_code == 200, plain.text
    answer = post(server, "/v1/completions", {**body, **extra})
    assert answer.status_code == 200, answer.text
    choice = answer.json()["choices"][0]
    if "logprobs" in extra:
        assert len(choice["logprobs"]["top_logprobs"][0]) == 2
    if "logit_bias" in extra or "response_format" in extra:
        assert choice["text"] != plain.json()["choices"][0]["text"]


def test_repetition_penalty_is_transformers_own(server: Server, offline: intelrt.Loaded) -> None:
    """``repetition_penalty`` as transformers' ``RepetitionPenaltyLogitsProcessor`` applies it."""
    ids = offline.tokenizer(PROMPTS[2])["input_ids"]
    expected = offline.generate_ids(list(ids), max_new_tokens=12, repetition_penalty=1.3)  # transformers' generate
    answer = server.client().completions.create(model=NAME, prompt=PROMPTS[2], max_tokens=12, temperature=0,
                                                extra_body={"repetition_penalty": 1.3})
    assert answer.choices[0].text == text_of(offline, expected)  # type: ignore[arg-type]


def test_vocabulary_checks_name_the_field(server: Server) -> None:
    for body, param in [({"stop_token_ids": [10**6]}, "stop_token_ids"), ({"logit_bias": {"999999": 1}}, "logit_bias"),
                        ({"allowed_token_ids": [-1]}, "allowed_token_ids")]:
        error = _error(post(server, "/v1/completions", {"model": NAME, "prompt": "hi", **body}), 400)
        assert error["param"] == param and "outside the model's vocabulary" in error["message"]


# -- endpoints -----------------------------------------------------------------------------------

def test_models_by_id_version_tokenize_and_detokenize(server: Server, offline: intelrt.Loaded) -> None:
    client = server.client()
    card = client.models.retrieve(NAME)
    assert card.id == NAME and card.owned_by == "intelrt" and card.model_extra["max_model_len"] == 512
    with pytest.raises(openai.NotFoundError) as missing:
        client.models.retrieve("org/other-model")
    assert missing.value.body["code"] == "model_not_found"  # type: ignore[index]
    assert httpx.get(f"{server.url}/version").json() == {"version": intelrt.__version__}
    tokens = post(server, "/tokenize", {"model": NAME, "prompt": PROMPTS[2], "return_token_strs": True}).json()
    ids = offline.tokenizer(PROMPTS[2])["input_ids"]
    assert tokens["tokens"] == ids and tokens["count"] == len(ids) and tokens["max_model_len"] == 512
    assert tokens["token_strs"] == offline.tokenizer.convert_ids_to_tokens(ids)
    messages = [{"role": "user", "content": "Name a GPU."}]
    chat = post(server, "/tokenize", {"messages": messages}).json()
    rendered = offline.tokenizer.apply_chat_template(messages, add_generation_prompt=True, tokenize=False)
    assert chat["tokens"] == offline.tokenizer(rendered, add_special_tokens=False)["input_ids"]
    assert post(server, "/detokenize", {"tokens": ids}).json() == {"prompt": offline.tokenizer.decode(ids)}
    assert _error(post(server, "/detokenize", {"tokens": [10**7]}), 400)["param"] == "tokens"


def test_embeddings_of_a_feature_extraction_model(tiny_encoder: Path) -> None:
    import torch

    encoder = intelrt.load(tiny_encoder)
    assert encoder.plan.task == "feature-extraction"
    texts = ["Intel GPUs run PyTorch", "hello", "Gaudi runs eagerly by default, says the guide"]
    expected = torch.nn.functional.normalize(intelrt.load(tiny_encoder).embed(texts).float(), dim=-1)
    with Server(create_app(encoder, model_name="enc", announce=lambda line: None)) as running:
        client = running.client()
        answer = client.embeddings.create(model="enc", input=texts)  # the client asks for base64
        got = torch.tensor([d.embedding for d in answer.data])
        assert torch.allclose(got, expected, atol=1e-5)
        assert answer.usage.prompt_tokens == sum(len(encoder.tokenizer(t)["input_ids"]) for t in texts)
        floats = client.embeddings.create(model="enc", input=texts[0], encoding_format="float")
        assert torch.allclose(torch.tensor(floats.data[0].embedding), expected[0], atol=1e-5)
        ids = encoder.tokenizer(texts[1])["input_ids"]
        by_ids = client.embeddings.create(model="enc", input=ids, encoding_format="float")
        assert torch.allclose(torch.tensor(by_ids.data[0].embedding), expected[1], atol=1e-5)
        with pytest.raises(openai.BadRequestError, match="loaded for feature-extraction"):
            client.completions.create(model="enc", prompt="x")
        with pytest.raises(openai.BadRequestError, match="dimensions=8"):
            client.embeddings.create(model="enc", input="x", dimensions=8)


def test_embeddings_refused_by_a_text_generation_model(server: Server) -> None:
    with pytest.raises(openai.BadRequestError, match="loaded for text-generation") as refused:
        server.client().embeddings.create(model=NAME, input="x")
    assert refused.value.body["code"] == "wrong_model_task"  # type: ignore[index]


def test_a_lora_directory_without_its_config_or_its_weights_is_refused_naming_the_file(server: Server,
                                                                                        tmp_path: Path) -> None:
    bad = _error(post(server, "/v1/load_lora_adapter", {"lora_name": "a", "lora_path": str(tmp_path)}), 400)
    assert bad["param"] == "lora_path" and "no adapter_config.json" in bad["message"]
    (tmp_path / "adapter_config.json").write_text(json.dumps({"peft_type": "LORA", "r": 4}))
    refused = _error(post(server, "/v1/load_lora_adapter", {"lora_name": "a", "lora_path": str(tmp_path)}), 400)
    assert refused["param"] == "lora_path"
    assert f"{tmp_path / 'adapter_model.safetensors'} does not exist" in refused["message"]
    gone = _error(post(server, "/v1/unload_lora_adapter", {"lora_name": "a"}), 404)
    assert gone["code"] == "adapter_not_found"
    assert [m.id for m in server.client().models.list().data] == [NAME]


# -- the API key, CORS, the chat template -------------------------------------------------------

def test_api_key_guards_every_v1_route_in_constant_time(model_dir: Path) -> None:
    with Server(create_app(intelrt.load(model_dir), model_name=NAME, max_batch=2, api_key=KEY,
                           announce=lambda line: None)) as running:
        for path in ("/v1/models", "/v1/models/tiny", "/v1/completions", "/v1/chat/completions", "/v1/embeddings",
                     "/v1/load_lora_adapter", "/v1/nowhere"):
            for headers in ({}, {"authorization": "Bearer wrong"}, {"authorization": KEY}):
                response = httpx.request("POST" if "models" not in path else "GET", f"{running.url}{path}",
                                         headers=headers, json={})
                assert _error(response, 401)["code"] == "invalid_api_key", (path, headers)
                assert KEY not in response.text
        with pytest.raises(openai.AuthenticationError):
            running.client().models.list()
        keyed = openai.OpenAI(base_url=f"{running.url}/v1", api_key=KEY, max_retries=0)
        assert keyed.completions.create(model=NAME, prompt="hi", max_tokens=2).choices[0].text is not None
        assert httpx.get(f"{running.url}/health").status_code == 200  # liveness stays open, as in vLLM
    with pytest.raises(intelrt.ConfigurationError, match="api_key is empty"):
        create_app(intelrt.load(model_dir), api_key="")


def test_cors_preflight_and_allowed_origins(model_dir: Path) -> None:
    cors = CorsOptions(("http://localhost:3000",), ("GET", "POST"), ("authorization", "content-type"))
    with Server(create_app(intelrt.load(model_dir), model_name=NAME, max_batch=2, api_key=KEY, cors=cors,
                           announce=lambda line: None)) as running:
        preflight = httpx.options(f"{running.url}/v1/chat/completions", headers={
            "origin": "http://localhost:3000", "access-control-request-method": "POST",
            "access-control-request-headers": "authorization,content-type"})
        assert preflight.status_code == 200
        assert preflight.headers["access-control-allow-origin"] == "http://localhost:3000"
        other = httpx.options(f"{running.url}/v1/models", headers={
            "origin": "http://evil.example", "access-control-request-method": "GET"})
        assert other.status_code == 400 and "access-control-allow-origin" not in other.headers
        simple = httpx.get(f"{running.url}/v1/models", headers={"origin": "http://localhost:3000",
                                                                 "authorization": f"Bearer {KEY}"})
        assert simple.status_code == 200 and simple.headers["access-control-allow-origin"] == "http://localhost:3000"


def test_a_chat_template_of_its_own(model_dir: Path, offline: intelrt.Loaded) -> None:
    template = "{% for m in messages %}[{{ m['role'] }}] {{ m['content'] }}\n{% endfor %}[assistant] "
    with Server(create_app(intelrt.load(model_dir), model_name=NAME, max_batch=2, chat_template=template,
                           announce=lambda line: None)) as running:
        messages = [{"role": "user", "content": "Name a GPU."}]
        tokens = post(running, "/tokenize", {"messages": messages}).json()["tokens"]
        ids = offline.tokenizer("[user] Name a GPU.\n[assistant] ", add_special_tokens=False)["input_ids"]
        assert tokens == ids
        answer = running.client().chat.completions.create(model=NAME, messages=messages, max_tokens=6, temperature=0)
        assert answer.choices[0].message.content == text_of(offline, expected_ids(offline, ids, 6))


# -- what the server says, and what it counts -----------------------------------------------------

def test_metric_labels_are_route_templates_so_scanners_add_one_series(server: Server) -> None:
    for i in range(40):
        httpx.get(f"{server.url}/wp-admin/{i}/x{i * 7919}")
    server.client().models.retrieve(NAME)
    text = httpx.get(f"{server.url}/metrics").text
    series = [line for line in text.splitlines() if line.startswith("intelrt_requests_total{")]
    assert not any("wp-admin" in line for line in series)
    assert metric(server.url, 'intelrt_requests_total{code="404",endpoint="other"}') >= 40
    assert any('endpoint="/v1/models/{model_id:path}"' in line for line in series)


def test_a_2mb_prompt_is_refused_without_stalling_health(server: Server) -> None:
    big = "word " * 400_000
    timings: list[float] = []
    done = threading.Event()

    def probe() -> None:
        while not done.is_set():
            started = time.monotonic()
            httpx.get(f"{server.url}/health", timeout=30)
            timings.append(time.monotonic() - started)
            time.sleep(0.01)

    prober = threading.Thread(target=probe)
    prober.start()
    try:
        started = time.monotonic()
        error = _error(post(server, "/v1/completions", {"model": NAME, "prompt": big}, timeout=60), 400)
        took = time.monotonic() - started
    finally:
        done.set()
        prober.join()
    assert error["code"] == "context_length_exceeded" and error["param"] == "prompt"
    assert took < 2.0, f"a 2 MB prompt took {took:.1f} s to refuse"
    assert max(timings) < 1.0, f"/health stalled {max(timings):.2f} s"


def test_a_non_streamed_client_that_leaves_frees_its_row_and_counts_499(model_dir: Path) -> None:
    from intelrt.decoding.tuning import DecodeTuning

    loaded = intelrt.load(model_dir)
    # one decode step a look and four completions: the client leaves (0.3 s) while its rows still decode,
    # however fast the machine (8 steps a look finished the tiny model's 480 tokens first)
    loaded.decode_tuning = DecodeTuning(inflight_steps=1)
    with Server(create_app(loaded, model_name=NAME, max_batch=4, announce=lambda line: None)) as one:
        before = metric(one.url, "intelrt_generated_tokens_total")
        with pytest.raises(httpx.TimeoutException):
            httpx.post(f"{one.url}/v1/completions", json={"model": NAME, "prompt": "x", "max_tokens": 480, "n": 4,
                                                           "ignore_eos": True}, timeout=0.3)
        deadline = time.monotonic() + 30
        while metric(one.url, "intelrt_rows_in_flight") > 0 and time.monotonic() < deadline:
            time.sleep(0.05)
        assert metric(one.url, "intelrt_rows_in_flight") == 0
        generated = metric(one.url, "intelrt_generated_tokens_total") - before
        assert generated < 4 * 480, f"the departed client's completions ran on ({generated} tokens)"
        assert metric(one.url, 'intelrt_requests_total{code="499",endpoint="/v1/completions"}') == 1
        assert metric(one.url, 'intelrt_requests_total{code="200",endpoint="/v1/completions"}') == 0


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


PYTHON_SERVE = """
import sys, intelrt
intelrt.serve(intelrt.load(sys.argv[1]), port=int(sys.argv[2]), model_name="tiny", max_batch=2,
              api_key=sys.argv[3])
"""


@pytest.mark.parametrize("how", ["cli", "python"])
def test_ready_line_and_access_log_from_the_cli_and_from_python(model_dir: Path, how: str) -> None:
    port = _free_port()
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path), "INTELRT_API_KEY": KEY}
    command = ([sys.executable, "-m", "intelrt.cli", "serve", str(model_dir), "--port", str(port), "--max-batch", "2",
                "--served-model-name", NAME] if how == "cli" else
               [sys.executable, "-c", PYTHON_SERVE, str(model_dir), str(port), KEY])
    process = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env)
    try:
        wait_ready(f"http://127.0.0.1:{port}")
        client = openai.OpenAI(base_url=f"http://127.0.0.1:{port}/v1", api_key=KEY, max_retries=0)
        client.completions.create(model=NAME, prompt="hi", max_tokens=2)
        httpx.get(f"http://127.0.0.1:{port}/v1/models")  # no key: 401
        process.terminate()
        output, _ = process.communicate(timeout=60)
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()
    assert process.returncode == 0, output
    lines = output.splitlines()
    assert f"ready: http://127.0.0.1:{port}/v1 — model '{NAME}'" in lines, output
    assert any('"POST /v1/completions" 200' in line and line.startswith("access: 127.0.0.1:") for line in lines)
    assert any('"GET /v1/models" 401' in line for line in lines)
    assert KEY not in output


def test_cli_serve_refuses_bad_serving_options_before_loading(tmp_path: Path) -> None:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}

    def cli(*args: str, **extra: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run([sys.executable, "-m", "intelrt.cli", "serve", "/nonexistent-model", *args],
                              capture_output=True, text=True, timeout=120, env={**env, **extra})

    cases = [(("--chat-template", str(tmp_path / "none.jinja")), "--chat-template", "no such file"),
             (("--lora", "oops"), "--lora 'oops'", "write NAME=DIR"),
             (("--lora", f"a={tmp_path}"), "LoRA adapter 'a'", "no adapter_config.json"),
             (("--allow-credentials",), "--allow-credentials needs --allowed-origins", ""),
             (("--api-key", " "), "--api-key is empty", ""),
             (("--gpu-memory-utilization", "1.5"), "--gpu-memory-utilization 1.5 must be a number in (0, 1]", ""),
             (("--max-batch-tokens", "8"), "--max-batch-tokens 8 must be a whole number of tokens >= 16", "")]
    for args, says, also in cases:
        result = cli(*args)
        assert result.returncode == 2, (args, result.stderr)
        assert says in result.stderr and also in result.stderr and "Traceback" not in result.stderr, result.stderr
    secret = cli("--chat-template", str(tmp_path / "none.jinja"), INTELRT_API_KEY=KEY)
    assert KEY not in secret.stderr + secret.stdout
