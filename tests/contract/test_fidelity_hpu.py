"""Fidelity on Intel Gaudi: upstream's code and tools, run on the simulated Gaudi stack, agree with the plan.

transformers (``is_torch_hpu_available``, ``TrainingArguments``) and accelerate (``PartialState``)
run unmodified on the stand-in ``habana_frameworks`` (gaudi-pytorch-bridge 1.19's rules) and a
simulated ``hl-smi`` (docs/backends/fidelity.md).
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import pytest

import intelrt
from intelrt.cli import main
from intelrt.errors import PlanError
from intelrt.planning.diagnosis import diagnose
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
    simulate("hpu", 8, packages={"habana-torch-plugin": stack}, env={**INT64, "PT_HPU_LAZY_MODE": lazy_env})
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
