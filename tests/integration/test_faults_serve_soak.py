"""Fault catalogue, area serve: a soak of ``intelrt serve`` (issue 34): a real server process on the tiny model, mixed traffic
from many ``openai`` and ``httpx`` clients on 127.0.0.1 — prompt and output lengths drawn wide,
shared prefixes, streamed and not, clients that disconnect or cancel their stream at random — then
``SIGTERM`` at a random moment of a second round.

Afterwards: every request completed exactly once (its ``request_id`` answered once, a stream
ending in ``[DONE]``) or got a clean end (an OpenAI error object of a draining server, a refused
connection after the signal, or the disconnect the client chose); none lost, none duplicated; no
completion or KV block left in the engine — read from ``/metrics`` between the rounds and from
the server's ``stopped:`` line after the drain; exit status 0. The figures are printed.
"""

from __future__ import annotations

import json
import os
import random
import re
import signal
import socket
import subprocess
import sys
import threading
import time
from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import openai
import pytest
from faults import Catalogue, Fault, Seen, check, works

try:  # the openai client's own HTTP library, under whichever name it is installed
    import httpx2 as httpx
except ImportError:  # pragma: no cover - depends on the installed openai
    import httpx  # type: ignore[no-redef]

catalogue = Catalogue(__file__)
NAME = "tiny"
CLIENTS = 12
ROUND_S = 8.0
SEED = int(os.environ.get("INTELRT_SOAK_SEED", "34"))
PREFIXES = ["You are a terse assistant for Intel GPU questions. ", "Answer in one line, as a Gaudi expert would. ",
            "The following is a conversation about paged KV caches. "]
WORDS = "intel gpu gaudi tensor kernel cache block prefix token batch queue row stream decode prefill".split()
KINDS = ("openai", "openai-stream", "chat-stream", "long-stream", "stream-disconnect", "stream-cancel",
         "post-disconnect")
"""How a request is made: the openai client whole or streamed (completions, chat; a long stream of
400 tokens, which the drain timeout may cut), an httpx stream the client leaves after a few
chunks, an openai stream closed early, a non-streamed httpx request whose client gives up."""


@dataclass
class Outcome:
    id: str
    kind: str
    round: int
    end: str = "lost"
    """completed, disconnected (by the client, on purpose), refused (no connection after SIGTERM),
    error (an OpenAI error object: ``detail`` says its status and code), or lost."""
    detail: str = ""
    answers: int = 0
    """Answers (or streams) that carried this request's id."""


def _port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def _metrics(url: str) -> dict[str, float]:
    values: dict[str, float] = {}
    for line in httpx.get(f"{url}/metrics", timeout=10).text.splitlines():
        if line and not line.startswith("#") and "{" not in line:
            name, value = line.rsplit(" ", 1)
            values[name] = float(value)
    return values


def _prompt(rng: random.Random) -> str:
    words = int(min(40, rng.lognormvariate(2.0, 1.0))) + 1  # log-normal lengths, 1 … 40 words (≤ ~300 tokens)
    body = " ".join(rng.choice(WORDS) for _ in range(words))
    return (rng.choice(PREFIXES) + body) if rng.random() < 0.6 else body


def _one(url: str, client: openai.OpenAI, outcome: Outcome, rng: random.Random) -> None:
    """Make one request as ``outcome.kind`` says and record how it ended."""
    kind, prompt, tokens = outcome.kind, _prompt(rng), rng.choice([1, 2, 4, 8, 16, 32, 64, 96])
    extra = {"request_id": outcome.id, "ignore_eos": True}
    try:
        if kind == "openai":
            answer = client.completions.create(model=NAME, prompt=prompt, max_tokens=tokens, temperature=0,
                                               extra_body=extra)
            outcome.answers += answer.id == outcome.id
            outcome.end = "completed" if answer.choices[0].finish_reason == "length" else "wrong"
        elif kind in ("openai-stream", "chat-stream", "stream-cancel", "long-stream"):
            if kind == "long-stream":
                stream: Any = client.completions.create(model=NAME, prompt=" ".join(prompt.split()[:4]),
                                                        max_tokens=400, stream=True, temperature=0, extra_body=extra)
            elif kind == "chat-stream":
                stream = client.chat.completions.create(
                    model=NAME, messages=[{"role": "user", "content": prompt}], max_tokens=tokens, stream=True,
                    temperature=0.8, seed=rng.randrange(1000), extra_body=extra)
            else:
                stream = client.completions.create(model=NAME, prompt=prompt, max_tokens=max(tokens, 16), stream=True,
                                                   temperature=0, extra_body=extra)
            leave_after = rng.randint(1, 4) if kind == "stream-cancel" else None
            ids, finished, chunks = set(), False, 0
            for chunk in stream:
                ids.add(chunk.id)
                chunks += 1
                finished = finished or any(c.finish_reason for c in chunk.choices)
                if leave_after is not None and chunks >= leave_after:
                    stream.close()  # the openai client's own cancellation
                    outcome.end = "disconnected"
                    break
            outcome.answers += ids == {outcome.id}
            if outcome.end != "disconnected":
                outcome.end = "completed" if finished else "wrong"
                outcome.detail = "" if finished else f"stream ended without a finish after {chunks} chunks"
        elif kind == "stream-disconnect":
            body = {"model": NAME, "prompt": prompt, "max_tokens": 150, "stream": True, **extra}
            with httpx.stream("POST", f"{url}/v1/completions", json=body, timeout=30) as response:
                if response.status_code != 200:
                    response.read()
                    raise _answer_error(response)
                leave_after = rng.randint(1, 6)
                for count, _line in enumerate(response.iter_lines()):
                    if count >= leave_after:
                        break
            outcome.end = "disconnected"
        else:  # post-disconnect: a non-streamed client that gives up
            try:
                response = httpx.post(f"{url}/v1/completions", json={"model": NAME, "prompt": prompt,
                                                                      "max_tokens": 150, **extra},
                                      timeout=rng.uniform(0.05, 0.4))
            except httpx.TimeoutException:
                outcome.end = "disconnected"
            else:
                if response.status_code != 200:
                    raise _answer_error(response)
                outcome.answers += response.json()["id"] == outcome.id
                outcome.end = "completed"
    except openai.APIStatusError as exc:
        body = exc.body if isinstance(exc.body, dict) else {}
        outcome.end, outcome.detail = "error", f"{exc.status_code} {body.get('code')}: {body.get('message')}"
    except _AnswerError as exc:
        outcome.end, outcome.detail = "error", str(exc)
    except (openai.APITimeoutError, httpx.TimeoutException) as exc:
        outcome.end, outcome.detail = "lost", f"no answer in time ({type(exc).__name__})"
    except (openai.APIConnectionError, httpx.TransportError) as exc:  # after SIGTERM: no connection taken
        outcome.end, outcome.detail = "refused", type(exc).__name__
    except openai.APIError as exc:  # an error event inside a stream (the drain timeout passed)
        outcome.end, outcome.detail = "error", f"stream error event: {exc.message}"


class _AnswerError(Exception):
    pass


def _answer_error(response: httpx.Response) -> _AnswerError:
    try:
        error = response.json()["error"]
        return _AnswerError(f"{response.status_code} {error.get('code')}: {error.get('message')}")
    except (ValueError, KeyError, TypeError):
        return _AnswerError(f"{response.status_code}, not an OpenAI error object: {response.text[:200]!r}")


def _traffic(url: str, outcomes: list[Outcome], round_: int, until: threading.Event, deadline: float,
             rng: random.Random) -> None:
    client = openai.OpenAI(base_url=f"{url}/v1", api_key="unused", max_retries=0, timeout=60)
    while not until.is_set() and time.monotonic() < deadline:
        outcome = Outcome(f"soak-{round_}-{len(outcomes)}-{rng.randrange(10**9)}", rng.choice(KINDS), round_)
        outcomes.append(outcome)
        _one(url, client, outcome, rng)
        if outcome.end == "refused":
            return  # the server is gone


def _round(url: str, round_: int, seconds: float, rng: random.Random, sigterm_at: float | None,
           process: subprocess.Popen[str]) -> list[Outcome]:
    outcomes: list[Outcome] = []
    stop = threading.Event()
    deadline = time.monotonic() + seconds
    threads = [threading.Thread(target=_traffic, args=(url, outcomes, round_, stop, deadline,
                                                       random.Random(rng.randrange(10**9))), daemon=True)
               for _ in range(CLIENTS)]
    for thread in threads:
        thread.start()
    if sigterm_at is not None:
        time.sleep(sigterm_at)
        process.send_signal(signal.SIGTERM)
    for thread in threads:
        thread.join(60)
        assert not thread.is_alive(), "a client never got an answer (lost)"
    return outcomes


@pytest.mark.timeout(180)
@catalogue.cases(
    works("serve-soak-mixed-traffic-disconnects-and-sigterm", "serve",
          "two rounds of mixed traffic from 12 clients (openai and httpx; streamed and not; shared prefixes; random "
          "disconnects and cancellations), SIGTERM at a random moment of the second", "lost", "duplicated",
          "leaked_blocks_after_drain", risk="silent wrong",
          trigger="intelrt serve --max-batch 16 --drain-timeout 1; 2 x 8 s of traffic; SIGTERM after 1 … 6 s"),
)
def test_soak_mixed_traffic_disconnects_and_sigterm_lose_nothing(case: Fault, tiny_model: Path) -> None:
    rng = random.Random(SEED)
    port = _port()
    url = f"http://127.0.0.1:{port}"
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path), "OMP_NUM_THREADS": "1"}
    started = time.monotonic()
    process = subprocess.Popen([sys.executable, "-m", "intelrt.cli", "serve", str(tiny_model), "--port", str(port),
                                "--served-model-name", NAME, "--max-batch", "16", "--drain-timeout", "1",
                                "--client-timeout", "5", "--no-access-log"],
                               stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env)
    try:
        deadline = time.monotonic() + 90
        while True:
            try:
                if httpx.get(f"{url}/ready", timeout=2).status_code == 200:
                    break
            except httpx.TransportError:
                pass
            assert process.poll() is None and time.monotonic() < deadline, "the server never became ready"
            time.sleep(0.1)
        first = _round(url, 1, ROUND_S, rng, None, process)
        quiet = time.monotonic() + 15  # the disconnected clients' rows end at the decode thread's next look
        between = _metrics(url)
        while (between["intelrt_rows_in_flight"] or between["intelrt_kv_cache_blocks_used"]
               or between["intelrt_queue_depth"]) and time.monotonic() < quiet:
            time.sleep(0.1)
            between = _metrics(url)
        sigterm_at = rng.uniform(1.0, ROUND_S - 2)
        second = _round(url, 2, ROUND_S, rng, sigterm_at, process)
        output, _ = process.communicate(timeout=60)
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()
    wall = time.monotonic() - started
    outcomes = first + second
    ends = Counter(o.end for o in outcomes)
    errors = Counter(o.detail.split(":")[0] for o in outcomes if o.end == "error")
    lost = [o for o in outcomes if o.end in ("lost", "wrong")]
    completed = [o for o in outcomes if o.end == "completed"]
    duplicated = [o for o in outcomes if o.answers > 1]
    unanswered = [o for o in completed if o.answers != 1]
    stopped = re.search(r"stopped: (\d+) completions left in the engine, ([\d,]+) of ([\d,]+) KV blocks held", output)
    figures = {"seed": SEED, "wall_s": round(wall, 1), "requests": len(outcomes), "completed": len(completed),
               "streamed": sum("stream" in o.kind for o in outcomes),
               "disconnects": sum(o.end == "disconnected" and o.kind in ("stream-disconnect", "post-disconnect")
                                  for o in outcomes),
               "cancellations": sum(o.end == "disconnected" and o.kind == "stream-cancel" for o in outcomes),
               "errors": dict(errors), "refused_after_sigterm": ends["refused"], "kills": 1,
               "sigterm_after_s": round(sigterm_at, 2), "lost": len(lost), "duplicated": len(duplicated),
               "leaked_rows_between_rounds": between["intelrt_rows_in_flight"],
               "leaked_blocks_between_rounds": between["intelrt_kv_cache_blocks_used"],
               "leaked_rows_after_drain": int(stopped.group(1)) if stopped else None,
               "leaked_blocks_after_drain": int(stopped.group(2).replace(",", "")) if stopped else None,
               "exit_code": process.returncode}
    print("soak figures: " + json.dumps(figures))
    assert process.returncode == 0, output[-3000:]
    assert not lost, [(o.id, o.kind, o.end, o.detail) for o in lost[:10]]
    assert not duplicated and not unanswered, [(o.id, o.answers) for o in (duplicated + unanswered)[:10]]
    # A request on an open connection of a draining server: 503 shutting_down, or its drain timeout's end.
    assert all(o.detail.startswith(("503", "stream error event")) and "shutting down" in o.detail
               for o in outcomes if o.end == "error"), [o.detail for o in outcomes if o.end == "error"]
    assert not any(o.end in ("error", "refused") for o in first), [(o.kind, o.detail) for o in first if o.detail]
    assert between["intelrt_rows_in_flight"] == 0 and between["intelrt_kv_cache_blocks_used"] == 0, between
    assert stopped is not None, output[-3000:]
    assert stopped.group(1) == "0" and stopped.group(2) == "0", stopped.group(0)
    assert len(completed) >= 50 and figures["disconnects"] >= 5 and figures["cancellations"] >= 3, figures
    check(case, Seen(stdout="soak figures: " + json.dumps(figures), stderr=output))  # and no traceback in its log
