"""Fault catalogue: ``intelrt serve`` given what hostile but realistic clients send, and clients
that leave, stop reading or never come back — a real uvicorn server on 127.0.0.1, raw HTTP
(``httpx``) and raw sockets.

Every accepted request finishes or ends with an OpenAI error object naming the cause (never a
``500``); a client that disconnects, streamed or not, has its row cancelled and is counted
``499``; one that stops reading its stream is cut after ``client_timeout`` (``408``); a decode
step that fails ends the requests in flight with an error naming it; scanners and random model
names add no metric series. The server's own log (uvicorn's and intelrt's loggers) is part of
what each case checks: no traceback in it.
"""

from __future__ import annotations

import json
import logging
import random
import socket
import string
import threading
import time
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pytest
import uvicorn
from faults import Catalogue, Fault, Seen, call, check, cli, error, works

import intelrt
from intelrt.serving import create_app

try:  # the openai client's own HTTP library, under whichever name it is installed
    import httpx2 as httpx
except ImportError:  # pragma: no cover - depends on the installed openai
    import httpx  # type: ignore[no-redef]

catalogue = Catalogue(__file__)
NAME = "tiny"
CLIENT_TIMEOUT_S = 1.0
SEND_BUFFER = 4096
"""The send buffer of the server's second listening socket (accepted connections inherit it):
small, so that a client that stops reading fills it within a few hundred tokens instead of
megabytes. Only the stalled client connects there (small buffers slow every answer down)."""


class HttpError(Exception):
    """An answer with status >= 400, as the client reads it: status, OpenAI error object."""

    def __init__(self, status: int, body: Any) -> None:
        error = body.get("error") if isinstance(body, dict) else None
        self.status, self.error = status, error
        if isinstance(error, dict):
            text = f"{status} {error.get('type')} param={error.get('param')} code={error.get('code')}: " \
                   f"{error.get('message')}"
        else:
            text = f"{status}, not an OpenAI error object: {body!r:.300}"
        super().__init__(text)


class _Lines(logging.Handler):
    def __init__(self) -> None:
        super().__init__(logging.DEBUG)
        self.setFormatter(logging.Formatter("%(levelname)s %(name)s: %(message)s"))
        self.lines: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.lines.append(self.format(record))  # with the traceback of exc_info, if any


class Served:
    """The app under uvicorn on a thread; everything its loggers write collected."""

    def __init__(self, app: Any) -> None:
        self.app = app
        self.socket, self.small = socket.socket(), socket.socket()
        self.small.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, SEND_BUFFER)
        for listening in (self.socket, self.small):
            listening.bind(("127.0.0.1", 0))
        self.url = f"http://127.0.0.1:{self.socket.getsockname()[1]}"
        self.small_port = int(self.small.getsockname()[1])
        self.server = uvicorn.Server(uvicorn.Config(app, log_level="warning"))
        self.thread = threading.Thread(target=self.server.run, kwargs={"sockets": [self.socket, self.small]},
                                       daemon=True)
        self.log = _Lines()

    def __enter__(self) -> Served:
        self.thread.start()
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline:
            try:
                if httpx.get(f"{self.url}/ready", timeout=5).status_code == 200:
                    break
            except httpx.TransportError:
                pass
            time.sleep(0.1)
        for name in ("uvicorn", "uvicorn.error", ""):  # uvicorn's loggers do not propagate to the root
            logging.getLogger(name).addHandler(self.log)
        return self

    def __exit__(self, *exc: object) -> None:
        for name in ("uvicorn", "uvicorn.error", ""):
            logging.getLogger(name).removeHandler(self.log)
        self.server.should_exit = True
        self.thread.join(30)

    @property
    def state(self) -> Any:
        return self.app.state.intelrt

    def metric(self, name: str) -> float:
        text = httpx.get(f"{self.url}/metrics").text
        starts = (name,) if "{" in name else (name + " ", name + "{")  # a series, or every series of a metric
        return sum(float(line.rsplit(" ", 1)[1]) for line in text.splitlines() if line.startswith(starts))

    def seen(self, run: Callable[[], Any]) -> Seen:
        """``run()`` (raising :class:`HttpError` for an error answer), with the server's log meanwhile."""
        mark = len(self.log.lines)
        seen = Seen()
        try:
            seen.value = run()
        except Exception as exc:  # noqa: BLE001 - the case's outcome, checked by check()
            seen.error = exc
        time.sleep(0.05)  # what the server logs right after answering
        seen.stderr = "\n".join(self.log.lines[mark:])
        return seen

    def wait_rows_free(self, timeout: float = 30) -> float:
        """Seconds until no completion decodes (``AssertionError`` after ``timeout``)."""
        started = time.monotonic()
        while self.metric("intelrt_rows_in_flight") > 0:
            assert time.monotonic() - started < timeout, "a row was still decoding"
            time.sleep(0.05)
        return time.monotonic() - started


@pytest.fixture(scope="module")
def served(tiny_model: Path, one_torch_thread: None) -> Iterator[Served]:
    from intelrt.decoding.tuning import DecodeTuning

    loaded = intelrt.load(tiny_model)
    # Short looks (vLLM-like one-step scheduling granularity): a stalled client must be seen while its
    # rows still decode; 8 steps a look let the tiny model's 480 tokens end before the 1 s timeout.
    loaded.decode_tuning = DecodeTuning(inflight_steps=1)
    app = create_app(loaded, model_name=NAME, announce=lambda line: None, client_timeout=CLIENT_TIMEOUT_S)
    with Served(app) as running:
        yield running


def post(served: Served, path: str, body: Any, **kwargs: Any) -> Any:
    """POST ``body`` (bytes as they are, else JSON); the answer's JSON, or :class:`HttpError`."""
    content = body if isinstance(body, bytes) else json.dumps(body).encode()
    response = httpx.post(f"{served.url}{path}", content=content, headers={"content-type": "application/json"},
                          timeout=60)
    try:
        answer = response.json()
    except ValueError:
        answer = response.text
    if response.status_code >= 400:
        raise HttpError(response.status_code, answer)
    return answer


# -- bad input: a 4xx error object naming the field, before any decoding -----------------------------

C, CHAT = "/v1/completions", "/v1/chat/completions"
SURROGATE = b'"\\ud800"'


def _chat(content: Any, **extra: Any) -> dict[str, Any]:
    return {"model": NAME, "messages": [{"role": "user", "content": content}], "max_tokens": 4, **extra}


def _completion(prompt: Any = "Intel GPUs are", **extra: Any) -> dict[str, Any]:
    return {"model": NAME, "prompt": prompt, "max_tokens": 4, **extra}


BAD = [
    ("lone-surrogate-in-the-prompt", C, b'{"model": "tiny", "prompt": ' + SURROGATE + b"}", "400",
     ("prompt", "lone surrogate"), "a 500 with tracebacks"),
    ("lone-surrogate-in-a-chat-message", CHAT,
     b'{"model": "tiny", "messages": [{"role": "user", "content": ' + SURROGATE + b"}]}", "400",
     ("messages[0].content", "lone surrogate"), "a 500 with tracebacks"),
    ("lone-surrogate-in-a-stop-string", C, b'{"model": "tiny", "prompt": "x", "stop": ' + SURROGATE + b"}", "400",
     ("stop", "lone surrogate"), "a 500 with tracebacks"),
    ("lone-surrogate-as-a-field-name", C, b'{"model": "tiny", "prompt": "x", ' + SURROGATE + b": 1}", "400",
     ("lone surrogate",), "a 500 with tracebacks"),
    ("malformed-json", C, b'{"model": "tiny", "prompt": "x"', "400", ("not valid JSON", "line 1"), ""),
    ("body-is-a-list", C, b'["tiny", "x"]', "400", ("must be a JSON object", "not list"), ""),
    ("body-not-utf8", C, b'{"model": "tiny", "prompt": "\xff\xfe"}', "400", ("not UTF-8",), ""),
    ("empty-prompt", C, _completion(""), "400", ("param=prompt", "empty"), "an empty prompt decoded"),
    ("empty-token-list", C, _completion([[]]), "400", ("param=prompt", "empty"), "an empty prompt decoded"),
    ("prompt-of-2mb", C, _completion("word " * 400_000), "400", ("code=context_length_exceeded", "Shorten it"),
     "tokenized on the event loop"),
    ("chat-message-of-2mb", CHAT, _chat("word " * 400_000), "400",
     ("code=context_length_exceeded", "messages[0].content"), "tokenized on the event loop"),
    ("n-above-the-rows", C, _completion(n=100_000), "400", ("param=n", "n=100000", "at most 64"), ""),
    ("n-times-prompts-above-the-rows", C, _completion(["a", "b", "c"], n=30), "400", ("90 completions", "at most 64"),
     ""),
    ("max-tokens-above-the-context", C, _completion(max_tokens=600), "400",
     ("code=context_length_exceeded", "512 tokens", "Lower max_tokens"), ""),
    ("max-tokens-1e12", C, _completion(max_tokens=10**12), "400", ("code=context_length_exceeded",), "hang"),
    ("max-completion-tokens-above-the-context", CHAT, {"model": NAME, "messages": [{"role": "user", "content": "hi"}],
                                                            "max_completion_tokens": 10_000}, "400",
     ("code=context_length_exceeded", "max_completion_tokens"), ""),
    ("max-tokens-as-a-string", C, _completion(max_tokens="5"), "400", ("param=max_tokens",), "silent wrong"),
    ("stream-as-a-string", C, _completion(stream="yes"), "400", ("param=stream",), "silent wrong"),
    ("token-id-outside-the-vocabulary", C, _completion([99_999]), "400", ("vocabulary",), ""),
    ("negative-token-id", C, _completion([5, -1]), "400", ("param=prompt",), ""),
    ("temperature-negative", C, _completion(temperature=-1), "400", ("param=temperature",), ""),
    ("top-p-above-one", C, _completion(top_p=2), "400", ("param=top_p",), ""),
    ("logprobs-above-twenty", C, _completion(logprobs=50), "400", ("param=logprobs",), ""),
    ("unknown-model", C, {**_completion(), "model": "gpt-4"}, "404", ("code=model_not_found", "'tiny'"), ""),
    ("unknown-field", C, _completion(mystery=1), "400", ("param=mystery", "unrecognized"), "silent wrong"),
    ("five-stop-strings", C, _completion(stop=list("abcde")), "400", ("param=stop", "at most 4"), ""),
    ("empty-stop-string", C, _completion(stop=["", "x"]), "400", ("param=stop", "empty string"),
     "silent wrong: dropped without a word"),
    ("empty-stop-string-alone", C, _completion(stop=""), "400", ("param=stop", "empty string"), "silent wrong"),
    ("echo-with-logprobs", C, _completion(echo=True, logprobs=2), "400", ("param=echo",), ""),
    ("chat-without-messages", CHAT, {"model": NAME, "messages": []}, "400", ("param=messages",), ""),
    ("chat-message-of-an-unknown-role", CHAT, {"model": NAME, "messages": [{"role": "wizard", "content": "hi"}]},
     "400", ("messages[0]",), ""),
    ("request-id-of-300-characters", C, _completion(request_id="r" * 300), "400", ("param=request_id",), ""),
    ("tools-on-a-template-without-them", CHAT, _chat("hi", tools=[{"type": "function", "function": {"name": "f"}}]),
     "400", ("param=tools",), ""),
    ("top-k-below-minus-one", C, _completion(top_k=-5), "400", ("param=top_k",), ""),
    ("logit-bias-key-not-a-token", C, _completion(logit_bias={"abc": 1}), "400", ("param=logit_bias", "'abc'"), ""),
    ("logit-bias-outside-the-vocabulary", C, _completion(logit_bias={"99999": 1}), "400",
     ("param=logit_bias", "99999"), ""),
    ("logit-bias-of-1000", C, _completion(logit_bias={"5": 1000}), "400", ("param=logit_bias", "-100 and 100"), ""),
    ("seed-above-int64", C, _completion(seed=2**70), "400", ("param=seed",), ""),
    ("best-of-above-n", C, _completion(best_of=3), "400", ("best_of=3",), "silent wrong"),
    ("min-tokens", C, _completion(min_tokens=10), "400", ("min_tokens=10",), "silent wrong"),
    ("stop-token-id-outside-the-vocabulary", C, _completion(stop_token_ids=[99_999]), "400",
     ("param=stop_token_ids",), ""),
    ("allowed-token-ids-empty", C, _completion(allowed_token_ids=[]), "400", ("param=allowed_token_ids", "empty"),
     "silent wrong"),
    ("json-schema-xgrammar-cannot-compile", C,
     _completion(response_format={"type": "json_schema", "json_schema": {"name": "x", "schema": {"type": "nonsense"}}}),
     "400", ("response_format.json_schema.schema", "cannot be compiled"), ""),
    ("temperature-nan", C, b'{"model": "tiny", "prompt": "x", "temperature": NaN}', "400", ("param=temperature",),
     "silent wrong"),
    ("max-tokens-1e400", C, b'{"model": "tiny", "prompt": "x", "max_tokens": 1e400}', "400", ("param=max_tokens",),
     ""),
    ("stream-options-without-stream", C, _completion(stream_options={"include_usage": True}), "400",
     ("param=stream_options",), "silent wrong"),
    ("image-content-part", CHAT, _chat([{"type": "image_url", "image_url": {"url": "http://x"}}]), "400",
     ("messages[0].content[0]", "image_url"), "silent wrong"),
    ("tool-message-without-its-call-id", CHAT, {"model": NAME, "messages": [{"role": "tool", "content": "x"}]}, "400",
     ("tool_call_id",), ""),
    ("tool-choice-without-tools", CHAT, _chat("hi", tool_choice="required"), "400", ("param=tool_choice",), ""),
    ("top-logprobs-above-twenty", CHAT, _chat("hi", logprobs=True, top_logprobs=50), "400", ("param=top_logprobs",),
     ""),
    ("chat-template-that-raises", CHAT, _chat("hi", chat_template="{{ raise_exception('only one user turn') }}"),
     "400", ("chat template refused", "only one user turn"), ""),
    ("chat-template-syntax-error", CHAT, _chat("hi", chat_template="{% for %}"), "400",
     ("chat template refused",), ""),
    ("chat-template-kwargs-set-tokenize", CHAT, _chat("hi", chat_template_kwargs={"tokenize": True}), "400",
     ("param=chat_template_kwargs", "tokenize"), "wrong culprit"),
]
BAD_CASES = [error(f"serve-{name}", "serve", name.replace("-", " "), status, *says, error="HttpError",
                   risk="silent wrong" if "silent" in before else "hang" if "hang" in before or "event loop" in before
                   else "wrong culprit" if "culprit" in before else "traceback",
                   trigger=f"POST {path} {body[:70]!r}" if isinstance(body, bytes) else
                   f"POST {path} {json.dumps(body)[:70]}…", data=(path, body))
             for name, path, body, status, says, before in BAD]


@catalogue.cases(BAD_CASES)
def test_bad_requests_get_an_error_object_naming_the_field(case: Fault, served: Served) -> None:
    path, body = case.data
    started = time.monotonic()
    seen = check(case, served.seen(lambda: post(served, path, body)))
    assert isinstance(seen.error, HttpError) and isinstance(seen.error.error, dict)
    assert seen.error.status != 500
    assert time.monotonic() - started < 5, "refused, but only after decoding or tokenizing for seconds"


def test_405_and_404_are_error_objects_too(served: Served) -> None:
    wrong_method = httpx.get(f"{served.url}/v1/completions")
    assert wrong_method.status_code == 405 and wrong_method.json()["error"]["message"] == "Method Not Allowed"
    assert httpx.get(f"{served.url}/v1/nowhere").json()["error"]["type"] == "not_found_error"


# -- what is accepted is answered --------------------------------------------------------------------

@catalogue.cases(
    works("serve-stop-string-of-2mb", "serve", "a stop string of 2 MB, longer than any text the context holds",
          "finish_reason", risk="hang", trigger='POST /v1/completions {"stop": "x" * 2_000_000, "max_tokens": 16}',
          data="x" * 2_000_000),
    works("serve-stop-string-of-200k-matching-the-text", "serve",
          "a stop string of 200,000 characters that begins like the answer (held back every token)", "finish_reason",
          risk="hang", trigger="stop = the prompt's greedy answer's first 2 characters + 'q' * 200_000",
          data="q" * 200_000),
)
def test_long_stop_strings_cost_nothing(case: Fault, served: Served) -> None:
    plain = post(served, C, _completion(max_tokens=16, temperature=0))["choices"][0]["text"]
    stop = case.data if case.data.startswith("x") else plain[:2] + case.data
    started = time.monotonic()
    seen = check(case, served.seen(lambda: post(served, C, _completion(max_tokens=16, temperature=0, stop=stop))))
    took = time.monotonic() - started
    choice = seen.value["choices"][0]
    assert choice["text"] == plain and choice["finish_reason"] == "length"  # the stop string never matched
    assert took < 5, f"a long stop string took {took:.1f} s (the decode thread slices it every token)"
    seen.stdout = json.dumps(seen.value)


def _stream_lines(served: Served, body: dict[str, Any], stop_after: int | None) -> list[str]:
    """A streaming client reading ``data:`` lines; after ``stop_after`` of them it disconnects."""
    lines: list[str] = []
    with httpx.stream("POST", f"{served.url}{C}", json={**body, "stream": True}, timeout=60) as response:
        for line in response.iter_lines():
            if line.startswith("data: "):
                lines.append(line)
                if stop_after is not None and len(lines) >= stop_after:
                    break
    return lines


def _requests(served: Served, code: int) -> float:
    return served.metric(f'intelrt_requests_total{{code="{code}",endpoint="/v1/completions"}}')


LONG = {"model": NAME, "prompt": "x", "max_tokens": 480, "ignore_eos": True, "temperature": 0}


@catalogue.cases(
    works("serve-client-disconnects-mid-stream", "serve", "a streaming client that disconnects after 3 chunks of 480",
          "499", risk="silent wrong", trigger="httpx.stream(...); break after 3 data lines"),
)
def test_a_streaming_client_that_leaves_frees_its_row(case: Fault, served: Served) -> None:
    before, generated = _requests(served, 499), served.metric("intelrt_generated_tokens_total")

    def leave() -> str:
        assert len(_stream_lines(served, LONG, 3)) == 3
        took = served.wait_rows_free(10)
        return f"row freed {took:.2f} s after the client left; counted {_requests(served, 499) - before:.0f} x 499"

    seen = check(case, served.seen(leave))
    seen.stdout = seen.value
    assert _requests(served, 499) - before == 1
    assert served.metric("intelrt_generated_tokens_total") - generated < 480


@catalogue.cases(
    works("serve-non-streamed-client-disconnects", "serve",
          "a non-streamed client that disconnects 0.5 s into a 480-token completion (its row decoded on, counted 200)",
          "499", risk="silent wrong", trigger="httpx.post(..., timeout=0.5)"),
)
def test_a_non_streamed_client_that_leaves_frees_its_row(case: Fault, served: Served) -> None:
    before, generated = _requests(served, 499), served.metric("intelrt_generated_tokens_total")

    def leave() -> str:
        with pytest.raises(httpx.TimeoutException):
            httpx.post(f"{served.url}{C}", json=LONG, timeout=0.5)
        took = served.wait_rows_free(10)
        deadline = time.monotonic() + 5
        while _requests(served, 499) == before and time.monotonic() < deadline:
            time.sleep(0.05)
        return f"row freed {took:.2f} s after the client left; counted {_requests(served, 499) - before:.0f} x 499"

    seen = check(case, served.seen(leave))
    seen.stdout = seen.value
    assert _requests(served, 499) - before == 1
    assert served.metric("intelrt_generated_tokens_total") - generated < 480


@catalogue.cases(
    works("serve-streaming-client-never-reads", "serve",
          "a streaming client that sends its request and never reads a byte (held its row to max_tokens and its "
          "connection for ever)", "408", risk="hang",
          trigger="a raw socket with a 4 KB receive buffer; n=4, logprobs=20, 480 tokens; client_timeout=1 s"),
)
def test_a_stalled_streaming_client_is_cut_after_the_client_timeout(case: Fault, served: Served) -> None:
    before, generated = _requests(served, 408), served.metric("intelrt_generated_tokens_total")
    body = json.dumps({**LONG, "stream": True, "logprobs": 20, "n": 4}).encode()

    def stall() -> str:
        with socket.socket() as client:
            client.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, SEND_BUFFER)
            client.connect(("127.0.0.1", served.small_port))
            client.sendall(b"POST /v1/completions HTTP/1.1\r\nHost: test\r\nContent-Type: application/json\r\n"
                           b"Content-Length: %d\r\n\r\n%s" % (len(body), body))
            started = time.monotonic()
            while served.metric("intelrt_rows_in_flight") == 0 and time.monotonic() - started < 10:
                time.sleep(0.02)
            took = served.wait_rows_free(30)
            while _requests(served, 408) == before and time.monotonic() - started < 30:
                time.sleep(0.05)
        return f"rows freed {took:.2f} s after they began; counted {_requests(served, 408) - before:.0f} x 408"

    seen = check(case, served.seen(stall))
    seen.stdout = seen.value
    assert _requests(served, 408) - before == 1
    assert served.metric("intelrt_generated_tokens_total") - generated < 4 * 480, "the rows decoded to max_tokens"
    assert "--client-timeout" in seen.stderr


# -- the engine fails: the requests in flight learn why ----------------------------------------------

class _DeviceLost(RuntimeError):
    """What a vendor runtime raises when the device goes away mid-step."""


@pytest.fixture
def failing_step(served: Served) -> Iterator[None]:
    """The next engine step raises (the decode thread's call into the device), once."""
    batch = served.state.decode_thread.batch
    step = batch.step

    def fail() -> Any:
        batch.step = step
        raise _DeviceLost("Level Zero: device lost (ZE_RESULT_ERROR_DEVICE_LOST)")

    batch.step = fail
    yield
    batch.step = step


@catalogue.cases(
    error("serve-decode-step-fails-unstreamed", "serve", "the device fails during a step of a non-streamed request",
          "503", "decoding failed", "_DeviceLost", "device lost", error="HttpError", risk="wrong culprit",
          trigger="the engine's step raises a vendor RuntimeError once"),
)
def test_a_failed_step_ends_the_request_with_its_cause(case: Fault, served: Served, failing_step: None) -> None:
    seen = served.seen(lambda: post(served, C, _completion(max_tokens=8)))
    seen.stderr = seen.stderr.replace("Traceback (most recent call last)", "[the decode thread's log: traceback]")
    check(case, seen)  # the decode thread logs the traceback for the operator; the client gets the cause
    assert post(served, C, _completion(max_tokens=2))["choices"][0]["finish_reason"] == "length"  # and it goes on


@catalogue.cases(
    works("serve-decode-step-fails-streamed", "serve", "the device fails during a step of a streamed request",
          "decoding failed", "[DONE]", risk="silent wrong", trigger="the engine's step raises a vendor RuntimeError once"),
)
def test_a_failed_step_ends_a_stream_with_an_error_event(case: Fault, served: Served, failing_step: None) -> None:
    seen = served.seen(lambda: _stream_lines(served, {**_completion(max_tokens=8)}, None))
    seen.stderr = seen.stderr.replace("Traceback (most recent call last)", "[the decode thread's log: traceback]")
    seen.stdout = "\n".join(seen.value or [])
    check(case, seen)
    assert seen.value[-1] == "data: [DONE]"
    assert json.loads(seen.value[-2].removeprefix("data: "))["error"]["type"] == "server_error"


# -- metric labels stay bounded --------------------------------------------------------------------

def _random_path(rng: random.Random) -> str:
    return "/" + "/".join("".join(rng.choices(string.ascii_letters + string.digits + "-_.~%", k=rng.randint(1, 24)))
                          for _ in range(rng.randint(1, 5)))


@catalogue.cases(
    works("serve-2000-random-paths", "serve", "2,000 requests for random paths (a scanner; /metrics grew 6.8 → 416 KB)",
          "series", risk="leak", trigger="GET/POST/DELETE of 2,000 random paths, then GET /metrics"),
    works("serve-2000-random-model-names", "serve", "2,000 completions and model lookups for random model names",
          "series", risk="leak", trigger='POST /v1/completions {"model": RANDOM}; GET /v1/models/RANDOM'),
)
def test_metric_series_stay_bounded(case: Fault, served: Served) -> None:
    rng = random.Random(case.id)
    if case.id.endswith("paths"):
        calls = [(rng.choice(["GET", "POST", "DELETE"]), _random_path(rng), None) for _ in range(2000)]
    else:
        names = ["".join(rng.choices(string.ascii_letters, k=20)) for _ in range(2000)]
        calls = [("POST", C, _completion(model=n)) if i % 2 else ("GET", f"/v1/models/org/{n}", None)
                 for i, n in enumerate(names)]
    with httpx.Client(base_url=served.url, timeout=30, limits=httpx.Limits(max_connections=16)) as client:
        for method in ("GET", "POST", "DELETE"):  # the series these requests can add exist already
            client.request(method, "/nowhere")
        client.get("/v1/models/x")
        client.post(C, json=_completion(model="x"))
        client.get("/metrics")
        before = client.get("/metrics").text
        with ThreadPoolExecutor(16) as pool:  # one client in this process waits ~45 ms per answer on 2 cores
            list(pool.map(lambda c: client.request(c[0], c[1], json=c[2]), calls))
        after = client.get("/metrics").text

    def series(text: str) -> set[str]:
        return {line.rsplit(" ", 1)[0] for line in text.splitlines() if line and not line.startswith("#")}

    grown = series(after) - series(before)
    seen = Seen(stdout=f"{len(grown)} new series; /metrics {len(before):,} → {len(after):,} bytes")
    check(case, seen)
    assert not grown, sorted(grown)
    assert len(after) < len(before) + 2_000


# -- a hook that hangs while the server starts -------------------------------------------------------

HANGING_HOOK = ("from intelrt import hookimpl\nimport threading\n_never = threading.Event()\n"
                "@hookimpl(tryfirst=True)\ndef intelrt_select_dtype(backend):\n    _never.wait(20)\n")


@catalogue.cases(
    error("serve-plugin-hook-hangs", "serve", "a plugin's selection hook never returns while `intelrt serve` plans",
          "plugin 'servehang'", "did not return within 1 s", exit_code=1, risk="hang",
          trigger="intelrt_select_dtype waits forever; INTELRT_HOOK_TIMEOUT=1 intelrt serve --port 0"),
)
def test_a_hanging_hook_is_cut_by_its_time_limit_when_serving(case: Fault, tmp_path: Path) -> None:
    from intelrt.testing.distributions import install_plugin, uninstall

    module = "intelrt_faults_servehang"
    install_plugin(tmp_path / "servehang", distribution="intelrt-faults-servehang", entry_point="servehang",
                   module=module, source=HANGING_HOOK)
    try:
        started = time.monotonic()
        check(case, cli("serve", "--port", "0", env={"INTELRT_HOOK_TIMEOUT": "1"}), verbose=False)
        assert time.monotonic() - started < 15
    finally:
        uninstall(tmp_path / "servehang", module)


# -- limits against the memory budget, at start ------------------------------------------------------

LIMITS = [
    error("serve-max-batch-1e8", "serve", "`--max-batch 100000000` (a 409 GB allocation traceback on a GPU)",
          "100000000 rows", "pass at most 131072 rows", risk="traceback",
          trigger="intelrt serve --max-batch 100000000", data=["--max-batch", "100000000"]),
    error("serve-context-length-1e8", "serve", "`--context-length 100000000`, past the model's positions",
          "context_length=100000000", "pass at most 512", risk="traceback",
          trigger="intelrt serve --context-length 100000000", data=["--context-length", "100000000"]),
    error("serve-max-batch-tokens-1e11", "serve", "`--max-batch-tokens 100000000000` (accepted, and profiled as one "
          "prefill on a device)", "--max-batch-tokens 100000000000", "pass at most 32768", risk="silent wrong",
          trigger="intelrt serve --max-batch-tokens 100000000000", data=["--max-batch-tokens", "100000000000"]),
    error("serve-max-batch-tokens-1e11-simulated", "serve", "the same under --simulate (the dry plan's limits)",
          "pass at most", risk="silent wrong", trigger="intelrt serve --simulate xpu:1 --max-batch-tokens 100000000000",
          data=["--simulate", "xpu:1", "--max-batch-tokens", "100000000000"]),
    error("serve-client-timeout-zero", "serve", "`--client-timeout 0` (no write could ever be waited for)",
          "--client-timeout", "> 0", risk="silent wrong", trigger="intelrt serve --client-timeout 0",
          data=["--client-timeout", "0"]),
    error("serve-client-timeout-inf", "serve", "`--client-timeout inf` (a stalled client would hold its row for ever)",
          "--client-timeout", "finite", risk="hang", trigger="intelrt serve --client-timeout inf",
          data=["--client-timeout", "inf"]),
    error("serve-gpu-memory-utilization-above-one", "serve", "`--gpu-memory-utilization 2`",
          "--gpu-memory-utilization 2", "(0, 1]", risk="traceback", trigger="intelrt serve --gpu-memory-utilization 2",
          data=["--gpu-memory-utilization", "2"]),
]


@catalogue.cases(LIMITS)
def test_limits_the_budget_cannot_hold_are_refused_at_start(case: Fault, tiny_model: Path) -> None:
    started = time.monotonic()
    check(case, cli("serve", str(tiny_model), "--port", "0", *case.data))
    assert time.monotonic() - started < 60


@catalogue.cases(
    error("serve-context-length-above-the-kv-budget", "serve",
          "a context length the KV cache budget cannot hold once (create_app on a 64-token budget)",
          "cannot hold one completion of 512 tokens", "at most 64 fit", "Pass a context length of at most 64",
          error="ConfigurationError", risk="traceback",
          trigger="m.decode_tuning = DecodeTuning(cpu_kv_cache_bytes=64 tokens); create_app(m, context_length=512)"),
)
def test_a_context_the_kv_budget_cannot_hold_is_refused_with_what_fits(case: Fault, tiny_model: Path) -> None:
    from intelrt.decoding.tuning import DecodeTuning

    loaded = intelrt.load(tiny_model)
    config = loaded.model.config  # a key and a value per layer, head and dimension, for each token
    per_token = 2 * config.num_hidden_layers * config.num_key_value_heads * config.head_dim * loaded.model.dtype.itemsize
    loaded.decode_tuning = DecodeTuning(cpu_kv_cache_bytes=64 * per_token, max_batch_tokens=32)
    check(case, call(lambda: create_app(loaded, model_name=NAME, context_length=512, announce=lambda line: None)))


@catalogue.cases(
    error("serve-max-batch-1e8-on-an-intel-gpu", "serve",
          "100,000,000 rows asked on a device that reports its memory (the profile's batch allocated them first: "
          "409 GB)", "100000000 rows", "pass at most", error="ConfigurationError", risk="traceback",
          trigger="the engine sized for 10**8 rows on a simulated 64 GiB Intel GPU (its runtime's mem_get_info)"),
)
def test_rows_the_device_cannot_hold_are_refused_before_the_profile_allocates(case: Fault, tiny_model: Path) -> None:
    import torch

    from intelrt.decoding.engine import FastDecoder
    from intelrt.host.manager import get_host
    from intelrt.testing.simulation import simulate

    loaded = intelrt.load(tiny_model)
    assert loaded.plan.decided.decode is not None
    with simulate("xpu", 1, memory_gib=64) as sim:
        xpu = next(b for b in get_host().detect({}) if b.name == "xpu")  # the engine asks its backend for memory
        decoder = FastDecoder(loaded.model, loaded.plan.decided.decode, None, backend=xpu)
        seen = check(case, call(lambda: decoder.serving_size(10**8, 512, torch.device("xpu", 0), rows_asked=True)))
    assert "xpu.mem_get_info" in sim.calls
    assert "profile" not in seen.message
