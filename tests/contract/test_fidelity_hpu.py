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
import sys
from pathlib import Path
from typing import Any

import pytest

import intelrt
from intelrt.cli import main
from intelrt.errors import BackendUnavailableError, PlanError
from intelrt.planning.diagnosis import diagnose
from intelrt.testing.gaudi_modules import NOT_FOUND
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


@pytest.mark.claim("H5")
def test_H5_a_busy_gaudi_is_a_clear_error_not_silently_replaced_by_another(simulate: Any, tiny_model: Path) -> None:
    """Module 5 held by another tenant: devices=[5] used to land on module 0, because the bridge, given
    HLS_MODULE_ID alone, "proceeds without moduleid" (device.cpp l.433-441). With HABANA_VISIBLE_MODULES
    in this process too, the driver refuses loudly, and load() says so in its words, holding nothing."""
    sim = simulate("hpu", 8, busy_modules=(5,), env=INT64)
    plan = intelrt.plan(tiny_model, devices=[5])
    here = {s.name: s.value for s in plan.env if s.in_process}
    assert here["HLS_MODULE_ID"] == "5" and here["HABANA_VISIBLE_MODULES"] == "5"
    with pytest.raises(BackendUnavailableError, match=r"Gaudi module 5 is held by another process .*synStatus=20 "
                                                      r"\[Device already acquired\].*sudo hl-smi.*devices="):
        intelrt.load(tiny_model, devices=[5])
    assert sim.acquired is None and [sim.holder(m) for m in range(8)].count(None) == 7
    import torch  # the bridge's own behaviour under the plan's variables: its loud refusal, no other module

    with pytest.raises(RuntimeError, match=r"Device already acquired"):
        torch.hpu.init()
    assert sim.acquired is None


@pytest.mark.claim("H1")
def test_H1_the_cli_simulates_a_lazy_mode_gaudi_as_the_python_api_does(
        tiny_model: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch) -> None:
    """`PT_HPU_LAZY_MODE=1 intelrt plan --simulate hpu:1` plans the CPU: stock torch, whose Gaudi stack
    refuses lazy mode, as on real hardware. Gaudi's PyTorch fork, which lazy mode needs, was out of
    the CLI's reach; the machine as JSON brings every fact simulate() takes."""
    monkeypatch.setenv("PT_HPU_LAZY_MODE", "1")
    assert main(["plan", str(tiny_model), "--simulate", "hpu:1", "--json"]) == 0
    stock = json.loads(capsys.readouterr().out)
    assert stock["backend"]["name"] == "cpu" and "is not supported in Lazy mode" in json.dumps(stock["detected"])
    assert main(["plan", str(tiny_model), "--simulate", '{"kind": "hpu", "torch_fork": true}', "--json"]) == 0
    fork = json.loads(capsys.readouterr().out)
    gaudi = next(b for b in fork["detected"] if b["name"] == "hpu")
    assert fork["backend"]["name"] == "hpu" and gaudi["versions"]["execution_mode"] == "lazy"
    assert fork["decisions"]["decode"]["value"]["graphs"] == "hpu"  # HPU graphs: lazy mode's decode step
    assert main(["plan", str(tiny_model), "--simulate", '{"kind": "hpu", "memory_gib": 64}']) == 2
    assert "a Gaudi's memory is its generation's HBM" in capsys.readouterr().err


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


