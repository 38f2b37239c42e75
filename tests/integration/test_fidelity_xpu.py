"""Fidelity on Intel GPUs: upstream's own code, run on the simulated XPU driver, agrees with the plan.

torch's ``torch.xpu``, transformers (``is_torch_xpu_available``, ``TrainingArguments``,
``from_pretrained``'s device-map code) and accelerate (``is_xpu_available``, ``PartialState``,
``infer_auto_device_map``) run unmodified; only the ``torch._C`` XPU calls, the Level Zero driver
below them and the build's XCCL are simulated (docs/backends/fidelity.md). Each test asks them
what they do with the plan intelrt made.
"""

from __future__ import annotations

import json
import os
import socket
from pathlib import Path
from typing import Any

import pytest
import torch
import transformers
from accelerate import PartialState, infer_auto_device_map, init_empty_weights
from accelerate.utils import is_xpu_available
from transformers.integrations.accelerate import _get_device_map, check_and_set_device_map
from transformers.utils import is_torch_bf16_gpu_available, is_torch_xpu_available

import intelrt
from intelrt.cli import main
from intelrt.errors import PlanError
from intelrt.runtime.pretrained_kwargs import from_pretrained_kwargs
from intelrt.testing.level_zero import PRODUCTS, enumerate_devices
from intelrt.testing.simulation import simulate as start_simulation
from intelrt.training.launching import child_env, launch, launch_command

RANK_SCRIPT = Path(__file__).parents[1] / "scripts" / "simulated_rank.py"
MAX_1550 = PRODUCTS["max1550"]


def _physical_uuid(flat_index: int, cards: int) -> str:
    """The uuid of FLAT device ``flat_index`` of an unmasked machine, from the driver model."""
    return enumerate_devices(cards, MAX_1550, "FLAT", None)[flat_index].uuid.hex()


@pytest.mark.claim("X1")
@pytest.mark.parametrize(("options", "transformers_uses", "accelerate_uses"), [
    ({}, True, True),  # the installed torch as an XPU wheel names itself: 2.13.0+xpu
    ({"torch_version": "2.6.0"}, True, False),  # a build without a local label: 2.6.0 <= 2.6
    ({"torch_version": "2.5.1+xpu"}, False, False),
    ({"xpu_build": False}, False, False),
    ({"count": 0}, False, False),
])
def test_X1_transformers_and_accelerate_see_the_intel_gpu_the_plan_reports(
        simulate: Any, tiny_model: Path, options: dict[str, Any], transformers_uses: bool,
        accelerate_uses: bool) -> None:
    simulate("xpu", **{"count": 2, **options})
    status = intelrt.detect().get("xpu")
    assert status is not None
    notes = " | ".join(status.notes)
    assert is_torch_xpu_available() is transformers_uses
    assert is_xpu_available() is accelerate_uses
    # the plan says the same: a floor note wherever upstream turns XPU off although a device is there
    assert status.available is (options.get("xpu_build", True) and options.get("count", 2) > 0)
    if status.available:
        assert ("transformers does not use XPU" in notes) is (not transformers_uses)
        assert ("accelerate does not use XPU" in notes) is (not accelerate_uses)


@pytest.mark.claim("X1")
def test_X1_the_xpu_wheel_2_6_0_plus_xpu_is_used_by_accelerate_and_the_plan_says_so(simulate: Any) -> None:
    from packaging.version import Version

    simulate("xpu", 2, torch_version="2.6.0+xpu")  # how download.pytorch.org/whl/xpu names torch 2.6
    assert Version("2.6.0+xpu") > Version("2.6")  # packaging's order: a local label sorts after the release
    assert torch.__version__ == "2.6.0+xpu" and is_xpu_available() is True and is_torch_xpu_available() is True
    notes = " | ".join(intelrt.detect().chosen.notes)
    assert "accelerate does not use XPU" not in notes


@pytest.mark.claim("X2")
def test_X2_the_driver_reads_the_mask_once_so_a_late_mask_changes_nothing(simulate: Any) -> None:
    """What issue 17 found: detection loads the driver, after which a mask written into
    os.environ selects nothing in this process (intel/torch-xpu-ops#2089 reports the same)."""
    simulate("xpu", 2)
    assert intelrt.detect().chosen.device_count == 4
    os.environ["ZE_AFFINITY_MASK"] = "2"
    try:
        assert torch.xpu.device_count() == 4
        assert torch.xpu.get_device_properties(0).uuid.hex() == _physical_uuid(0, 2)
    finally:
        del os.environ["ZE_AFFINITY_MASK"]


@pytest.mark.claim("X2")
def test_X2_plan_simulate_xpu4_devices_2_places_the_model_on_physical_device_2(
        tiny_model: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """`intelrt plan TINY --simulate xpu:4 --devices 2`: in this process the placement names
    device 2; transformers maps it to xpu:2, which is the physical device the launched path's
    mask selects too."""
    assert main(["plan", str(tiny_model), "--simulate", "xpu:4", "--devices", "2", "--json"]) == 0
    shown = json.loads(capsys.readouterr().out)
    placement = shown["decisions"]["placement"]
    assert placement["value"]["device_map"] == "xpu:2" and placement["claim"] == "X2"
    assert {s["name"]: s["in_process"] for s in shown["env"]}["ZE_AFFINITY_MASK"] is False
    with start_simulation("xpu", 4):
        plan = intelrt.plan(tiny_model, devices=[2])
        kwargs = from_pretrained_kwargs(plan)
        device = check_and_set_device_map(kwargs["device_map"])[""]  # what from_pretrained does with it
        in_process = torch.xpu.get_device_properties(device.index).uuid.hex()
    assert device == torch.device("xpu", 2) and in_process == _physical_uuid(2, 4)
    # a process started with the plan's environment: its driver applies the mask, xpu:0 is the same GPU
    with start_simulation("xpu", 4, env=child_env(plan.env, base={})):
        assert torch.xpu.device_count() == 1
        assert torch.xpu.get_device_properties(0).uuid.hex() == in_process


@pytest.mark.claim("X2")
def test_X2_a_flat_max_1550_x2_counts_four_devices_and_a_composite_tile_mask_selects_one(
        simulate: Any, tiny_model: Path) -> None:
    tile = int(MAX_1550.tile_memory_gib * 1024**3)
    with start_simulation("xpu", 2):  # FLAT: the driver's default on Data Center GPU Max
        status = intelrt.detect().chosen
        assert torch.xpu.device_count() == 4 and status.device_count == 4 and status.versions["hierarchy"] == "FLAT"
        assert {d.total_memory for d in status.devices} == {tile}
        assert "each tile of a multi-tile card" in status.notes[0]
    with start_simulation("xpu", 2, env={"ZE_FLAT_DEVICE_HIERARCHY": "COMPOSITE"}):
        assert torch.xpu.device_count() == 2 and torch.xpu.get_device_properties(0).total_memory == 2 * tile
    with start_simulation("xpu", 2, env={"ZE_FLAT_DEVICE_HIERARCHY": "COMPOSITE", "ZE_AFFINITY_MASK": "0.1"}):
        status = intelrt.detect().chosen
        assert torch.xpu.device_count() == 1 == status.device_count
        assert torch.xpu.get_device_properties(0).total_memory == tile  # one tile of card 0
        assert torch.xpu.get_device_properties(0).uuid.hex() == enumerate_devices(2, MAX_1550, "FLAT", None)[1].uuid.hex()
    simulate("xpu", 2, env={"ZE_AFFINITY_MASK": "0.1"})  # FLAT: tiles are devices, so card.tile is skipped
    assert torch.xpu.device_count() == 0
    plan = intelrt.plan(tiny_model)
    assert plan.backend.name == "cpu" and "'0.1' is a COMPOSITE-style card.tile entry" in plan.backend_reason


@pytest.mark.claim("X2")
def test_X2_a_misspelt_hierarchy_is_the_default_as_the_driver_compares_exactly(simulate: Any) -> None:
    simulate("xpu", 1, env={"ZE_FLAT_DEVICE_HIERARCHY": "composite"})
    status = intelrt.detect().chosen
    assert torch.xpu.device_count() == 2 and status.versions["hierarchy"] == "FLAT"
    assert "'composite' is not one of FLAT, COMPOSITE, COMBINED" in status.notes[0]


@pytest.mark.claim("X6")
def test_X6_infer_auto_device_map_with_the_plans_max_memory_uses_only_the_named_devices(
        simulate: Any, tiny_model: Path) -> None:
    """devices=[0, 2] and weights too big for one device: transformers' own device-map code
    (get_balanced_memory + infer_auto_device_map, as from_pretrained runs it) with the plan's
    keywords puts every module on device 0 or 2, never on the other two this process sees."""
    simulate("xpu", 2, memory_gib=240 / 1024**2)  # 240 KiB per device: the tiny model needs two
    plan = intelrt.plan(tiny_model, devices=[0, 2])
    kwargs = plan.decided.placement.from_pretrained_kwargs()
    assert kwargs["device_map"] == "auto" and set(kwargs["max_memory"]) == {0, 2}
    assert torch.xpu.device_count() == 4
    config = transformers.AutoConfig.from_pretrained(tiny_model)
    with init_empty_weights():
        model = transformers.AutoModelForCausalLM.from_config(config, dtype=getattr(torch, str(plan.decided.dtype)))
    device_map = _get_device_map(model, kwargs["device_map"], kwargs["max_memory"], None)
    assert set(device_map.values()) == {0, 2}
    direct = infer_auto_device_map(model, max_memory=kwargs["max_memory"], no_split_module_classes=model._no_split_modules)
    assert set(direct.values()) <= {0, 2}
    assert from_pretrained_kwargs(plan)["max_memory"] == kwargs["max_memory"]


@pytest.mark.claim("X10")
def test_X10_torch_counts_bf16_emulation_so_the_plan_asks_for_native_bf16(simulate: Any, tiny_model: Path) -> None:
    simulate("xpu", 1, bf16=False)
    # upstream says yes (emulation counts), and so TrainingArguments would take bf16=True ...
    assert torch.xpu.is_bf16_supported() is True and is_torch_bf16_gpu_available() is True
    assert torch.xpu.is_bf16_supported(including_emulation=False) is False
    # ... the plan asks the device's native support instead
    plan = intelrt.plan(tiny_model)
    assert plan.decided.dtype == "float16" and plan.backend.devices[0].bf16 is False


@pytest.mark.slow
@pytest.mark.claim("X11")
def test_X11_launched_ranks_train_on_xpu_local_rank_with_the_plans_collective(tmp_path: Path) -> None:
    """intelrt.launch runs torchrun for real; each rank enters the simulated machine and builds
    transformers' TrainingArguments and accelerate's PartialState: every rank sees the one shared
    mask, trains on xpu:LOCAL_RANK (the physical devices 0 and 2) and joins the xccl group."""
    with start_simulation("xpu", 2):
        done = launch(str(RANK_SCRIPT), ["--out", str(tmp_path)], devices=[0, 2])
    assert done.returncode == 0
    ranks = [json.loads((tmp_path / f"rank{r}.json").read_text()) for r in (0, 1)]
    assert [r.get("error") for r in ranks] == [None, None]
    assert [r["mask"] for r in ranks] == ["0,2", "0,2"] and [r["visible"] for r in ranks] == [2, 2]
    assert [r["device"] for r in ranks] == ["xpu:0", "xpu:1"]
    assert [r["uuid"] for r in ranks] == [_physical_uuid(0, 2), _physical_uuid(2, 2)]
    assert all(r["backend"] == r["collective"] == "xccl" for r in ranks)
    assert all(r["distributed_type"] == "MULTI_XPU" and r["world_size"] == 2 for r in ranks)


@pytest.mark.claim("X11")
def test_X11_without_xccl_in_the_build_the_plan_refuses_what_torch_distributed_would_stop_deep_inside(
        simulate: Any, tiny_model: Path, tmp_path: Path) -> None:
    """torch >= 2.7 built without XCCL: in a launched rank accelerate finds no collective for the
    Intel GPU (distributed_type NO) and its process group, with torch's default backend for the
    accelerator, stops in torch.distributed. intelrt's plan refuses first, naming the build."""
    rank = {"LOCAL_RANK": "0", "RANK": "0", "WORLD_SIZE": "1", "MASTER_ADDR": "127.0.0.1",
            "MASTER_PORT": str(_free_port())}  # one rank: no peer to wait for
    simulate("xpu", 2, xccl=False, env=rank)
    assert torch.distributed.is_xccl_available() is False
    try:
        with pytest.raises(RuntimeError, match="Distributed package doesn't have XCCL built in"):
            PartialState()
    finally:
        if torch.distributed.is_initialized():
            torch.distributed.destroy_process_group()
    plan = intelrt.plan(tiny_model)
    assert plan.decided.collective is None and "is_xccl_available() is False" in plan.decisions["collective"].reason
    os.environ["WORLD_SIZE"] = "2"
    with pytest.raises(PlanError, match=r"WORLD_SIZE=2: this torch build \(2\.13\.0\+xpu\) has no XCCL: "
                                        r"torch\.distributed\.is_xccl_available\(\) is False"):
        intelrt.plan(tiny_model)
    for name in rank:
        os.environ.pop(name)
    with pytest.raises(PlanError, match=r"nproc=2 needs the xccl collective backend: this torch build"):
        launch_command(str(RANK_SCRIPT), nproc=2, devices=[0, 1])


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


# -- issue 30: the driver's first view, and memory -----------------------------------------------

@pytest.mark.claim("X2")
def test_X2_a_second_plan_after_setup_env_still_places_on_physical_device_2(simulate: Any, tiny_model: Path) -> None:
    simulate("xpu", 4)
    first = intelrt.plan(tiny_model, devices=[2])
    intelrt.setup_env(first)
    try:
        assert "ZE_AFFINITY_MASK" not in os.environ  # for started processes only: plan.child_environment()
        assert first.child_environment()["ZE_AFFINITY_MASK"] == "2"
        os.environ["ZE_AFFINITY_MASK"] = "2"  # exported by hand after the driver loaded: it selects nothing here
        second = intelrt.plan(tiny_model, devices=[2])
        device = check_and_set_device_map(from_pretrained_kwargs(second)["device_map"])[""]
        assert torch.xpu.get_device_properties(device.index).uuid.hex() == _physical_uuid(2, 4)
        assert any("ZE_AFFINITY_MASK=2 was set after this process's Level Zero driver loaded" in n
                   for n in second.backend.notes)
    finally:
        for name in ("ZE_AFFINITY_MASK", "ZE_ENABLE_PCI_ID_DEVICE_ORDER", "INTELRT_ZE_AFFINITY_MASK"):
            os.environ.pop(name, None)


@pytest.mark.claim("X2")
def test_X2_a_mask_exported_after_the_xpu_was_touched_is_reported_as_changing_nothing(simulate: Any) -> None:
    simulate("xpu", 2)
    assert torch.xpu.device_count() == 4  # the driver initialises: four FLAT devices
    os.environ["ZE_AFFINITY_MASK"] = "2"
    try:
        status = intelrt.detect().chosen
        assert torch.xpu.device_count() == 4 and status.device_count == 4
        assert "through ZE_AFFINITY_MASK=2" not in status.reason
    finally:
        del os.environ["ZE_AFFINITY_MASK"]


@pytest.mark.claim("X2")
def test_X2_devices_card_dot_tile_selects_one_tile_in_composite_mode(simulate: Any, tiny_model: Path) -> None:
    simulate("xpu", 2, env={"ZE_FLAT_DEVICE_HIERARCHY": "COMPOSITE"})
    plan = intelrt.plan(tiny_model, devices="0.1")
    mask = {s.name: s.value for s in plan.env}["ZE_AFFINITY_MASK"]
    assert mask == "0.1"
    one_tile = enumerate_devices(2, MAX_1550, "COMPOSITE", mask)
    assert [(d.card, d.tiles) for d in one_tile] == [(0, (1,))]


@pytest.mark.claim("X6")
def test_X6_free_memory_is_what_is_left_after_allocations_and_other_processes(simulate: Any) -> None:
    """torch's ``mem_get_info`` is the driver's free memory, less what this process reserved and
    what other processes use — the number accelerate's ``get_max_memory`` (device_map="auto"'s
    budget) takes per XPU, after placing a probe tensor a CPU build cannot hold."""
    sim = simulate("xpu", 1, product="max1100", memory_used_gib=8.0)
    free, total = torch.xpu.mem_get_info(0)
    assert total == int(48 * 1024**3) and free == total - 8 * 1024**3
    handle = sim.allocate(0, 3 * 1024**3 + 1)  # what loading a 3 GiB weight does on the device
    assert torch.xpu.memory_allocated(0) == 3 * 1024**3 + 512 and torch.xpu.memory_reserved(0) == 3 * 1024**3 + 2**21
    assert torch.xpu.mem_get_info(0)[0] == free - torch.xpu.memory_reserved(0)
    sim.free(handle)
    assert torch.xpu.mem_get_info(0)[0] == free and torch.xpu.max_memory_allocated(0) == 3 * 1024**3 + 512


@pytest.mark.claim("X6")
@pytest.mark.parametrize(("product", "relaxed", "fails"), [
    ("arc-a770", None, True), ("arc-a770", "1", False), ("max1550", None, False)])
def test_X6_arc_refuses_one_allocation_of_4_gib_unless_limits_are_relaxed(
        simulate: Any, product: str, relaxed: str | None, fails: bool) -> None:
    """Arc's single-allocation limit (compute-runtime#627): stock torch fails a 4 GiB tensor with
    its out-of-memory error while the card has memory free (intel-xpu-backend-for-triton#7477);
    ``UR_L0_ENABLE_RELAXED_ALLOCATION_LIMITS=1`` before the driver loads lifts it."""
    sim = simulate("xpu", 1, product=product, env={"UR_L0_ENABLE_RELAXED_ALLOCATION_LIMITS": relaxed})
    free = torch.xpu.mem_get_info(0)[0]
    if not fails:
        sim.allocate(0, 4 * 1024**3)
        return
    with pytest.raises(torch.OutOfMemoryError, match=r"XPU out of memory\. Tried to allocate 4\.00 GiB\. GPU 0 has a "
                                                     r"total capacity of 15\.11 GiB of which 15\.11 GiB is free"):
        sim.allocate(0, 4 * 1024**3)
    assert torch.xpu.mem_get_info(0)[0] == free
    sim.allocate(0, 3 * 1024**3)  # under the limit: fine


@pytest.mark.claim("X9")
def test_X9_importing_bitsandbytes_first_inside_an_xpu_simulation_works_as_on_hardware(tiny_model: Path) -> None:
    """bitsandbytes builds its 4-bit code tables on the XPU at import; on the simulated XPU (no tensor can
    live there) its first import used to fail, which real hardware does not. A fresh process, as a
    user's script: the simulation, then bitsandbytes, then a 4-bit plan."""
    import subprocess
    import sys

    script = ("import sys\nfrom intelrt.testing import simulate\nimport intelrt\n"
              "with simulate('xpu', 1):\n"
              "    import bitsandbytes, torch\n"
              "    assert torch.xpu.is_available() and 'xpu' in bitsandbytes.supported_torch_devices\n"
              "    plan = intelrt.plan(sys.argv[1], quantization='4bit')\n"
              "    print(plan.decided.quantization.method, plan.device)\n")
    done = subprocess.run([sys.executable, "-c", script, str(tiny_model)], capture_output=True, text=True, timeout=300,
                          env={**os.environ, "OMP_NUM_THREADS": "1"})
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.split() == ["bitsandbytes", "xpu"]
