"""``intelrt serve`` for real (issue 19): a uvicorn server on 127.0.0.1 and a free port, driven by
the ``openai`` client — completions equal to offline ``Loaded.generate``, streaming chat, 64
streaming clients at once, a client that leaves, load limits and OpenAI error objects, metrics,
readiness and a draining ``SIGTERM``."""

from __future__ import annotations

import asyncio
import json
import os
import re
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import openai
import pytest
import uvicorn
from varied_weights import varied_copy

import intelrt
from intelrt.serving import create_app

try:  # the openai client's own HTTP library, under whichever name it is installed
    import httpx2 as httpx
except ImportError:  # pragma: no cover - depends on the installed openai
    import httpx  # type: ignore[no-redef]

PROMPTS = ["Intel GPUs are", "hello", "the cat sat on the mat and then", "x", "Gaudi runs PyTorch eagerly"]
NAME = "tiny"


class Server:
    """``app`` under uvicorn on a thread, on a free port of 127.0.0.1."""

    def __init__(self, app: Any) -> None:
        self.app = app
        self.socket = socket.socket()
        self.socket.bind(("127.0.0.1", 0))
        self.url = f"http://127.0.0.1:{self.socket.getsockname()[1]}"
        self.server = uvicorn.Server(uvicorn.Config(app, log_level="warning"))
        self.thread = threading.Thread(target=self.server.run, kwargs={"sockets": [self.socket]}, daemon=True)

    def __enter__(self) -> Server:
        self.thread.start()
        wait_ready(self.url)
        return self

    def __exit__(self, *exc: object) -> None:
        self.server.should_exit = True
        self.thread.join(30)
        assert not self.thread.is_alive()

    def client(self, **kwargs: Any) -> openai.OpenAI:
        return openai.OpenAI(base_url=f"{self.url}/v1", api_key="unused", max_retries=0, **kwargs)

    @property
    def state(self) -> Any:
        return self.app.state.intelrt


def wait_ready(url: str, timeout: float = 120) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            if httpx.get(f"{url}/ready", timeout=5).status_code == 200:
                return
        except httpx.TransportError:
            pass
        time.sleep(0.1)
    raise AssertionError(f"{url} never became ready")


def metric(url: str, name: str) -> float:
    text = httpx.get(f"{url}/metrics").text
    values = [float(line.rsplit(" ", 1)[1]) for line in text.splitlines() if line.startswith(name + " ")
              or line.startswith(name + "{")]
    return sum(values)


@pytest.fixture(scope="module")
def model_dir(tiny_model: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    return varied_copy(tiny_model, tmp_path_factory.mktemp("varied"), seed=1)


@pytest.fixture(scope="module")
def loaded(model_dir: Path) -> intelrt.Loaded:
    return intelrt.load(model_dir)


@pytest.fixture(scope="module")
def offline(model_dir: Path) -> intelrt.Loaded:
    """A second load of the same model for the expected outputs (the server's is busy on its thread)."""
    return intelrt.load(model_dir)


@pytest.fixture(scope="module")
def server(loaded: intelrt.Loaded) -> Iterator[Server]:
    lines: list[str] = []
    with Server(create_app(loaded, model_name=NAME, announce=lines.append)) as running:
        running.lines = lines  # type: ignore[attr-defined]
        yield running


def expected_ids(offline: intelrt.Loaded, prompt: str | list[int], max_new: int) -> list[int]:
    ids = prompt if isinstance(prompt, list) else offline.tokenizer(prompt)["input_ids"]
    return offline.generate_ids(list(ids), max_new_tokens=max_new)  # type: ignore[return-value]


def text_of(offline: intelrt.Loaded, ids: list[int]) -> str:
    return offline.tokenizer.decode(ids, skip_special_tokens=True)


# -- what it serves ------------------------------------------------------------------------------

def test_serve_starts_saying_what_it_runs_and_with_which_limits(server: Server) -> None:
    said = "\n".join(server.lines)  # type: ignore[attr-defined]
    assert "engine: in-flight batching" in said and "decode step: compact" in said
    assert "rows in flight: 64" in said and "the plan's batch size on cpu" in said
    assert "context per row: 512 tokens" in said and "queue limit: 256" in said
    assert "row buckets (one captured step each): 1, 2, 4, 8, 16, 32, 64" in said
    assert "memory budget: KV cache budget" in said and "configured for the CPU" in said
    assert "KV cache: " in said and "blocks of 16 tokens" in said and "prefix caching: on" in said
    lines: list[str] = server.lines  # type: ignore[attr-defined]
    deadline = time.monotonic() + 10  # said once warm, just before the ready line
    while not any(line.startswith("ready: ") for line in lines) and time.monotonic() < deadline:
        time.sleep(0.05)
    warmed = [i for i, line in enumerate(lines) if "warmed up in" in line]
    # the CPU plan compiles and captures nothing: the line says so rather than staying silent
    assert len(warmed) == 1 and re.fullmatch(r"intelrt serve: warmed up in \d+\.\d s: 0 frames compiled, 0 steps captured",
                                             lines[warmed[0]]), lines
    assert warmed[0] < next(i for i, line in enumerate(lines) if line.startswith("ready: "))
    health = httpx.get(f"{server.url}/health")
    assert health.status_code == 200 and health.json() == {"status": "ok"}
    assert httpx.get(f"{server.url}/ready").json() == {"status": "ready"}
    models = server.client().models.list()
    assert [m.id for m in models.data] == [NAME]


def test_serve_greedy_completions_equal_offline_generate_token_for_token(server: Server,
                                                                         offline: intelrt.Loaded) -> None:
    """Five prompts at once, so they join the running batch at different steps."""
    client = server.client()
    lengths = [24, 9, 17, 30, 12]

    def ask(i: int) -> Any:
        return client.completions.create(model=NAME, prompt=PROMPTS[i], max_tokens=lengths[i], temperature=0)

    with ThreadPoolExecutor(len(PROMPTS)) as pool:
        answers = list(pool.map(ask, range(len(PROMPTS))))
    for i, answer in enumerate(answers):
        ids = expected_ids(offline, PROMPTS[i], lengths[i])
        assert answer.choices[0].text == text_of(offline, ids)
        assert answer.usage.completion_tokens == len(ids)
        assert answer.usage.prompt_tokens == len(offline.tokenizer(PROMPTS[i])["input_ids"])
        eos = offline.model.generation_config.eos_token_id
        assert answer.choices[0].finish_reason == ("stop" if ids[-1] == eos else "length")
    assert len({a.choices[0].text for a in answers}) == len(PROMPTS)


def test_serve_prompt_lists_token_ids_and_n(server: Server, offline: intelrt.Loaded) -> None:
    client = server.client()
    first, second = (text_of(offline, expected_ids(offline, p, 10)) for p in PROMPTS[:2])
    answer = client.completions.create(model=NAME, prompt=PROMPTS[:2], max_tokens=10, n=2, temperature=0)
    assert [c.index for c in answer.choices] == [0, 1, 2, 3]
    assert [c.text for c in answer.choices] == [first, first, second, second]
    tokens = [offline.tokenizer(p)["input_ids"] for p in PROMPTS[:2]]
    assert client.completions.create(model=NAME, prompt=tokens[0], max_tokens=10, temperature=0).choices[0].text \
        == first
    assert [c.text for c in client.completions.create(model=NAME, prompt=tokens, max_tokens=10,
                                                      temperature=0).choices] == [first, second]
    mixed = httpx.post(f"{server.url}/v1/completions", json={"model": NAME, "prompt": [PROMPTS[0], tokens[1]]})
    assert "prompt must be a string, a list of strings" in _error(mixed, 400)["message"]


def test_serve_streaming_chat_uses_the_chat_template_and_ends_with_done(server: Server,
                                                                       offline: intelrt.Loaded) -> None:
    messages = [{"role": "system", "content": "You are terse."}, {"role": "user", "content": "Name a GPU."}]
    prompt = offline.tokenizer.apply_chat_template(messages, add_generation_prompt=True, tokenize=False)
    assert "<|im_start|>assistant\n" in prompt  # the tiny model's ChatML-style template
    ids = expected_ids(offline, offline.tokenizer(prompt, add_special_tokens=False)["input_ids"], 16)
    with httpx.stream("POST", f"{server.url}/v1/chat/completions",
                      json={"model": NAME, "messages": messages, "max_tokens": 16, "temperature": 0, "stream": True,
                            "stream_options": {"include_usage": True}}) as response:
        assert response.status_code == 200 and response.headers["content-type"].startswith("text/event-stream")
        events = [line.removeprefix("data: ") for line in response.iter_lines() if line.startswith("data: ")]
    assert events[-1] == "[DONE]"
    chunks = [json.loads(e) for e in events[:-1]]
    assert all(c["object"] == "chat.completion.chunk" for c in chunks)
    assert chunks[0]["choices"][0]["delta"] == {"role": "assistant", "content": ""}
    text = "".join(c["choices"][0]["delta"].get("content", "") for c in chunks if c["choices"])
    assert text == text_of(offline, ids)
    finish = [c["choices"][0]["finish_reason"] for c in chunks if c["choices"] and c["choices"][0]["finish_reason"]]
    assert finish == ["stop" if ids[-1] == offline.model.generation_config.eos_token_id else "length"]
    assert chunks[-1]["choices"] == [] and chunks[-1]["usage"]["completion_tokens"] == len(ids)
    # The openai client reads the same stream.
    stream = server.client().chat.completions.create(model=NAME, messages=messages, max_tokens=16, temperature=0,
                                                     stream=True)
    assert "".join(c.choices[0].delta.content or "" for c in stream) == text


def test_serve_64_concurrent_streaming_clients_get_every_token_once_in_order(server: Server,
                                                                            offline: intelrt.Loaded) -> None:
    prompts = [f"{PROMPTS[i % len(PROMPTS)]} {i}" for i in range(64)]
    expected = [text_of(offline, expected_ids(offline, p, 6)) for p in prompts]
    client = openai.AsyncOpenAI(base_url=f"{server.url}/v1", api_key="unused", max_retries=0)

    async def one(prompt: str) -> tuple[list[str], Any]:
        pieces: list[str] = []
        usage = None
        stream = await client.completions.create(model=NAME, prompt=prompt, max_tokens=6, temperature=0, stream=True,
                                                 stream_options={"include_usage": True})
        async for chunk in stream:
            if chunk.choices:
                pieces.append(chunk.choices[0].text)
            if chunk.usage is not None:
                usage = chunk.usage
        return pieces, usage

    async def everyone() -> list[tuple[list[str], Any]]:
        try:
            return list(await asyncio.gather(*(one(p) for p in prompts)))
        finally:
            await client.close()

    results = asyncio.run(everyone())
    for (pieces, usage), want, prompt in zip(results, expected, prompts, strict=True):
        assert "".join(pieces) == want
        assert usage is not None and usage.completion_tokens == len(expected_ids(offline, prompt, 6))
    assert metric(server.url, "intelrt_rows_in_flight") == 0 and metric(server.url, "intelrt_queue_depth") == 0


def test_serve_stop_strings_cut_the_text_before_them(server: Server, offline: intelrt.Loaded) -> None:
    full = text_of(offline, expected_ids(offline, PROMPTS[2], 30))
    stop = full[10:13]
    assert stop and full.find(stop) >= 0
    answer = server.client().completions.create(model=NAME, prompt=PROMPTS[2], max_tokens=30, temperature=0,
                                                stop=[stop, "never-appears"])
    assert answer.choices[0].text == full[:full.find(stop)]
    assert answer.choices[0].finish_reason == "stop"
    streamed = server.client().completions.create(model=NAME, prompt=PROMPTS[2], max_tokens=30, temperature=0,
                                                  stop=stop, stream=True)
    assert "".join(c.choices[0].text for c in streamed) == full[:full.find(stop)]


def test_serve_seeded_sampling_repeats_and_other_seeds_differ(server: Server) -> None:
    client = server.client()

    def sample(seed: int) -> str:
        answer = client.completions.create(model=NAME, prompt=PROMPTS[0], max_tokens=24, temperature=1.2, top_p=0.95,
                                           seed=seed)
        return answer.choices[0].text

    first = sample(7)
    assert sample(7) == first
    assert len({first, sample(8), sample(9)}) > 1


def test_serve_metrics_count_requests_tokens_and_latencies(server: Server) -> None:
    before = metric(server.url, "intelrt_generated_tokens_total")
    server.client().completions.create(model=NAME, prompt=PROMPTS[1], max_tokens=5, temperature=0)
    text = httpx.get(f"{server.url}/metrics").text
    for name in ("intelrt_requests_total", "intelrt_prompt_tokens_total", "intelrt_generated_tokens_total",
                 "intelrt_queue_depth", "intelrt_rows_in_flight", "intelrt_ready",
                 "intelrt_time_to_first_token_seconds_bucket", "intelrt_inter_token_latency_seconds_bucket",
                 "intelrt_kv_cache_blocks", "intelrt_kv_cache_blocks_used", "intelrt_preemptions_total",
                 "intelrt_oom_retries_total", "intelrt_prefix_cache_queried_tokens_total",
                 "intelrt_prefix_cache_hit_tokens_total"):
        assert name in text
    assert metric(server.url, "intelrt_generated_tokens_total") > before
    assert metric(server.url, "intelrt_time_to_first_token_seconds_count") >= 1
    assert metric(server.url, "intelrt_ready") == 1
    assert 'intelrt_requests_total{code="200",endpoint="/v1/completions"}' in text


# -- bad requests get OpenAI error objects ---------------------------------------------------------

def _error(response: httpx.Response, status: int) -> dict[str, Any]:
    assert response.status_code == status, response.text
    body = response.json()
    assert set(body) == {"error"} and {"message", "type", "param", "code"} <= set(body["error"])
    assert body["error"]["message"]
    return body["error"]  # type: ignore[no-any-return]


@pytest.mark.parametrize("body, status, says, param", [
    (b'{"model": "tiny", "prompt": "hi"', 400, "not valid JSON", None),
    ({"model": "gpt-4", "prompt": "hi"}, 404, "The model 'gpt-4' does not exist", "model"),
    ({"model": NAME, "prompt": "hi", "max_tokens": -3}, 400, "greater than or equal to 1", "max_tokens"),
    ({"model": NAME, "prompt": "hi", "n": 100000}, 400, "n=100000", "n"),
    ({"model": NAME, "prompt": "hi " * 600}, 400, "maximum context length is 512 tokens", "prompt"),
    ({"model": NAME, "prompt": "hi", "max_tokens": 600}, 400, "maximum context length is 512 tokens", "max_tokens"),
    ({"model": NAME, "prompt": "hi", "suffix": "end"}, 400, "suffix='end' is not supported", "suffix"),
    ({"model": NAME, "prompt": "hi", "mystery": 1}, 400, "unrecognized request argument", "mystery"),
    ({"model": NAME, "prompt": [99999]}, 400, "outside the model's vocabulary", "prompt"),
    ({"model": NAME, "prompt": "hi", "stop": ["a", "b", "c", "d", "e"]}, 400, "at most 4 stop sequences", "stop"),
], ids=["malformed-json", "unknown-model", "negative-max-tokens", "huge-n", "prompt-too-long", "max-tokens-too-many",
        "unsupported-field", "unknown-field", "token-outside-vocabulary", "too-many-stops"])
def test_serve_bad_requests_get_a_4xx_error_object(server: Server, body: Any, status: int, says: str,
                                                    param: str | None) -> None:
    content = body if isinstance(body, bytes) else json.dumps(body).encode()
    response = httpx.post(f"{server.url}/v1/completions", content=content,
                          headers={"content-type": "application/json"})
    error = _error(response, status)
    assert says in error["message"]
    if param is not None:
        assert error["param"] == param


def test_serve_errors_reach_the_openai_client_as_its_own_exceptions(server: Server) -> None:
    client = server.client()
    with pytest.raises(openai.NotFoundError) as missing:
        client.completions.create(model="nope", prompt="x")
    assert missing.value.body["code"] == "model_not_found"  # type: ignore[index]
    with pytest.raises(openai.BadRequestError) as long:
        client.chat.completions.create(model=NAME, messages=[{"role": "user", "content": "word " * 600}])
    assert long.value.body["code"] == "context_length_exceeded"  # type: ignore[index]
    with pytest.raises(openai.BadRequestError, match="tools"):
        client.chat.completions.create(model=NAME, messages=[{"role": "user", "content": "x"}],
                                       tools=[{"type": "function", "function": {"name": "f"}}])
    unknown = httpx.get(f"{server.url}/v1/nothing-here")
    assert _error(unknown, 404)["type"] == "not_found_error"


# -- load, leaving clients, draining ----------------------------------------------------------------

@pytest.fixture(scope="module")
def one_row(loaded: intelrt.Loaded, model_dir: Path) -> Iterator[Server]:
    """A server of one row and one queue place (a second load: the module's server keeps its own)."""
    with Server(create_app(intelrt.load(model_dir), model_name=NAME, max_batch=1, max_queue=1,
                           announce=lambda line: None)) as running:
        yield running


def _read_some(url: str, max_tokens: int, chunks: int, started: threading.Event,
               leave: threading.Event | None = None) -> list[str]:
    """A streaming client that reads ``chunks`` chunks, then (``leave`` set) disconnects."""
    seen: list[str] = []
    with httpx.stream("POST", f"{url}/v1/completions", json={"model": NAME, "prompt": PROMPTS[0], "stream": True,
                                                             "max_tokens": max_tokens, "temperature": 0},
                      timeout=60) as response:
        for line in response.iter_lines():
            if line.startswith("data: "):
                seen.append(line)
                if len(seen) == chunks:
                    started.set()
                    if leave is not None:
                        leave.wait(30)
                        break
    return seen


def test_serve_a_client_that_disconnects_frees_its_row(one_row: Server, offline: intelrt.Loaded) -> None:
    started, leave = threading.Event(), threading.Event()
    before = metric(one_row.url, "intelrt_generated_tokens_total")
    reader = threading.Thread(target=_read_some, args=(one_row.url, 480, 3, started, leave))
    reader.start()
    assert started.wait(60)
    leave.set()  # the client closes its connection after 3 chunks of a 480-token completion
    reader.join(30)
    answer = one_row.client().completions.create(model=NAME, prompt=PROMPTS[1], max_tokens=8, temperature=0)
    assert answer.choices[0].text == text_of(offline, expected_ids(offline, PROMPTS[1], 8))
    generated = metric(one_row.url, "intelrt_generated_tokens_total") - before
    assert generated < 480, f"the departed client's completion ran on ({generated} tokens)"
    assert metric(one_row.url, "intelrt_rows_in_flight") == 0
    text = httpx.get(f"{one_row.url}/metrics").text
    assert 'intelrt_requests_total{code="499",endpoint="/v1/completions"}' in text


def test_serve_a_full_queue_answers_429_with_retry_after(one_row: Server) -> None:
    started = threading.Event()
    with ThreadPoolExecutor(2) as pool:
        running = pool.submit(_read_some, one_row.url, 400, 1, started)
        assert started.wait(60)  # one row busy
        waiting = pool.submit(lambda: one_row.client().completions.create(model=NAME, prompt=PROMPTS[3], max_tokens=4,
                                                                          temperature=0))
        deadline = time.monotonic() + 30
        while metric(one_row.url, "intelrt_queue_depth") < 1 and time.monotonic() < deadline:
            time.sleep(0.02)
        refused = httpx.post(f"{one_row.url}/v1/completions", json={"model": NAME, "prompt": "x", "max_tokens": 2})
        error = _error(refused, 429)
        assert refused.headers["retry-after"] == "1" and error["code"] == "queue_full"
        assert "queue is full" in error["message"]
        assert running.result()[-1] == "data: [DONE]" and waiting.result().choices[0].text is not None


def test_serve_drain_timeout_fails_what_is_left_with_503(loaded: intelrt.Loaded, model_dir: Path) -> None:
    """After SIGTERM's drain timeout, requests still running end with an error event (streamed) or
    a 503 error object, and new requests are refused — none is lost or answered twice."""
    with Server(create_app(intelrt.load(model_dir), model_name=NAME, max_batch=1, max_queue=4,
                           announce=lambda line: None)) as draining:
        started = threading.Event()
        with ThreadPoolExecutor(2) as pool:
            streamed = pool.submit(_read_some, draining.url, 480, 1, started)
            assert started.wait(60)
            queued = pool.submit(httpx.post, f"{draining.url}/v1/completions",
                                 json={"model": NAME, "prompt": "x", "max_tokens": 400}, timeout=60)
            time.sleep(0.2)
            draining.state.begin_drain(0.0)
            events = streamed.result()
            answer = queued.result()
        assert "shutting down" in json.loads(events[-2].removeprefix("data: "))["error"]["message"]
        assert events[-1] == "data: [DONE]"
        assert "drain timeout" in _error(answer, 503)["message"]
        refused = httpx.post(f"{draining.url}/v1/completions", json={"model": NAME, "prompt": "x"})
        assert _error(refused, 503)["code"] == "shutting_down"
        assert httpx.get(f"{draining.url}/ready").json() == {"status": "draining"}


def test_serve_sigterm_finishes_in_flight_requests_and_exits_0(model_dir: Path, offline: intelrt.Loaded) -> None:
    """``intelrt serve`` in its own process: SIGTERM while a completion streams — it finishes in full,
    new connections are refused, the process exits 0."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    url = f"http://127.0.0.1:{port}"
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}
    process = subprocess.Popen([sys.executable, "-m", "intelrt.cli", "serve", str(model_dir), "--port", str(port),
                                "--served-model-name", NAME, "--drain-timeout", "60"],
                               stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env)
    try:
        wait_ready(url)
        started = threading.Event()
        with ThreadPoolExecutor(1) as pool:
            streaming = pool.submit(_read_some, url, 400, 1, started)
            assert started.wait(60)
            process.send_signal(signal.SIGTERM)
            events = streaming.result(timeout=120)
        output, _ = process.communicate(timeout=60)
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()
    assert process.returncode == 0, output
    assert events[-1] == "data: [DONE]"
    chunks = [json.loads(e.removeprefix("data: ")) for e in events[:-1]]
    text = "".join(c["choices"][0]["text"] for c in chunks)
    assert text == text_of(offline, expected_ids(offline, PROMPTS[0], 400))
    assert "draining: no new requests" in output and "engine: in-flight batching" in output
    with pytest.raises(httpx.TransportError):
        httpx.get(f"{url}/health", timeout=2)


def test_a_background_serve_ignores_ctrl_c_and_drains_on_sigterm(model_dir: Path) -> None:
    """``intelrt serve … &`` from a script: started with SIGINT ignored (the shell's way of keeping
    the terminal's Ctrl-C for the foreground job), it goes on answering after a SIGINT; SIGTERM
    drains it and it exits 0."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    url = f"http://127.0.0.1:{port}"
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}
    process = subprocess.Popen(["/bin/sh", "-c", 'trap "" INT; exec "$@"', "sh", sys.executable, "-m", "intelrt.cli",
                                "serve", str(model_dir), "--port", str(port), "--served-model-name", NAME],
                               stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env)
    try:
        wait_ready(url)
        process.send_signal(signal.SIGINT)
        time.sleep(1)
        answer = httpx.post(f"{url}/v1/completions", json={"model": NAME, "prompt": "x", "max_tokens": 2}, timeout=60)
        assert answer.status_code == 200 and process.poll() is None
        process.send_signal(signal.SIGTERM)
        output, _ = process.communicate(timeout=60)
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()
    assert process.returncode == 0, output
    assert "draining: no new requests" in output


# -- the engine under load: a KV cache too small for everyone, long prompts, shared prefixes --------

def test_serve_preempts_rather_than_fails_when_the_kv_cache_runs_out(model_dir: Path, offline: intelrt.Loaded) -> None:
    """A KV cache of 96 token slots for 8 rows of up to 64 tokens: 16 concurrent completions of
    mixed lengths need far more together. None fails: those that do not fit wait, the newest are
    preempted and recomputed when the oldest grow, and every completion equals offline generate."""
    from intelrt.decoding.tuning import DecodeTuning

    loaded = intelrt.load(model_dir)
    bytes_per_token = 2 * 2 * 2 * 16 * 4  # the tiny model: layers x (K, V) x heads x head_dim x float32
    loaded.decode_tuning = DecodeTuning(block_size=4, cpu_kv_cache_bytes=96 * bytes_per_token, max_batch_tokens=32)
    lines: list[str] = []
    prompts = [[5 + (i * 11 + j) % 300 for j in range(3 + (i * 7) % 30)] for i in range(16)]
    lengths = [4 + (i * 5) % 21 for i in range(16)]
    assert max(len(p) + n for p, n in zip(prompts, lengths, strict=True)) <= 64
    with Server(create_app(loaded, model_name=NAME, max_batch=8, context_length=64, max_queue=64,
                           announce=lines.append)) as small:
        client = small.client()
        with ThreadPoolExecutor(16) as pool:
            answers = list(pool.map(lambda i: client.completions.create(model=NAME, prompt=prompts[i],
                                                                        max_tokens=lengths[i], temperature=0),
                                    range(16)))
        preempted = metric(small.url, "intelrt_preemptions_total")
        used = metric(small.url, "intelrt_kv_cache_blocks_used")
    for prompt, length, answer in zip(prompts, lengths, answers, strict=True):
        assert answer.choices[0].text == text_of(offline, expected_ids(offline, prompt, length))
    assert preempted >= 1 and used == 0
    assert "KV cache: 24 blocks of 4 tokens" in "\n".join(lines)


def test_serve_long_prompts_chunked_and_shared_prefixes_cached_give_offline_tokens(model_dir: Path,
                                                                                   offline: intelrt.Loaded) -> None:
    """Prompts of 5 to 300 tokens through a budget of 64 tokens a step (the long ones prefilled in
    chunks between the short ones' decode steps), half of them after one shared 96-token header:
    every completion equals offline generate, and the header's blocks are found in the prefix cache."""
    from intelrt.decoding.tuning import DecodeTuning

    loaded = intelrt.load(model_dir)
    loaded.decode_tuning = DecodeTuning(max_batch_tokens=64)
    header = list(offline.tokenizer("You are a terse assistant. " * 12)["input_ids"])[:96]
    prompts = [[5 + (i * 13 + j) % 300 for j in range(5 + (i * 37) % 296)] for i in range(10)]
    prompts = [header + p if i % 2 else p for i, p in enumerate(prompts)]
    with Server(create_app(loaded, model_name=NAME, max_queue=64, announce=lambda line: None)) as served:
        client = served.client()
        with ThreadPoolExecutor(len(prompts)) as pool:
            answers = list(pool.map(lambda p: client.completions.create(model=NAME, prompt=p, max_tokens=12,
                                                                        temperature=0), prompts))
        hits = metric(served.url, "intelrt_prefix_cache_hit_tokens_total")
    for prompt, answer in zip(prompts, answers, strict=True):
        assert answer.choices[0].text == text_of(offline, expected_ids(offline, prompt, 12))
    assert hits >= 4 * (96 // 16 * 16)  # the later header requests reuse its full blocks


# -- models the fast loop cannot batch in flight ----------------------------------------------------

def _served_alone(loaded: intelrt.Loaded, prompts: list[str], max_new: int) -> tuple[list[str], list[str]]:
    """(what the server said at start, greedy texts of ``prompts`` asked at once) from a server of ``loaded``."""
    lines: list[str] = []
    with Server(create_app(loaded, model_name=NAME, announce=lines.append)) as running:
        client = running.client()
        with ThreadPoolExecutor(len(prompts)) as pool:
            answers = list(pool.map(lambda p: client.completions.create(model=NAME, prompt=p, max_tokens=max_new,
                                                                        temperature=0), prompts))
        full = answers[0].choices[0].text
        stop = full[4:7]
        assert stop
        cut = client.completions.create(model=NAME, prompt=prompts[0], max_tokens=max_new, temperature=0, stop=stop,
                                        stream=True)
        assert "".join(c.choices[0].text for c in cut) == full[:full.find(stop)]
    return lines, [a.choices[0].text for a in answers]


def test_serve_a_model_decoded_by_generate_one_completion_at_a_time(model_dir: Path) -> None:
    loaded = intelrt.load(model_dir, quantization="8bit")  # the plan decodes LLM.int8 weights with generate
    assert loaded.plan.decided.decode is not None and not loaded.plan.decided.decode.fast
    expected = [loaded.generate(p, max_new_tokens=12) for p in PROMPTS[:3]]
    lines, texts = _served_alone(loaded, PROMPTS[:3], 12)
    assert texts == expected
    said = "\n".join(lines)
    assert "engine: one completion at a time: the plan decodes with transformers' generate" in said
    assert "bitsandbytes 8-bit weights" in said


def test_serve_a_sliding_window_model_outside_the_compact_step_batches_in_flight(tmp_path: Path) -> None:
    """Sliding-window layers of a class outside the compact step (Ministral): the engine runs the
    model's own forward over the paged cache (its sliding layers masked to their window), so its
    completions batch in flight like any other's (once they went one at a time: transformers'
    sliding cache layers roll their slots), and stop strings end them early."""
    import torch
    from transformers import AutoTokenizer, MinistralConfig, MinistralForCausalLM

    from intelrt.tiny import build_tokenizer

    build_tokenizer(tmp_path)
    tokenizer = AutoTokenizer.from_pretrained(tmp_path)
    config = MinistralConfig(vocab_size=len(tokenizer), hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                             num_attention_heads=2, num_key_value_heads=1, head_dim=16, max_position_embeddings=256,
                             sliding_window=16, layer_types=["full_attention", "sliding_attention"], eos_token_id=None,
                             bos_token_id=None)
    torch.manual_seed(0)
    model = MinistralForCausalLM(config)
    from varied_weights import vary

    vary(model, seed=2)
    model.generation_config.eos_token_id = None
    model.save_pretrained(tmp_path)
    loaded = intelrt.load(tmp_path)
    assert loaded.plan.decided.decode is not None and loaded.plan.decided.decode.step == "model"
    expected = [loaded.generate(p, max_new_tokens=20) for p in PROMPTS[:2]]
    assert loaded.last_generation is not None and loaded.last_generation.path == "fast"
    lines, texts = _served_alone(loaded, PROMPTS[:2], 20)
    assert texts == expected
    said = "\n".join(lines)
    assert "engine: in-flight batching" in said and "decode step: model" in said


# -- the command line -----------------------------------------------------------------------------

def _cli(*args: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}
    return subprocess.run([sys.executable, "-m", "intelrt.cli", *args], capture_output=True, text=True, timeout=120,
                          env=env)


def test_cli_serve_takes_the_plan_options_and_its_own() -> None:
    result = _cli("serve", "--help")
    assert result.returncode == 0, result.stderr
    for flag in ("--host", "--port", "--served-model-name", "--max-batch", "--context-length", "--max-queue",
                 "--drain-timeout", "--backend", "--devices", "--dtype", "--quantization", "--graphs", "--simulate",
                 "--api-key", "--allowed-origins", "--allowed-methods", "--allowed-headers", "--allow-credentials",
                 "--chat-template", "--no-access-log", "--lora", "--gpu-memory-utilization", "--max-batch-tokens",
                 "--no-prefix-caching"):
        assert flag in result.stdout


def test_cli_serve_simulated_shows_the_dry_plan_and_the_limits(tiny_model: Path) -> None:
    result = _cli("serve", str(tiny_model), "--simulate", "xpu:1", "--json")
    assert result.returncode == 0, result.stderr
    shown = json.loads(result.stdout)
    assert shown["plan"]["backend"]["name"] == "xpu"
    assert shown["engine"].startswith("in-flight batching") and shown["rows"] == 64 and shown["context"] == 512
    assert any("names no batch size" in r for r in shown["reasons"])
    text = _cli("serve", str(tiny_model), "--simulate", "hpu:1", "--max-batch", "8", "--context-length", "256")
    assert text.returncode == 0, text.stderr
    assert "rows in flight: 8" in text.stdout and "context per row: 256 tokens" in text.stdout
    refused = _cli("serve", str(tiny_model), "--simulate", "xpu:1", "--context-length", "9999")
    assert refused.returncode == 2 and "context_length=9999 is more than the model reads" in refused.stderr
    too_much = _cli("serve", str(tiny_model), "--simulate", "xpu:1", "--gpu-memory-utilization", "1.5")
    assert too_much.returncode == 2 and "--gpu-memory-utilization 1.5 must be a number in (0, 1]" in too_much.stderr


def test_without_the_serve_extra_every_command_runs_and_serve_says_what_to_install(tiny_model: Path) -> None:
    """A plain ``pip install intelrt`` has no fastapi, uvicorn or prometheus-client: building the
    command line must not import them (every command crashed once), and ``serve`` names the extra."""
    hidden = ("import sys\n"
              "for name in ('fastapi', 'uvicorn', 'prometheus_client', 'starlette'):\n"
              "    sys.modules[name] = None  # import fails, importlib.util.find_spec answers None\n"
              "from intelrt.cli.app import main\n"
              "sys.exit(main(sys.argv[1:]))\n")
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}

    def cli(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run([sys.executable, "-c", hidden, *args], capture_output=True, text=True, timeout=120,
                              env=env)

    listed = cli("plugins", "--json")
    assert listed.returncode == 0 and json.loads(listed.stdout)["plugins"], listed.stderr
    assert cli("serve", "--help").returncode == 0
    refused = cli("serve", str(tiny_model))
    assert refused.returncode == 2, refused.stderr
    assert "pip install 'intelrt[serve]'" in refused.stderr and "Traceback" not in refused.stderr
