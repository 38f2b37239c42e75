"""The simulated Gaudi runtime across processes (one Gaudi per process, hl-smi, two ranks) (moved from
tests/contract/test_fidelity_hpu.py in issue 41: the contract tier starts no process)."""

from __future__ import annotations

import os
import subprocess
import sys
from typing import Any

import pytest

from intelrt.planning.diagnosis import diagnose
from intelrt.testing.gaudi_modules import ALREADY_ACQUIRED
from intelrt.testing.machine import GAUDI_SERVER_MODULE_IDS
from intelrt.testing.simulation import simulate as start_simulation

INT64 = {"PT_ENABLE_INT64_SUPPORT": "1"}  # the stack may load in this process (as the Gaudi guide exports it)


_ACQUIRE = """
import os, sys
import torch  # eager mode: torch's backend autoload imports habana_frameworks.torch
import habana_frameworks.torch.hpu as hthpu
try:
    hthpu.init()
except RuntimeError as exc:
    print("refused:", exc)
    sys.exit(3)
print("acquired")
"""


def _child(extra_env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    """A second process on the simulated machine that asks the stack for a Gaudi (upstream's own calls)."""
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(p for p in sys.path if p), **extra_env}
    return subprocess.run([sys.executable, "-c", _ACQUIRE], env=env, capture_output=True, text=True, timeout=120,
                          check=False)


@pytest.mark.claim("H6")
def test_H6_a_gaudi_is_held_by_one_process_a_second_process_is_refused(simulate: Any) -> None:
    """The driver gives a Gaudi to one process (optimum-habana#367, tgi-gaudi#54: "Device already
    acquired"): while this process holds a module, another process that asks for that module is
    refused; one free to take any device gets another; the module is free again when its holder ends."""
    sim = simulate("hpu", 8, env=INT64)
    import torch

    torch.hpu.init()  # the bridge's _lazy_init: this process acquires a Gaudi
    held = sim.acquired
    assert held == GAUDI_SERVER_MODULE_IDS[0] and sim.holder(held) == str(os.getpid())
    same = _child({"HABANA_VISIBLE_MODULES": str(held), "HLS_MODULE_ID": str(held)})
    assert same.returncode == 3 and ALREADY_ACQUIRED in same.stdout, same.stdout + same.stderr
    other = _child({})
    assert other.returncode == 0 and "acquired" in other.stdout, other.stdout + other.stderr
    [seen] = [c for c in sim.children() if c.get("acquired") is not None]
    assert seen["acquired"] != held and f"hpu.acquire:{seen['acquired']}" in seen["calls"]


@pytest.mark.claim("H5")
def test_H5_hl_smi_on_a_default_server_lists_module_ids_out_of_index_order(simulate: Any) -> None:
    """An 8-Gaudi server's indices and module ids differ (the order quoted in optimum-habana#1089);
    intelrt's `doctor --probe` maps them as hl-smi prints them."""
    simulate("hpu", 8, env=INT64)
    done = subprocess.run(["hl-smi", "-Q", "index,module_id", "-f", "csv"], capture_output=True, text=True,
                          check=True, env=os.environ.copy())
    rows = [tuple(int(x) for x in line.split(", ")) for line in done.stdout.strip().splitlines()[1:]]
    assert rows == list(enumerate(GAUDI_SERVER_MODULE_IDS)) and rows[1] == (1, 4)
    detail = {f["title"]: f for f in diagnose(probe=True)["findings"]}["Gaudi module ids (hl-smi)"]["detail"]
    assert "index 1 is module 4" in detail and "index 2 is module 1" in detail


_TENSOR_PARALLEL_RANK = """
import torch
from intelrt.testing.simulation import inherited

with inherited():
    import habana_frameworks.torch as ht  # lazy mode: no autoload, the script imports the stack
    import torch.distributed as dist

    dist.init_process_group("hccl")
    try:
        ht.hpu.wrap_in_hpu_graph(torch.nn.Linear(2, 2))(torch.ones(1, 2))
        print("captured")
    except RuntimeError as exc:
        print("refused:", exc)
    dist.destroy_process_group()
"""


@pytest.mark.slow
@pytest.mark.claim("H10")
@pytest.mark.parametrize(("lazy_collectives", "outcome"), [(None, "refused"), ("true", "captured")])
def test_H10_hpu_graphs_in_a_two_card_group_need_lazy_collectives(lazy_collectives: str | None, outcome: str) -> None:
    """Two ranks of a lazy-mode run join an ``hccl`` group and capture an HPU graph: the bridge
    loads lazy collectives only with ``PT_HPU_ENABLE_LAZY_COLLECTIVES=true``, which vLLM's Gaudi
    plugin sets for multi-card HPU-graph inference (vllm-gaudi ``platform.py`` l.432-436)."""
    import socket

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    with start_simulation("hpu", 8, mode="lazy", torch_fork=True,
                          env={"PT_HPU_ENABLE_LAZY_COLLECTIVES": lazy_collectives}):
        base = {**os.environ, "PYTHONPATH": os.pathsep.join(p for p in sys.path if p), "MASTER_ADDR": "127.0.0.1",
                "MASTER_PORT": str(port), "WORLD_SIZE": "2"}
        ranks = [subprocess.Popen([sys.executable, "-c", _TENSOR_PARALLEL_RANK], text=True, stdout=subprocess.PIPE,
                                  stderr=subprocess.PIPE, env={**base, "RANK": str(r), "LOCAL_RANK": str(r)})
                 for r in (0, 1)]
        outputs = [rank.communicate(timeout=120) for rank in ranks]
    for rank, (out, err) in zip(ranks, outputs, strict=True):
        assert rank.returncode == 0, err
        assert out.startswith(outcome), out + err
        if outcome == "refused":
            assert "PT_HPU_ENABLE_LAZY_COLLECTIVES=true" in out
