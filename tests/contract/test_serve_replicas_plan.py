"""``intelrt plan MODEL --replicas N`` on simulated machines: each Ray Serve replica's devices, the
Ray resource it asks for, the variables the real stacks read, and its plan; layouts the hardware
cannot run refused (issue 40; SPEC S5, X2, H5, H6). Also the pieces of the replicated server that
need no Ray running: the metrics merge and what the router reads from a request."""

from __future__ import annotations

import builtins
import json
from pathlib import Path
from typing import Any

import pytest

from intelrt.cli import main
from intelrt.errors import ConfigurationError, PlanError
from intelrt.serving.ray import plan_replicas, require_ray_extra
from intelrt.testing.simulation import parse_spec, simulate


def layout_of(capsys: pytest.CaptureFixture[str], model: Path, *options: str) -> tuple[int, Any]:
    code = main(["plan", str(model), "--json", *options])
    data = json.loads(capsys.readouterr().out)
    return code, data


@pytest.mark.claim("H5")
def test_eight_gaudi_replicas_one_module_each_with_the_variable_the_gaudi_stack_reads(
        capsys: pytest.CaptureFixture[str], tiny_model: Path) -> None:
    code, data = layout_of(capsys, tiny_model, "--simulate", "hpu:8", "--replicas", "8")
    assert code == 0, data
    replicas = data["layout"]["replicas"]
    assert [r["devices"] for r in replicas] == [[i] for i in range(8)]
    for i, replica in enumerate(replicas):
        assert replica["env"]["HABANA_VISIBLE_MODULES"] == str(i)  # what Ray's HPUAcceleratorManager sets too
        assert replica["actor_options"] == {"num_cpus": 1, "resources": {"HPU": 1}}
        assert replica["processes"] == 1 and replica["blocked"] is None
        assert replica["plan"]["backend"]["name"] == "hpu"
        assert replica["plan"]["request"]["devices"] == [i]
    assert data["layout"]["idle"] == []


@pytest.mark.claim("X2")
def test_eight_intel_gpu_tiles_one_per_replica_each_pinned_by_its_affinity_mask(
        capsys: pytest.CaptureFixture[str], tiny_model: Path) -> None:
    code, data = layout_of(capsys, tiny_model, "--simulate", "xpu:8", "--replicas", "8")
    assert code == 0, data
    replicas = data["layout"]["replicas"]
    assert [r["env"]["ZE_AFFINITY_MASK"] for r in replicas] == [str(i) for i in range(8)]
    assert all(r["actor_options"] == {"num_cpus": 1, "num_gpus": 1} for r in replicas)  # Ray names Intel GPUs GPU
    assert all(r["env"]["ZE_ENABLE_PCI_ID_DEVICE_ORDER"] == "1" for r in replicas)
    assert data["layout"]["idle"] == list(range(8, 16))  # 8 Max 1550 cards: 16 tiles in FLAT mode


@pytest.mark.claim("H5")
@pytest.mark.claim("H6")
def test_gaudi_groups_of_two_and_four_are_supported_sets_of_one_process_per_gaudi(tiny_model: Path) -> None:
    with simulate(**parse_spec("hpu:8")):
        pairs = plan_replicas(str(tiny_model), 4, 2)
        quads = plan_replicas(str(tiny_model), 2, 4)
    assert [r.devices for r in pairs.replicas] == [(0, 1), (2, 3), (4, 5), (6, 7)]
    assert [r.env["HABANA_VISIBLE_MODULES"] for r in quads.replicas] == ["0,1,2,3", "4,5,6,7"]
    assert all(r.processes == 2 and r.actor_options["resources"] == {"HPU": 2} for r in pairs.replicas)
    assert all("MASTER_PORT" in r.env for r in pairs.replicas)  # each replica's ranks rendezvous on their own port
    # serving such a replica needs tensor-parallel ranks, which intelrt serve does not start yet: said, not hidden
    assert pairs.blocked is not None and "one process per replica" in pairs.blocked


@pytest.mark.claim("H5")
def test_gaudi_groups_the_hardware_does_not_run_together_are_refused_with_the_sets_it_does(tiny_model: Path) -> None:
    with simulate(**parse_spec("hpu:8")), pytest.raises(PlanError) as refused:
        plan_replicas(str(tiny_model), 2, 3)
    assert "replica 0 would take hpu devices 0,1,2" in str(refused.value)
    assert "0,1 2,3 4,5 6,7 0,1,2,3 4,5,6,7" in str(refused.value)


def test_more_replicas_than_devices_are_refused_naming_what_is_visible(capsys: pytest.CaptureFixture[str],
                                                                       tiny_model: Path) -> None:
    code, data = layout_of(capsys, tiny_model, "--simulate", "xpu:2", "--replicas", "8")
    assert code == 2
    assert "8 replica(s) of 1 xpu device(s) need 8 devices, and 4 are visible (0,1,2,3)" in data["error"]["message"]


def test_text_plan_shows_each_replica_devices_variables_and_plan(capsys: pytest.CaptureFixture[str],
                                                                 tiny_model: Path) -> None:
    assert main(["plan", str(tiny_model), "--simulate", "hpu:8", "--replicas", "4"]) == 0
    out = capsys.readouterr().out
    assert "intelrt plan for" in out  # replica 0's whole plan first
    assert "replicas: 4 on hpu, 1 hpu device(s) each; each asks Ray for CPU 1, HPU 1" in out
    assert "replica 3: devices 3\n  variables: HABANA_VISIBLE_MODULES=3 PT_ENABLE_INT64_SUPPORT=1" in out
    assert "idle devices: 4,5,6,7" in out


def test_cpu_replicas_ask_ray_for_cpus(tiny_model: Path) -> None:
    layout = plan_replicas(str(tiny_model), 2, backend="cpu")
    assert [r.actor_options for r in layout.replicas] == [{"num_cpus": 1}] * 2 and layout.resource is None
    with pytest.raises(ConfigurationError, match="no devices to group"):
        plan_replicas(str(tiny_model), 2, 2, backend="cpu")


def test_replicas_without_ray_say_how_to_install_it(monkeypatch: pytest.MonkeyPatch,
                                                     capsys: pytest.CaptureFixture[str], tiny_model: Path) -> None:
    real_import = builtins.__import__

    def no_ray(name: str, *args: Any, **kwargs: Any) -> Any:
        if name == "ray" or name.startswith("ray."):
            raise ImportError(f"No module named {name!r}")
        return real_import(name, *args, **kwargs)

    monkeypatch.setattr(builtins, "__import__", no_ray)
    with pytest.raises(ConfigurationError, match=r"pip install 'intelrt\[ray\]'"):
        require_ray_extra()
    assert main(["serve", str(tiny_model), "--replicas", "2", "--json"]) == 2
    error = json.loads(capsys.readouterr().out)["error"]
    assert "runs the replicas on Ray Serve, which is not installed" in error["message"]
    assert "pip install 'intelrt[ray]'" in error["message"]


def test_ray_options_without_replicas_are_refused(capsys: pytest.CaptureFixture[str], tiny_model: Path) -> None:
    assert main(["serve", str(tiny_model), "--address", "auto", "--json"]) == 2
    assert "--address configures Ray Serve replicas: add --replicas N" in json.loads(capsys.readouterr().out)[
        "error"]["message"]
    assert main(["serve", str(tiny_model), "--replicas", "2", "--min-replicas", "3", "--max-replicas", "4",
                 "--json"]) == 2
    assert "must hold the 2 replica(s) it starts with" in json.loads(capsys.readouterr().out)["error"]["message"]


# -- no Ray running: what the ingress merges and what the router reads ---------------------------

def test_metrics_of_every_replica_merge_into_one_exposition_labelled_by_replica() -> None:
    pytest.importorskip("prometheus_client")
    from prometheus_client.parser import text_string_to_metric_families

    from intelrt.serving.metrics import ServerMetrics
    from intelrt.serving.ray.metrics import merge

    first, second = ServerMetrics(), ServerMetrics()
    first.requests.labels("/v1/completions", "200").inc(3)
    second.requests.labels("/v1/completions", "200").inc(1)
    second.prefix_hit_tokens.inc(64)
    text = merge({"SERVE_REPLICA::intelrt#IntelrtReplica#aaa": first.render(),
                  "SERVE_REPLICA::intelrt#IntelrtReplica#bbb": second.render(),
                  "SERVE_REPLICA::intelrt#IntelrtReplica#ccc": None}).decode()
    assert text.count("# HELP intelrt_requests_total") == 1  # one family, valid for Prometheus
    families = {f.name: f for f in text_string_to_metric_families(text)}
    requests = {s.labels["replica"]: s.value for s in families["intelrt_requests"].samples
                if s.name == "intelrt_requests_total"}
    assert requests == {"aaa": 3.0, "bbb": 1.0}
    up = {s.labels["replica"]: s.value for s in families["intelrt_replica_up"].samples}
    assert up == {"aaa": 1.0, "bbb": 1.0, "ccc": 0.0}
    hits = {s.labels["replica"]: s.value for s in families["intelrt_prefix_cache_hit_tokens"].samples
            if s.name.endswith("_total")}
    assert hits == {"aaa": 0.0, "bbb": 64.0}


def test_the_router_reads_a_completion_prompt_or_chat_messages_and_nothing_else() -> None:
    from intelrt.serving.ray.forwarding import routing_text

    assert routing_text("/v1/completions", b'{"model": "m", "prompt": "shared prefix"}') == "shared prefix"
    messages = [{"role": "user", "content": "hi"}]
    assert routing_text("/v1/chat/completions", json.dumps({"messages": messages}).encode()) == messages
    assert routing_text("/v1/completions", b"not json") is None
    assert routing_text("/v1/models", b"") is None
    assert routing_text("/tokenize", b'{"prompt": "x"}') is None


def test_the_config_file_builder_names_the_backend_and_refuses_what_it_cannot_serve(tiny_model: Path) -> None:
    """KubeRay's serveConfigV2 builds the application on a head node that may have no device: the
    backend is named, and a Gaudi group is refused as on the command line."""
    from intelrt.serving.ray.application import app_builder

    with pytest.raises(ConfigurationError, match="takes model and backend"):
        app_builder({"model": str(tiny_model)})
    with pytest.raises(ConfigurationError, match="'tpu' is not one of"):
        app_builder({"model": str(tiny_model), "backend": "tpu"})
    with pytest.raises(ConfigurationError, match="2 tensor-parallel processes"):
        app_builder({"model": str(tiny_model), "backend": "hpu", "devices_per_replica": 2})
