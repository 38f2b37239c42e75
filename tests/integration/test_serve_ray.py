"""``intelrt.serving.ray`` on a real Ray (issue 40; SPEC S5): two replicas of the tiny model on a
two-node ``ray.cluster_utils.Cluster`` (one CPU each, so one replica per node), behind Ray Serve's
HTTP proxy, driven by the ``openai`` client — the same greedy text as one plain ``intelrt serve``,
requests sharing a prefix on one replica (its metrics say so), and a replica killed mid-run losing
no accepted request silently.

Ray's start-up is slow on a 2-core machine: one cluster and one application serve the whole
module (``pytest -m ray`` selects these tests, ``-m 'not ray'`` leaves them out)."""

from __future__ import annotations

import json
import socket
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import openai
import pytest
import ray
from ray import serve
from ray.cluster_utils import Cluster
from test_serve import NAME, PROMPTS, Server, expected_ids, text_of
from varied_weights import varied_copy

import intelrt
from intelrt.serving import create_app
from intelrt.serving.ray import Replication, build_application
from intelrt.serving.ray.application import APP_NAME, REPLICAS, Deploying, replica_report
from intelrt.serving.ray.metrics import replica_ids, replica_label

try:  # the openai client's own HTTP library, under whichever name it is installed
    import httpx2 as httpx
except ImportError:  # pragma: no cover - depends on the installed openai
    import httpx  # type: ignore[no-redef]

pytestmark = [pytest.mark.ray, pytest.mark.timeout(300)]

SHARED = ("You are a careful assistant for Intel Gaudi and Intel GPU questions. Answer in one short sentence, "
          "cite the claim of the contract, and never guess. ")
"""A prefix long enough that Ray's router matches it above its 10 % threshold."""


@dataclass
class Replicated:
    url: str
    cluster: Cluster
    model_dir: Path

    def client(self) -> openai.OpenAI:
        return openai.OpenAI(base_url=f"{self.url}/v1", api_key="unused", max_retries=0, timeout=120)

    def requests_by_replica(self) -> dict[str, float]:
        """Completions answered 200, per replica label (from the ingress's merged ``/metrics``)."""
        counts: dict[str, float] = {}
        for line in httpx.get(f"{self.url}/metrics", timeout=30).text.splitlines():
            if line.startswith("intelrt_requests_total{") and 'endpoint="/v1/completions"' in line \
                    and 'code="200"' in line:
                label = line.split('replica="')[1].split('"')[0]
                counts[label] = counts.get(label, 0) + float(line.rsplit(" ", 1)[1])
        return counts


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@pytest.fixture(scope="module")
def model_dir(tiny_model: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    return varied_copy(tiny_model, tmp_path_factory.mktemp("varied"), seed=1)


@pytest.fixture(scope="module")
def offline(model_dir: Path) -> intelrt.Loaded:
    return intelrt.load(model_dir)


def application(model_dir: Path, replicas: int, **app_options: Any) -> Any:
    """The backend is left to each replica's plan (the CPU here), as ``intelrt serve --replicas`` leaves it."""
    return build_application(str(model_dir), Replication(replicas=replicas),
                             app_options={"model_name": NAME, **app_options})


def stream(url: str, prompt: str, tokens: int, begun: list[int] | None = None) -> dict[str, Any]:
    """A streamed completion read to its end: its status and its SSE events' data."""
    events: list[str] = []
    with httpx.stream("POST", f"{url}/v1/completions", timeout=120,
                      json={"model": NAME, "prompt": prompt, "max_tokens": tokens, "temperature": 0,
                            "stream": True}) as response:
        for line in response.iter_lines():
            if line.startswith("data: "):
                events.append(line.removeprefix("data: "))
                if begun is not None:
                    begun.append(1)
        return {"status": response.status_code, "events": events}


def streamed_text(events: list[str]) -> str:
    return "".join(c["choices"][0]["text"] for c in map(json.loads, events[:-1]) if c.get("choices"))


@pytest.fixture(scope="module")
def replicated(model_dir: Path) -> Iterator[Replicated]:
    """Two nodes of one CPU each (the machine is shared: Ray gets two CPUs in all), two replicas.
    Ray's driver leaves a JSON handler on the root logger (its ``LoggingConfigurator``): it is taken
    off again, so the tests after these log as they did before."""
    import logging

    handlers, level = list(logging.root.handlers), logging.root.level
    cluster = Cluster(initialize_head=True, head_node_args={"num_cpus": 1, "include_dashboard": False})
    cluster.add_node(num_cpus=1)
    try:
        ray.init(address=cluster.address)
        port = _free_port()
        serve.start(http_options={"host": "127.0.0.1", "port": port}, proxy_location="HeadOnly")
        serve.run(application(model_dir, 2), name=APP_NAME, route_prefix="/")
        yield Replicated(f"http://127.0.0.1:{port}", cluster, model_dir)
    finally:
        serve.shutdown()
        ray.shutdown()
        cluster.shutdown()
        for handler in [h for h in logging.root.handlers if h not in handlers]:
            logging.root.removeHandler(handler)
        logging.root.setLevel(level)


def test_two_replicas_on_two_nodes_answer_with_plain_serves_greedy_text(replicated: Replicated,
                                                                        offline: intelrt.Loaded) -> None:
    # two nodes of one CPU and a replica asks for one: one replica per node, the application spans both
    assert len([n for n in ray.nodes() if n["Alive"]]) == 2 and len(replica_ids(APP_NAME, REPLICAS)) == 2
    lengths = [24, 9, 17, 30, 12]
    with Server(create_app(offline, model_name=NAME)) as plain:
        def ask(client: openai.OpenAI, i: int) -> str:
            return str(client.completions.create(model=NAME, prompt=PROMPTS[i], max_tokens=lengths[i],
                                                 temperature=0).choices[0].text)

        with ThreadPoolExecutor(len(PROMPTS)) as pool:
            ours = list(pool.map(lambda i: ask(replicated.client(), i), range(len(PROMPTS))))
            theirs = list(pool.map(lambda i: ask(plain.client(), i), range(len(PROMPTS))))
        messages = [{"role": "user", "content": "Name a GPU."}]
        streamed = "".join(c.choices[0].delta.content or "" for c in replicated.client().chat.completions.create(
            model=NAME, messages=messages, max_tokens=16, temperature=0, stream=True))
        plain_chat = plain.client().chat.completions.create(model=NAME, messages=messages, max_tokens=16,
                                                            temperature=0).choices[0].message.content
    assert ours == theirs
    assert ours == [text_of(offline, expected_ids(offline, PROMPTS[i], lengths[i])) for i in range(len(PROMPTS))]
    assert streamed == plain_chat
    assert [m.id for m in replicated.client().models.list().data] == [NAME]


def test_requests_sharing_a_prefix_land_on_one_replica(replicated: Replicated) -> None:
    before = replicated.requests_by_replica()
    client = replicated.client()
    for i in range(6):
        client.completions.create(model=NAME, prompt=f"{SHARED}Question {i}: which device?", max_tokens=4,
                                  temperature=0)
    after = replicated.requests_by_replica()
    grew = {label: after.get(label, 0) - before.get(label, 0) for label in after}
    assert sorted(grew.values()) == [0, 6], grew  # one replica took all six; both replicas report metrics
    text = httpx.get(f"{replicated.url}/metrics", timeout=30).text
    holder = next(label for label, n in grew.items() if n == 6)
    hits = [float(line.rsplit(" ", 1)[1]) for line in text.splitlines()
            if line.startswith("intelrt_prefix_cache_hit_tokens_total{") and f'replica="{holder}"' in line]
    assert hits and hits[0] > 0  # and its prefix cache served the shared blocks
    assert text.count('intelrt_replica_up{replica="') == 2 and ' 0.0' not in "".join(
        line for line in text.splitlines() if line.startswith("intelrt_replica_up"))


def test_a_replica_that_cannot_start_is_named_with_its_reason_while_the_others_serve(replicated: Replicated) -> None:
    """A third node whose environment forces a backend it lacks (as a node whose device is missing or
    taken): the replica Ray places there fails to start, its message names it and says why, and the
    two replicas that run keep answering. Then back to two replicas."""
    node = replicated.cluster.add_node(num_cpus=1, env_vars={"INTELRT_BACKEND": "xpu"})
    try:
        scaling = Deploying(application(replicated.model_dir, 3))
        scaling.start()
        deadline, message = time.monotonic() + 120, ""
        while "could not start" not in message and time.monotonic() < deadline:
            running, total, message = replica_report()
            time.sleep(0.5)
        assert "could not start" in message, message
        assert "intelrt replica " in message and " on node " in message and "xpu" in message
        answer = replicated.client().completions.create(model=NAME, prompt="still serving", max_tokens=3)
        assert answer.choices[0].text and running == 2
    finally:
        shrink = Deploying(application(replicated.model_dir, 2))
        shrink.start()
        shrink.join(120)
        replicated.cluster.remove_node(node)
    assert shrink.failure is None and replica_report()[:2] == (2, 2)


def test_a_rolling_restart_drains_each_replica_before_it_stops(replicated: Replicated,
                                                                 offline: intelrt.Loaded) -> None:
    """A redeploy with another option replaces both replicas, one at a time (each node has room for
    one): streams already running finish in full on the replica being stopped, and requests sent
    meanwhile are answered by the one that serves."""
    old = set(replica_ids(APP_NAME, REPLICAS))
    prompts, tokens = [f"Drain {i}: the Gaudi stack" for i in range(4)], 400
    begun: list[int] = []
    states: set[str] = set()
    with ThreadPoolExecutor(4) as pool:
        streams = [pool.submit(stream, replicated.url, p, tokens, begun) for p in prompts]
        while not begun:
            time.sleep(0.05)
        update = Deploying(application(replicated.model_dir, 2, access_log=False))
        update.start()
        while not all(f.done() for f in streams):
            status = serve.status().applications[APP_NAME].deployments[REPLICAS]
            states |= {str(getattr(k, "value", k)) for k, n in status.replica_states.items() if n}
            time.sleep(0.1)
        ended = [f.result() for f in streams]
    asked = replicated.client().completions.create(model=NAME, prompt="during the update", max_tokens=3)
    update.join(180)
    assert update.failure is None
    assert "STOPPING" in states, states  # a replica was draining while the streams ran
    for prompt, result in zip(prompts, ended, strict=True):
        assert result["status"] == 200 and result["events"][-1] == "[DONE]"
        assert streamed_text(result["events"]) == text_of(offline, expected_ids(offline, prompt, tokens))
    assert asked.choices[0].text
    assert old.isdisjoint(replica_ids(APP_NAME, REPLICAS))  # both replaced


def test_a_replica_killed_mid_run_loses_no_accepted_request_silently(replicated: Replicated,
                                                                     offline: intelrt.Loaded) -> None:
    """Eight requests sharing the prefix (so all on one replica), half streamed; that replica is
    killed once the streams have begun. Unstreamed requests are answered in full by the other
    replica; a stream that had begun ends with an error event and [DONE]; none is cut or lost."""
    before = replicated.requests_by_replica()
    client = replicated.client()
    client.completions.create(model=NAME, prompt=f"{SHARED}Warm", max_tokens=2, temperature=0)
    holder = next(label for label, n in replicated.requests_by_replica().items() if n > before.get(label, 0))
    victim = next(full for full in replica_ids(APP_NAME, REPLICAS) if replica_label(full) == holder)
    prompts = [f"{SHARED}Request {i} about Gaudi" for i in range(8)]
    tokens = 300
    begun: list[int] = []

    def unstreamed(prompt: str) -> str:
        return str(client.completions.create(model=NAME, prompt=prompt, max_tokens=tokens,
                                             temperature=0).choices[0].text)

    with ThreadPoolExecutor(8) as pool:
        plain = [pool.submit(unstreamed, p) for p in prompts[:4]]
        streams = [pool.submit(stream, replicated.url, p, tokens, begun) for p in prompts[4:]]
        deadline = time.monotonic() + 60
        while not begun and time.monotonic() < deadline:
            time.sleep(0.05)
        ray.kill(ray.get_actor(victim, namespace="serve"), no_restart=False)
        answers = [f.result() for f in plain]
        ended = [f.result() for f in streams]
    for prompt, answer in zip(prompts[:4], answers, strict=True):
        assert answer == text_of(offline, expected_ids(offline, prompt, tokens))  # retried in full elsewhere
    errors = 0
    for prompt, result in zip(prompts[4:], ended, strict=True):
        assert result["status"] == 200 and result["events"][-1] == "[DONE]", result["events"][-3:]
        chunks = [json.loads(e) for e in result["events"][:-1]]
        if "error" in chunks[-1]:
            errors += 1
            assert "replica serving this request stopped" in chunks[-1]["error"]["message"]
        else:
            assert streamed_text(result["events"]) == text_of(offline, expected_ids(offline, prompt, tokens))
    assert errors >= 1  # the killed replica had streams in flight: they said so, they were not cut
