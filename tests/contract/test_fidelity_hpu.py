"""Fidelity on Intel Gaudi: upstream's code and tools, run on the simulated Gaudi stack, agree with the plan.

transformers (``is_torch_hpu_available``, ``TrainingArguments``) and accelerate (``PartialState``,
``is_hpu_available``) run unmodified on the stand-in ``habana_frameworks`` (gaudi-pytorch-bridge
1.19's rules) and a simulated ``hl-smi`` (docs/backends/fidelity.md). The tests of issue 30 show
what the stricter simulator found (modules exclusive across processes, eager autoload, lazy mode on
Gaudi's fork only) and the plugin's answer to each (docs/backends/gaudi-performance.md).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

import intelrt
from intelrt.cli import main
from intelrt.errors import PlanError
from intelrt.planning.diagnosis import diagnose
from intelrt.testing.gaudi_modules import ALREADY_ACQUIRED, NOT_FOUND
from intelrt.testing.machine import GAUDI_SERVER_MODULE_IDS
from intelrt.testing.simulation import simulate as start_simulation
from intelrt.training.launching import launch, launch_command

INT64 = {"PT_ENABLE_INT64_SUPPORT": "1"}  # the stack may load in this process (as the Gaudi guide exports it)
RANK_SCRIPT = Path(__file__).parents[1] / "scripts" / "simulated_rank.py"
#: A 70B-class Llama: its weights need about 130 GiB in bfloat16 — more than one Gaudi 2 (96 GiB).
BIG_LLAMA = {"architectures": ["LlamaForCausalLM"], "model_type": "llama", "hidden_size": 8192,
             "intermediate_size": 28672, "num_hidden_layers": 80, "num_attention_heads": 64,
             "num_key_value_heads": 8, "vocab_size": 128256}


@pytest.fixture
def big_model(tmp_path: Path) -> Path:
    """A model directory with only the config of a model too big for one Gaudi (planning reads no weights)."""
    path = tmp_path / "big-llama"
    path.mkdir()
    (path / "config.json").write_text(json.dumps(BIG_LLAMA), encoding="utf-8")
    return path


@pytest.mark.claim("H4")
@pytest.mark.parametrize(("accelerate", "available"), [("1.4.0", False), ("1.5.0", True)])
def test_H4_transformers_sees_the_gaudi_exactly_when_the_plan_does(simulate: Any, accelerate: str,
                                                                   available: bool) -> None:
    simulate("hpu", 8, packages={"accelerate": accelerate}, env=INT64)
    from transformers.utils.import_utils import is_torch_hpu_available

    assert intelrt.detect().get("hpu").available is available  # type: ignore[union-attr]
    assert is_torch_hpu_available() is available


@pytest.mark.claim("H6")
def test_H6_hpu8_with_a_model_too_big_for_one_gaudi_is_refused_with_the_way_out(
        big_model: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PT_ENABLE_INT64_SUPPORT", "1")
    assert main(["plan", str(big_model), "--simulate", "hpu:8"]) == 2
    err = capsys.readouterr().err
    assert "do not fit one Gaudi (96.0 GiB), and a Gaudi process drives one Gaudi" in err
    assert "device_map='auto' across Gaudis is not supported (SPEC H6)" in err
    assert "quantization='4bit'" in err and "one process per Gaudi with the weights split across them" in err
    assert "with parallel='tensor'" in err
    assert "Traceback" not in err
    # the first way out works: 4-bit weights fit one Gaudi, which the process drives with device_map='hpu'
    with start_simulation("hpu", 8, env=INT64):
        assert intelrt.plan(big_model, quantization="4bit").decided.placement.device_map == "hpu"


@pytest.mark.claim("H1")
@pytest.mark.parametrize(("stack", "lazy_env", "lazy"), [
    ("1.20.1.97", None, True),   # unset means lazy up to 1.20
    ("1.22.0.740", None, False),  # and eager from 1.21
    ("1.22.0.740", "1", True),
    ("1.20.1.97", "0", False),
])
def test_H1_the_execution_mode_follows_the_installed_stack_as_the_stack_itself_reads_it(
        simulate: Any, tiny_model: Path, stack: str, lazy_env: str | None, lazy: bool) -> None:
    # lazy mode runs on Gaudi's PyTorch fork only (the bridge refuses stock torch there)
    simulate("hpu", 8, packages={"habana-torch-plugin": stack}, torch_fork=lazy,
             env={**INT64, "PT_HPU_LAZY_MODE": lazy_env})
    decode = intelrt.plan(tiny_model).decisions["decode"]
    from habana_frameworks.torch.utils.internal import is_lazy

    assert is_lazy() is lazy  # the stack's own answer
    assert decode.value.graphs == ("hpu" if lazy else None)
    assert decode.value.compile == (None if lazy else "hpu_backend")
    assert "vLLM's Gaudi plugin" in decode.reason
    mode = [n for n in intelrt.detect().chosen.notes if n.startswith("execution mode: ")]
    assert mode[0].startswith(f"execution mode: {'lazy' if lazy else 'eager'}")


@pytest.mark.claim("H5")
def test_H5_hl_smi_runs_only_for_doctor_probe_and_maps_indices_to_modules(simulate: Any, tiny_model: Path) -> None:
    sim = simulate("hpu", 8, env=INT64, module_ids=[6, 4, 7, 5, 2, 3, 0, 1])
    intelrt.detect()
    intelrt.plan(tiny_model)
    plain = diagnose()
    ran = [c for child in sim.children() for c in child["calls"] if c.startswith("hl-smi")]
    assert ran == [] and not [f for f in plain["findings"] if "hl-smi" in f["title"]]
    probed = {f["title"]: f for f in diagnose(probe=True)["findings"]}
    modules = probed["Gaudi module ids (hl-smi)"]
    assert modules["severity"] == "info"
    assert "index 0 is module 6, index 1 is module 4" in modules["detail"] and "index 7 is module 1" in modules["detail"]
    ran = [c for child in sim.children() for c in child["calls"] if c.startswith("hl-smi")]
    assert ran == ["hl-smi -Q index,module_id -f csv"]


@pytest.mark.claim("H5")
def test_H5_doctor_probe_without_hl_smi_says_so(simulate: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    simulate("hpu", 8, env=INT64)
    monkeypatch.setenv("PATH", "/nonexistent")
    found = {f["title"]: f for f in diagnose(probe=True)["findings"]}
    missing = found["hl-smi could not map Gaudi indices to module ids"]
    assert missing["severity"] == "warning" and "hl-smi is not on PATH" in missing["detail"]


@pytest.mark.claim("H5")
def test_H5_more_visible_modules_than_processes_warns_and_strict_refuses(simulate: Any) -> None:
    """Habana: "the number of elements in the list must be equal to the number of devices used"."""
    simulate("hpu", 8, env={**INT64, "HABANA_VISIBLE_MODULES": "0,1,2,3"})
    command = launch_command(str(RANK_SCRIPT), nproc=2)
    [finding] = [f for f in command.findings if f.title == "HABANA_VISIBLE_MODULES lists more Gaudis than processes"]
    assert finding.severity == "warning" and "names 4 module(s) for 2 process(es)" in finding.detail
    assert "--devices (e.g. 0,1)" in finding.fix
    with pytest.raises(PlanError, match="strict mode: HABANA_VISIBLE_MODULES=0,1,2,3 names 4 module"):
        launch_command(str(RANK_SCRIPT), nproc=2, strict=True)
    assert not [f for f in launch_command(str(RANK_SCRIPT), nproc=4).findings if "more Gaudis" in f.title]


@pytest.mark.slow
@pytest.mark.claim("H10")
def test_H10_launched_ranks_each_drive_the_module_at_their_local_rank_with_hccl(tmp_path: Path) -> None:
    """intelrt.launch runs torchrun for real on the simulated server; in every rank transformers'
    TrainingArguments and accelerate's PartialState pick hpu and hccl (the plan's collective),
    and the stack acquires the module at the rank's position in HABANA_VISIBLE_MODULES."""
    with start_simulation("hpu", 8, env=INT64) as sim:
        done = launch(str(RANK_SCRIPT), ["--out", str(tmp_path)], devices=[4, 5])
        acquired = sorted(c for child in sim.children() for c in child["calls"] if c.startswith("hpu.acquire:"))
    assert done.returncode == 0
    ranks = [json.loads((tmp_path / f"rank{r}.json").read_text()) for r in (0, 1)]
    assert [r.get("error") for r in ranks] == [None, None]
    assert [r["modules"] for r in ranks] == ["4,5", "4,5"]
    assert [r["device"] for r in ranks] == ["hpu:0", "hpu:0"]  # one Gaudi per process: its own index 0
    assert all(r["backend"] == r["collective"] == "hccl" for r in ranks)
    assert all(r["distributed_type"] == "MULTI_HPU" and r["world_size"] == 2 for r in ranks)
    assert acquired == ["hpu.acquire:4", "hpu.acquire:5"]
    assert os.environ.get("HLS_MODULE_ID") is None


# -- issue 30: the stack as strict as the bridge ------------------------------------------------

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


@pytest.mark.claim("H6")
def test_H6_a_module_another_tenant_holds_cannot_be_acquired(simulate: Any) -> None:
    sim = simulate("hpu", 8, busy_modules=tuple(range(8)), env=INT64)
    import torch

    assert torch.hpu.is_available() and torch.hpu.device_count() == 8  # counting acquires nothing
    with pytest.raises(RuntimeError, match=r"synStatus=8 \[Device not found\] Device acquire failed"):
        torch.hpu.get_device_name()
    assert sim.acquired is None and NOT_FOUND.startswith("synStatus=8")


@pytest.mark.claim("H5")
@pytest.mark.parametrize("busy", [(0, 4, 1, 5, 2, 6), tuple(range(8))])  # two Gaudis free; none
def test_H5_planning_on_a_busy_shared_server_works_and_holds_no_gaudi(simulate: Any, tiny_model: Path,
                                                                      busy: tuple[int, ...]) -> None:
    sim = simulate("hpu", 8, busy_modules=busy, env=INT64)
    plan = intelrt.plan(tiny_model, devices=[3, 7])
    assert plan.backend.name == "hpu" and plan.backend.device_count == 8, plan.backend_reason
    assert sim.acquired is None, f"planning acquired module {sim.acquired} in this process"
    assert [sim.holder(m) for m in range(8)].count(None) == 8 - len(busy)


@pytest.mark.claim("H5")
def test_H5_devices_5_in_this_process_lands_on_module_5(simulate: Any, tiny_model: Path) -> None:
    sim = simulate("hpu", 8, env=INT64)
    plan = intelrt.plan(tiny_model, devices=[5])
    intelrt.setup_env(plan)
    import torch

    torch.hpu.current_device()  # the first device use: what from_pretrained(device_map="hpu") does
    assert sim.acquired == 5


@pytest.mark.claim("H10")
def test_H10_planning_a_launch_holds_no_gaudi_the_ranks_need(simulate: Any) -> None:
    sim = simulate("hpu", 8, env=INT64)
    command = launch_command(str(RANK_SCRIPT), nproc=2, devices=[0, 1])
    assert command.environment()["HABANA_VISIBLE_MODULES"] == "0,1"
    assert [sim.holder(m) for m in (0, 1)] == [None, None], "the launcher holds a Gaudi a rank needs"


@pytest.mark.claim("H1")
def test_H1_lazy_mode_on_stock_torch_is_refused_by_the_stack_and_the_plan_says_why(simulate: Any) -> None:
    """gaudi-pytorch-bridge 1.19 ``habana_frameworks/torch/__init__.py`` l.47-48: lazy mode needs
    Gaudi's PyTorch fork. transformers' own check then fails inside the stack, and intelrt reports
    the Gaudi as unusable with the bridge's words."""
    simulate("hpu", 8, mode="lazy", env=INT64)
    from transformers.utils.import_utils import is_torch_hpu_available

    with pytest.raises(AssertionError, match="Stock PyTorch version .* is not supported in Lazy mode"):
        is_torch_hpu_available()
    status = intelrt.detect().get("hpu")
    assert status is not None and not status.available
    assert "is not supported in Lazy mode" in status.reason


@pytest.mark.claim("H1")
def test_H1_hpu_backend_compiles_in_eager_mode_and_refuses_lazy_mode(simulate: Any) -> None:
    """The bridge registers ``hpu_backend`` when ``habana_frameworks.torch.core`` is imported (in
    both modes); torch.compile with it runs in eager mode only (Intel's Support Matrix)."""
    import torch

    def double(x: torch.Tensor) -> torch.Tensor:
        return x * 2

    with start_simulation("hpu", 1, mode="eager") as sim:
        assert torch.equal(torch.compile(double, backend="hpu_backend")(torch.ones(3)), torch.full((3,), 2.0))
        assert "hpu_backend.compile" in sim.calls
    torch._dynamo.reset()
    with start_simulation("hpu", 1, mode="lazy", torch_fork=True) as sim:
        import habana_frameworks.torch  # noqa: F401 - lazy mode: no autoload, the user imports it

        with pytest.raises(Exception, match="does not run in lazy mode"):
            torch.compile(double, backend="hpu_backend")(torch.ones(3))
    torch._dynamo.reset()


@pytest.mark.claim("H1")
def test_H1_lazy_mode_with_compile_on_is_refused_and_the_lazy_plan_says_lazy(simulate: Any, tiny_model: Path) -> None:
    simulate("hpu", 8, mode="lazy", torch_fork=True, env=INT64)
    auto = intelrt.plan(tiny_model)
    assert "eagerly by default" not in auto.decisions["compile"].reason
    assert "lazy" in auto.decisions["compile"].reason
    with pytest.raises(PlanError, match="lazy mode"):
        intelrt.plan(tiny_model, compile="on")


@pytest.mark.claim("H3")
@pytest.mark.parametrize(("generation", "int64"), [("gaudi2", True), ("gaudi3", True), ("gaudi1", False)])
def test_H3_eager_mode_loads_the_stack_at_import_torch_with_int64_on_except_gaudi1(
        simulate: Any, generation: str, int64: bool) -> None:
    """``PT_HPU_LAZY_MODE=0``: the wheel's ``torch.backends`` entry point (autoload) imports
    ``habana_frameworks.torch`` when torch is imported, so transformers' ``is_torch_hpu_available()``
    (which imports the stack itself only in lazy mode) finds ``torch.hpu``; int64 is then on by
    default except on first-generation Gaudi (bridge ``common/eager/utils.cpp`` l.29-42)."""
    sim = simulate("hpu", 8, generation=generation, mode="eager")
    assert "habana_frameworks.autoload" in sim.calls and sys.modules.get("habana_frameworks.torch") is not None
    assert sim.import_env is not None and "PT_ENABLE_INT64_SUPPORT" not in sim.import_env
    from transformers.utils.import_utils import is_torch_hpu_available

    assert is_torch_hpu_available() is True
    assert sim.int64_support() is int64


@pytest.mark.claim("H3")
def test_H3_lazy_mode_import_torch_imports_the_autoload_module_but_not_the_stack(simulate: Any) -> None:
    """torch loads every ``torch.backends`` entry point at import, so ``habana_frameworks.autoload``
    (and its package) is imported in lazy mode too; the entry point then returns without loading
    ``habana_frameworks.torch`` (bridge ``autoload/__init__.py`` l.31-44)."""
    sim = simulate("hpu", 8, mode="lazy", torch_fork=True)
    assert sys.modules.get("habana_frameworks.autoload") is not None
    assert sys.modules.get("habana_frameworks.torch") is None and sim.import_env is None
    assert "habana_frameworks.autoload" not in sim.calls  # the entry point ran and loaded nothing


@pytest.mark.claim("H3")
def test_H3_lazy_mode_detection_leaves_the_stack_unloaded_in_this_process(simulate: Any) -> None:
    sim = simulate("hpu", 8, mode="lazy", torch_fork=True)
    status = intelrt.detect().get("hpu")
    assert status is not None and status.available
    assert sim.import_env is None, "detection loaded the Gaudi stack in this process before int64 support was set"
    [probe] = [c for c in sim.children() if c["import_env"] is not None]
    assert probe["import_env"]["PT_ENABLE_INT64_SUPPORT"] == "1"


@pytest.mark.claim("H3")
def test_H3_eager_gaudi2_plan_notes_int64_is_on_by_default_rather_than_warning(simulate: Any, tiny_model: Path) -> None:
    simulate("hpu", 8, generation="gaudi2", mode="eager")
    plan = intelrt.plan(tiny_model)
    h3 = [f for f in plan.findings if f.claim == "H3"]
    assert not [f for f in h3 if f.severity == "warning"]
    assert any("on by default in eager mode" in f.detail for f in h3)


@pytest.mark.claim("H5")
def test_H5_the_stack_writes_its_own_environment_as_the_bridge_does(simulate: Any) -> None:
    """Importing the stack sets ``TORCHINDUCTOR_COMPILE_THREADS=1`` (so torch's inductor picks one
    compile thread), ``MASTER_ADDR``/``MASTER_PORT`` defaults, and — in a rank of a multi-process
    run — ``HLS_MODULE_ID`` = the ``HABANA_VISIBLE_MODULES`` entry at ``LOCAL_RANK``, the module the
    rank then acquires. accelerate's ``is_hpu_available(init_hccl=True)`` is what imports it."""
    sim = simulate("hpu", 8, mode="lazy", torch_fork=True,
                   env={"LOCAL_RANK": "1", "WORLD_SIZE": "2", "RANK": "1", "HABANA_VISIBLE_MODULES": "4,5"})
    from accelerate.utils.imports import is_hpu_available
    from torch._inductor.config import decide_compile_threads

    assert is_hpu_available(init_hccl=True) is True
    assert os.environ["TORCHINDUCTOR_COMPILE_THREADS"] == "1" and decide_compile_threads() == 1
    assert os.environ["HLS_MODULE_ID"] == "5" and os.environ["ID"] == "1"
    import torch

    torch.hpu.init()
    assert sim.acquired == 5


@pytest.mark.claim("H5")
def test_H5_a_launch_gets_its_own_port_not_the_bridges_default(simulate: Any) -> None:
    simulate("hpu", 8, mode="eager")  # eager: `import torch` loaded the stack in this (launcher) process
    assert os.environ.get("MASTER_PORT") == "12345"  # what the bridge's hccl module wrote
    command = launch_command(str(RANK_SCRIPT), nproc=2, devices=[0, 1])
    assert command.environment()["MASTER_PORT"] != "12345"


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
