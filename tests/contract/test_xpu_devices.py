"""X2/X3 device selection and ordering, X11 launch environment — under the simulated XPU runtime.

The simulated Level Zero driver applies ZE_AFFINITY_MASK when it first loads, like the real one,
so "what a launched process sees" is checked by starting a second simulated machine with the
environment the plan gives the launched process.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import pytest

import intelrt
from intelrt.errors import PlanError
from intelrt.host.manager import get_host
from intelrt.planning.planner import plan_backend
from intelrt.testing.simulation import simulate as start_simulation
from intelrt.training.launching import child_env


def _env(plan: Any) -> dict[str, Any]:
    return {s.name: s for s in plan.env}


def _launch(plan: Any, nproc: int) -> list[Any]:
    items = get_host().launch_env(backend=plan.backend, plan=plan, nproc=nproc,
                                env=dict(os.environ))
    return [item for plugin, item in items if plugin == "xpu"]


@pytest.mark.claim("X2")
def test_X2_devices_put_the_mask_in_the_run_environment_not_the_parent(simulate, tiny_model: Path) -> None:  # type: ignore[no-untyped-def]
    simulate("xpu", count=4)
    plan = intelrt.plan(tiny_model, devices=[0, 2])
    env = _env(plan)
    mask, order = env["ZE_AFFINITY_MASK"], env["ZE_ENABLE_PCI_ID_DEVICE_ORDER"]
    assert (mask.value, mask.action, mask.plugin, mask.claim) == ("0,2", "set", "xpu", "X2")
    assert (order.value, order.action, order.plugin, order.claim) == ("1", "set", "xpu", "X3")
    # planning writes nothing into this process's environment (C2) ...
    assert "ZE_AFFINITY_MASK" not in os.environ and "ZE_ENABLE_PCI_ID_DEVICE_ORDER" not in os.environ
    # ... the launched process gets it, and so does a process started with plan.child_environment();
    # setup_env() leaves it out of this process, whose driver read its mask at detection (C2)
    launched = child_env(plan.env, base={"PATH": "/bin"})
    assert launched["ZE_AFFINITY_MASK"] == "0,2" and launched["ZE_ENABLE_PCI_ID_DEVICE_ORDER"] == "1"
    assert plan.child_environment({"PATH": "/bin"}) == launched
    target: dict[str, str] = {}
    assert "ZE_AFFINITY_MASK" not in intelrt.setup_env(plan, target) and "ZE_AFFINITY_MASK" not in target
    assert "ZE_AFFINITY_MASK" not in os.environ
    # the plan says where the mask takes effect: the driver of this process is already loaded
    where = [f for f in plan.findings if f.title == "ZE_AFFINITY_MASK=0,2 takes effect in the run's processes"]
    assert len(where) == 1 and "intelrt launch" in where[0].detail


@pytest.mark.claim("X2")
def test_X2_the_launched_process_sees_the_selected_devices_without_an_inherited_warning(tiny_model: Path) -> None:
    with start_simulation("xpu", count=4):
        plan = intelrt.plan(tiny_model, devices=[0, 2])
    launched = child_env(plan.env, base={})
    with start_simulation("xpu", count=4, env=launched):  # a new process: its driver reads the mask
        detection = intelrt.detect()
        replan = intelrt.plan(tiny_model)
    assert detection.get("xpu").device_count == 2  # type: ignore[union-attr]
    assert not [f for f in replan.findings if f.severity == "warning"]
    assert [f.title for f in replan.findings if f.claim == "X2"] == ["ZE_AFFINITY_MASK=0,2 selects this run's devices"]


@pytest.mark.claim("X2")
def test_X2_inherited_mask_gets_a_warning_naming_it(simulate, tiny_model: Path) -> None:  # type: ignore[no-untyped-def]
    simulate("xpu", count=4, env={"ZE_AFFINITY_MASK": "1,3"})
    plan = intelrt.plan(tiny_model)
    assert plan.backend.device_count == 2  # the driver applied the inherited mask
    warnings = [f for f in plan.warnings if f.claim == "X2"]
    assert len(warnings) == 1
    assert warnings[0].title == "ZE_AFFINITY_MASK inherited from the environment"
    assert "ZE_AFFINITY_MASK=1,3" in warnings[0].detail and "wrong devices" in warnings[0].detail
    assert "unset ZE_AFFINITY_MASK" in warnings[0].fix
    assert "ZE_AFFINITY_MASK" not in _env(plan)  # intelrt does not touch a mask it was not asked about
    with pytest.raises(PlanError, match=r"strict mode: ZE_AFFINITY_MASK=1,3 was not given to intelrt"):
        intelrt.plan(tiny_model, strict=True)


@pytest.mark.claim("X2")
def test_X2_devices_replace_an_inherited_mask_for_launched_processes_with_a_warning(simulate, tiny_model: Path) -> None:  # type: ignore[no-untyped-def]
    simulate("xpu", count=4, env={"ZE_AFFINITY_MASK": "3"})
    plan = plan_backend(devices=[0, 2])  # what intelrt launch plans: the ranks' environment
    mask = _env(plan)["ZE_AFFINITY_MASK"]
    assert (mask.value, mask.action) == ("0,2", "replaced")
    titles = {f.title for f in plan.warnings}
    assert "ZE_AFFINITY_MASK replaced for this run" in titles
    # this process sees only device 3, so it cannot vouch for ids 0 and 2: it says so
    assert "devices=[0, 2] not checked against the machine" in titles
    # ... and loading here cannot reach them: this process's driver read ZE_AFFINITY_MASK=3 already
    with pytest.raises(PlanError, match=r"id 0 is not visible in this process: its Level Zero driver read "
                                        r"ZE_AFFINITY_MASK=3 when it loaded .* intelrt launch --devices 0"):
        intelrt.plan(tiny_model, devices=[0, 2])


@pytest.mark.claim("X2")
def test_X2_devices_out_of_range_are_refused(simulate, tiny_model: Path) -> None:  # type: ignore[no-untyped-def]
    simulate("xpu", count=4)  # four Max 1550 cards: eight devices in FLAT mode
    with pytest.raises(PlanError, match=r"devices=\[0, 9\]: this machine shows 8 Intel GPU device\(s\), ids 0\.\.7 "
                                        r"\(in its FLAT hierarchy\)"):
        intelrt.plan(tiny_model, devices=[0, 9])


@pytest.mark.claim("X3")
def test_X3_users_own_pci_order_is_kept(simulate, tiny_model: Path) -> None:  # type: ignore[no-untyped-def]
    simulate("xpu", count=4, env={"ZE_ENABLE_PCI_ID_DEVICE_ORDER": "0"})
    plan = intelrt.plan(tiny_model, devices=[1, 3])
    order = _env(plan)["ZE_ENABLE_PCI_ID_DEVICE_ORDER"]
    assert (order.value, order.action, order.wanted) == ("0", "kept", "1")
    assert "ZE_ENABLE_PCI_ID_DEVICE_ORDER" not in child_env(plan.env, base={})  # nothing to set: yours stays
    assert child_env(plan.env, base={})["ZE_AFFINITY_MASK"] == "1,3"


@pytest.mark.claim("X3")
def test_X3_non_ascending_masks_get_a_note_that_order_is_not_applied(simulate, tiny_model: Path) -> None:  # type: ignore[no-untyped-def]
    simulate("xpu", count=4)
    plan = intelrt.plan(tiny_model, devices=[2, 0])
    notes = [f for f in plan.findings if f.claim == "X3"]
    assert len(notes) == 1 and notes[0].severity == "info"
    assert notes[0].title == "devices=[2, 0] is not ascending: order is not applied"
    assert "xpu:0 is device 0, xpu:1 is device 2" in notes[0].detail
    assert _env(plan)["ZE_AFFINITY_MASK"].value == "2,0"  # your order, verbatim


@pytest.mark.claim("X3")
def test_X3_inherited_non_ascending_mask_gets_the_note_too(simulate, tiny_model: Path) -> None:  # type: ignore[no-untyped-def]
    simulate("xpu", count=4, env={"ZE_AFFINITY_MASK": "3,1"})
    plan = intelrt.plan(tiny_model)
    assert [f.title for f in plan.findings if f.claim == "X3"] == [
        "ZE_AFFINITY_MASK=3,1 is not ascending: order is not applied"]


@pytest.mark.claim("X11")
def test_X11_launch_env_shares_one_mask_for_all_ranks(simulate, tiny_model: Path) -> None:  # type: ignore[no-untyped-def]
    simulate("xpu", count=4)
    plan = intelrt.plan(tiny_model, devices=[0, 2])
    items = _launch(plan, nproc=2)
    masks = [i for i in items if getattr(i, "name", None) == "ZE_AFFINITY_MASK"]
    assert len(masks) == 1 and masks[0].value == "0,2" and masks[0].claim == "X11"
    assert "all 2 rank(s)" in masks[0].reason and "per-rank mask hangs XCCL" in masks[0].reason
    ranks = [i for i in items if getattr(i, "title", "").startswith("2 rank(s)")]
    assert len(ranks) == 1 and "LOCAL_RANK" in ranks[0].title
    assert plan.decided.collective == "xccl"


@pytest.mark.claim("X11")
def test_X11_more_ranks_than_selected_devices_is_refused(simulate, tiny_model: Path) -> None:  # type: ignore[no-untyped-def]
    simulate("xpu", count=4)
    plan = intelrt.plan(tiny_model, devices=[0, 2])
    with pytest.raises(PlanError, match=r"nproc=3: intelrt launches one process per Intel GPU, and this run has 2"):
        _launch(plan, nproc=3)


@pytest.mark.claim("X11")
def test_X11_a_one_device_mask_for_several_ranks_names_the_xccl_hang(simulate, tiny_model: Path) -> None:  # type: ignore[no-untyped-def]
    simulate("xpu", count=4, env={"ZE_AFFINITY_MASK": "1"})
    plan = intelrt.plan(tiny_model)
    with pytest.raises(PlanError, match="one device per rank hangs XCCL collectives"):
        _launch(plan, nproc=2)


@pytest.mark.claim("X2")
def test_X2_card_dot_tile_in_flat_mode_is_refused_naming_the_tiles_device_id(simulate, tiny_model: Path) -> None:  # type: ignore[no-untyped-def]
    simulate("xpu", count=2)  # Max 1550: FLAT by default, each tile a device
    with pytest.raises(PlanError, match=r"0\.1 names a tile as card\.tile.*hierarchy is FLAT.*0\.1 is device 1"):
        intelrt.plan(tiny_model, devices="0.1")
    with pytest.raises(PlanError, match=r"1\.1 is device 3"):
        intelrt.plan(tiny_model, devices=["1.1"])


@pytest.mark.claim("X2")
def test_X2_a_tile_in_this_process_is_its_whole_card_and_the_plan_says_so(simulate, tiny_model: Path) -> None:  # type: ignore[no-untyped-def]
    simulate("xpu", count=2, env={"ZE_FLAT_DEVICE_HIERARCHY": "COMPOSITE"})
    plan = intelrt.plan(tiny_model, devices="1.0")
    assert plan.decided.placement.device_map == "xpu:1"
    [warning] = [f for f in plan.findings if "a tile is reached only by the run's processes" in f.title]
    assert "intelrt launch --devices 1.0" in warning.fix
    assert plan.child_environment({})["ZE_AFFINITY_MASK"] == "1.0"
    with pytest.raises(PlanError, match="strict mode"):
        intelrt.plan(tiny_model, devices="1.0", strict=True)


@pytest.mark.claim("H5")
@pytest.mark.parametrize("kind", ["hpu", "cpu"])
def test_card_dot_tile_ids_are_refused_by_backends_without_tiles(simulate, tiny_model: Path, kind: str) -> None:  # type: ignore[no-untyped-def]
    if kind == "hpu":
        simulate("hpu", 2, env={"PT_ENABLE_INT64_SUPPORT": "1"})
    with pytest.raises(PlanError, match=rf"'0\.1' names one tile of a card .*the {kind} backend takes whole device ids"):
        intelrt.plan(tiny_model, backend=kind, devices="0.1")


# -- the driver the seed's own first check loads (issue 44) ---------------------------------------

def _physical(index: int) -> str:
    """The uuid of device ``index`` in this process (the simulated driver names card and tile)."""
    import torch

    return str(torch.xpu.get_device_properties(index).uuid.hex())


def _seeds_first_check() -> tuple[bool, int]:
    """The Intel GPU guide's first check: on torch 2.13 without pyzes, it loads the driver."""
    import torch

    return torch.xpu.is_available(), torch.xpu.device_count()


@pytest.mark.claim("X2", "C2")
def test_X2_after_the_seeds_check_a_mask_exported_in_process_does_not_move_devices_2(
        simulate, tiny_model: Path, monkeypatch: pytest.MonkeyPatch) -> None:  # type: ignore[no-untyped-def]
    """The seed's check loads the driver with no mask; ZE_AFFINITY_MASK=2 exported afterwards selects
    nothing here, so devices=[2] must land on physical device 2, and the plan says the mask is dead."""
    sim = simulate("xpu", count=2)  # four FLAT devices
    assert _seeds_first_check() == (True, 4) and "xpu.driver_init" in sim.calls
    monkeypatch.setenv("ZE_AFFINITY_MASK", "2")
    plan = intelrt.plan(tiny_model, devices=[2])
    assert plan.decided.placement.device_map == "xpu:2"
    assert _physical(2) == start_uuid(card=1, tile=0)
    assert any("ZE_AFFINITY_MASK=2 was set after this process's Level Zero driver loaded" in n
               for n in plan.backend.notes), plan.backend.notes


@pytest.mark.claim("X2", "C2")
def test_X2_a_mask_the_count_cannot_tell_apart_is_refused_rather_than_placed_on_the_wrong_gpu(
        simulate, tiny_model: Path, monkeypatch: pytest.MonkeyPatch) -> None:  # type: ignore[no-untyped-def]
    """Four devices either way: the driver that read no mask, or one that read 1,2,3,4 on a larger
    machine. The first places device 2 at xpu:2, the second at xpu:1; intelrt used to take the mask of
    now and place it at xpu:1 (physical device 1), saying nothing. Now it refuses, naming both."""
    simulate("xpu", count=2)
    _seeds_first_check()
    monkeypatch.setenv("ZE_AFFINITY_MASK", "1,2,3,4")
    with pytest.raises(PlanError, match=r"devices=\[2\]: intelrt cannot tell which Intel GPU that is in this process "
                                         r"\(under no ZE_AFFINITY_MASK it is xpu:2; under ZE_AFFINITY_MASK=1,2,3,4 it "
                                         r"is xpu:1\).*install pyzes"):
        intelrt.plan(tiny_model, devices=[2])
    plan = intelrt.plan(tiny_model)  # without devices=, nothing depends on it: planned, and said
    assert plan.backend.versions["driver_view"] == "ambiguous"
    assert any("intelrt cannot tell which devices this process has" in n for n in plan.backend.notes)


@pytest.mark.claim("X2", "C2")
def test_X2_with_pyzes_counting_leaves_the_driver_unloaded_so_the_mask_exported_then_applies(
        simulate, tiny_model: Path, monkeypatch: pytest.MonkeyPatch) -> None:  # type: ignore[no-untyped-def]
    """The other real way to count: torch 2.13 with pyzes counts through Level Zero Sysman, applying
    the mask of os.environ at each count and loading no driver, so a mask exported after the seed's
    check still selects — and intelrt places on it."""
    sim = simulate("xpu", count=2, pyzes=True)
    assert _seeds_first_check() == (True, 4) and "xpu.driver_init" not in sim.calls
    monkeypatch.setenv("ZE_AFFINITY_MASK", "1,2,3,4")
    plan = intelrt.plan(tiny_model, devices=[2])
    assert plan.backend.versions["driver_view"] == "recorded" and plan.backend.device_count == 3
    assert plan.decided.placement.device_map == "xpu:1" and _physical(1) == start_uuid(card=1, tile=0)


@pytest.mark.claim("X11", "C2")
def test_X11_a_launch_is_sized_by_the_mask_its_ranks_read_not_by_this_processs_stale_count(
        simulate, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:  # type: ignore[no-untyped-def]
    """After the seed's check, ZE_AFFINITY_MASK=0 exported in-process: this process still shows four
    devices, the ranks' drivers read the mask and show one. launch_command(nproc=4) used to start four
    ranks on one device (three failing at their first device call); now it is refused as the CLI,
    whose driver reads the mask, refuses it."""
    from intelrt.training.launching import launch_command

    script = tmp_path / "train.py"
    script.write_text("print('rank')\n")
    simulate("xpu", count=2)
    assert _seeds_first_check() == (True, 4)
    monkeypatch.setenv("ZE_AFFINITY_MASK", "0")
    with pytest.raises(PlanError, match=r"nproc=4: .* this run has 1 \(ZE_AFFINITY_MASK=0, which the ranks' drivers "
                                         r"read; this process shows 4"):
        launch_command(script, nproc=4)
    assert launch_command(script, nproc=1).nproc == 1


def start_uuid(card: int, tile: int) -> str:
    """The uuid the simulated driver gives tile ``tile`` of card ``card`` (intelrt.testing.level_zero)."""
    from intelrt.testing.level_zero import Device

    return Device(card, (tile,)).uuid.hex()
