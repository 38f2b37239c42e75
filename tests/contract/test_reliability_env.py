"""Catalogue rows for inherited environments (issue 8): malformed or out-of-range visibility
variables, device lists and launcher variables. A driver skips what it cannot parse without a
word; intelrt names every skipped entry, never overwrites the user's value, and refuses in strict
mode. Every test runs on a simulated machine (SPEC C1, C2, X2, H5)."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest

import intelrt
from intelrt.errors import BackendUnavailableError, ConfigurationError, PlanError
from intelrt.hooks.options import normalize_devices
from intelrt.planning.diagnosis import diagnose
from intelrt.testing.simulation import simulate as start_simulation

INT64 = {"PT_ENABLE_INT64_SUPPORT": "1"}  # keeps Gaudi detection in-process (no probe child)
MALFORMED = "has entries the driver ignores"


def _malformed(plan: intelrt.Plan) -> list[Any]:
    return [f for f in plan.findings if f.title.endswith(MALFORMED)]


# -- ZE_AFFINITY_MASK (Intel GPUs) -----------------------------------------------------------------

GPUS = {"count": 2, "product": "max1100"}  # two one-tile Data Center GPU Max: two devices, FLAT hierarchy


@pytest.mark.claim("X2")
@pytest.mark.parametrize(("mask", "problem", "visible"), [
    ("0,0", "0 is listed twice", 1),
    ("0,-1", "'-1' is negative: the driver reads it as a huge id and skips it", 1),
    ("0,01", "'01' is read as octal 1", 2),  # std::stoul in base 0, as the driver reads it
    ("0,1abc", "'1abc' is read as 1", 2),
    ("0,1.0", "'1.0' is a COMPOSITE-style card.tile entry; with FLAT hierarchy", 1),
    ("0,1,2,3,4,5,6,7,8", "it names 9 device(s) but the driver shows 2", 2),
])
def test_X2_malformed_ze_affinity_mask_is_named_kept_and_strict_refuses(simulate, tiny_model: Path, mask: str,  # type: ignore[no-untyped-def]
                                                                        problem: str, visible: int) -> None:
    simulate("xpu", **GPUS, env={"ZE_AFFINITY_MASK": mask})
    plan = intelrt.plan(tiny_model)
    assert plan.backend.name == "xpu" and plan.backend.device_count == visible
    [finding] = _malformed(plan)
    assert finding.title == f"ZE_AFFINITY_MASK {MALFORMED}" and finding.severity == "warning"
    assert problem in finding.detail and f"sees {visible} Intel GPU device(s)" in finding.detail
    assert "ZE_AFFINITY_MASK" not in plan.env_to_set(), "the user's mask is never overwritten"
    with pytest.raises(PlanError, match="strict mode: .*" + re.escape(problem)):
        intelrt.plan(tiny_model, strict=True)


@pytest.mark.claim("X2")
@pytest.mark.parametrize(("mask", "why"), [
    ("1,,0", "'' is not a number (an empty entry"),
    (",0", "'' is not a number (an empty entry"),
    ("0,gpu1", "'gpu1' is not a number"),
    ("0,²", "'²' is not a number"),  # str.isdigit() is True for it: it used to crash int()
])
def test_X2_a_mask_entry_the_driver_cannot_read_is_named_without_touching_the_driver(simulate, tiny_model: Path,  # type: ignore[no-untyped-def]
                                                                                      mask: str, why: str) -> None:
    """The driver reads each entry with std::stoul and does not catch what it throws: the
    simulated driver fails to initialise on such a mask, and intelrt never asks it."""
    sim = simulate("xpu", **GPUS, env={"ZE_AFFINITY_MASK": mask})
    plan = intelrt.plan(tiny_model)
    assert plan.backend.name == "cpu" and why in plan.backend_reason and "fails to initialise" in plan.backend_reason
    assert sim.calls == [], "detection named the mask without loading the driver"
    import torch

    with pytest.raises(RuntimeError, match="std::stoul cannot read ZE_AFFINITY_MASK entry"):
        torch.xpu.device_count()  # what any XPU call would do in this process


@pytest.mark.claim("X2")
def test_X2_an_empty_mask_shows_every_device_as_the_driver_does(simulate, tiny_model: Path) -> None:  # type: ignore[no-untyped-def]
    simulate("xpu", **GPUS, env={"ZE_AFFINITY_MASK": ""})
    plan = intelrt.plan(tiny_model)
    assert plan.backend.name == "xpu" and plan.backend.device_count == 2
    [finding] = _malformed(plan)
    assert "set but empty: the driver then shows every device, as if it were unset" in finding.detail


@pytest.mark.claim("C1")
@pytest.mark.parametrize(("mask", "why"), [
    ("gpu0", "'gpu0' is not a number"),
    ("-1", "'-1' is negative"),
    ("7", "ZE_AFFINITY_MASK=7 selects no device the driver knows"),
])
def test_C1_a_mask_that_selects_nothing_says_why_and_never_falls_back_silently(simulate, tiny_model: Path,  # type: ignore[no-untyped-def]
                                                                               mask: str, why: str) -> None:
    simulate("xpu", **GPUS, env={"ZE_AFFINITY_MASK": mask})
    plan = intelrt.plan(tiny_model)
    assert plan.backend.name == "cpu"
    assert plan.backend_reason.startswith("no accelerator found, running on the CPU") and why in plan.backend_reason
    with pytest.raises(BackendUnavailableError, match="does not fall back") as info:
        intelrt.plan(tiny_model, backend="xpu")
    assert why in str(info.value)


@pytest.mark.claim("X2")
def test_X2_a_tile_entry_is_valid_in_composite_mode_and_skipped_in_flat_mode(simulate, tiny_model: Path) -> None:  # type: ignore[no-untyped-def]
    from intelrt_xpu.affinity import read_mask

    with start_simulation("xpu", 2, env={"ZE_AFFINITY_MASK": "0.1", "ZE_FLAT_DEVICE_HIERARCHY": "COMPOSITE"}):
        plan = intelrt.plan(tiny_model)
    assert plan.backend.name == "xpu" and plan.backend.device_count == 1 and not _malformed(plan)
    simulate("xpu", 2, env={"ZE_AFFINITY_MASK": "0.1"})  # FLAT, the Max 1550's default: every tile is a device
    plan = intelrt.plan(tiny_model)
    assert plan.backend.name == "cpu" and "COMPOSITE-style card.tile entry" in plan.backend_reason
    assert read_mask("1.0,0.1,1.1", "COMPOSITE").ids == (1, 0)


# -- HABANA_VISIBLE_MODULES / HABANA_VISIBLE_DEVICES (Gaudi) -------------------------------------

@pytest.mark.claim("H5")
@pytest.mark.parametrize("variable", ["HABANA_VISIBLE_MODULES", "HABANA_VISIBLE_DEVICES"])
@pytest.mark.parametrize(("value", "problem", "visible"), [
    ("0,0", "0 is listed twice", 1),
    ("0,-1", "'-1' is negative", 1),
    ("0,gaudi", "'gaudi' is not a whole number", 1),
    ("0,0.1", "'0.1' is a sub-device", 1),
    ("0,1,2,3,4,5,6,7,8,9", "it names 10 device(s) but the driver shows 8", 8),
])
def test_H5_malformed_gaudi_visibility_is_named_kept_and_strict_refuses(simulate, tiny_model: Path, variable: str,  # type: ignore[no-untyped-def]
                                                                        value: str, problem: str, visible: int) -> None:
    simulate("hpu", 8, env={variable: value, **INT64})
    plan = intelrt.plan(tiny_model)
    if variable == "HABANA_VISIBLE_DEVICES":
        visible = 8  # only the container runtime reads it, when a container starts; the stack never does
    assert plan.backend.name == "hpu" and plan.backend.device_count == visible
    [finding] = _malformed(plan)
    assert finding.title == f"{variable} {MALFORMED}" and problem in finding.detail
    assert variable not in plan.env_to_set()
    with pytest.raises(PlanError, match="strict mode: .*" + problem.replace("(", r"\(").replace(")", r"\)")):
        intelrt.plan(tiny_model, strict=True)


@pytest.mark.claim("H5")
@pytest.mark.parametrize(("value", "why"), [("", "set but empty"), ("-1", "'-1' is negative"),
                                            ("all", "'all' is not a whole number")])
def test_H5_modules_selecting_nothing_leave_hpu_unavailable_naming_the_variable(simulate, tiny_model: Path,  # type: ignore[no-untyped-def]
                                                                               value: str, why: str) -> None:
    simulate("hpu", 8, env={"HABANA_VISIBLE_MODULES": value, **INT64})
    plan = intelrt.plan(tiny_model)
    assert plan.backend.name == "cpu" and "HABANA_VISIBLE_MODULES" in plan.backend_reason
    assert why in plan.backend_reason
    with pytest.raises(BackendUnavailableError, match="HABANA_VISIBLE_MODULES"):
        intelrt.plan(tiny_model, backend="hpu")


@pytest.mark.claim("H5")
def test_H5_devices_given_with_a_malformed_inherited_list_replace_it_for_the_run(simulate, tiny_model: Path) -> None:  # type: ignore[no-untyped-def]
    simulate("hpu", 8, env={"HABANA_VISIBLE_MODULES": "0,1,x", **INT64})
    plan = intelrt.plan(tiny_model, devices=[1])
    assert plan.env_to_set()["HABANA_VISIBLE_MODULES"] == "1"
    assert any(f.title == "HABANA_VISIBLE_MODULES replaced for this run" for f in plan.findings)
    with pytest.raises(PlanError, match=r"module id\(s\) 2 are not visible.*visible module ids: 0,1"):
        intelrt.plan(tiny_model, devices=[2])


def test_doctor_names_skipped_entries_of_every_visibility_variable(simulate) -> None:  # type: ignore[no-untyped-def]
    with_xpu = simulate("xpu", count=2, env={"ZE_AFFINITY_MASK": "0,,0"})
    titles = {f["title"]: f for f in diagnose()["findings"]}
    xpu = titles[f"ZE_AFFINITY_MASK {MALFORMED}"]
    assert xpu["severity"] == "warning" and "an empty entry" in xpu["detail"] and "listed twice" in xpu["detail"]
    assert with_xpu.kind == "xpu"


def test_doctor_names_skipped_gaudi_module_entries(simulate) -> None:  # type: ignore[no-untyped-def]
    simulate("hpu", 8, env={"HABANA_VISIBLE_MODULES": "0,1,x", **INT64})
    titles = {f["title"]: f for f in diagnose()["findings"]}
    assert "'x' is not a whole number" in titles[f"HABANA_VISIBLE_MODULES {MALFORMED}"]["detail"]


# -- devices= and launcher variables -------------------------------------------------------------

@pytest.mark.parametrize(("devices", "message"), [
    ("", "give device ids separated by commas"),
    ("0,,1", "give device ids separated by commas"),
    ("-1", "device ids are >= 0"),
    ([0, -2], "device ids are >= 0"),
    ("0.1.2", "every id must be a whole number"),  # card.tile is one tile; a part of a tile is no device
    ("0.x", "every id must be a whole number"),
    ("gpu0", "every id must be a whole number"),
    ([0, 0], "a device id is repeated"),
    ([True], "every id must be an int"),
    ([], "devices=[] selects nothing"),
    (2, "pass a list of device ids"),
])
def test_malformed_devices_argument_is_a_configuration_error(devices: object, message: str) -> None:
    with pytest.raises(ConfigurationError, match=message.replace("[", r"\[").replace("]", r"\]")):
        normalize_devices(devices)


@pytest.mark.claim("X11")
def test_X11_a_garbled_world_size_is_refused_not_read_as_one_process(simulate, tiny_model: Path,  # type: ignore[no-untyped-def]
                                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    simulate("xpu", count=2, torch_version="2.6.0", env={"WORLD_SIZE": "two"})
    with pytest.raises(ConfigurationError, match="WORLD_SIZE='two' is not a number of processes"):
        intelrt.plan(tiny_model)  # below xccl's torch floor, a distributed run is refused: it must be read
    from intelrt.support.distributed import is_distributed_launch, world_size

    assert world_size({"WORLD_SIZE": "4"}) == 4 and world_size({}) == 1
    with pytest.raises(ConfigurationError, match="WORLD_SIZE='-3'"):
        is_distributed_launch({"WORLD_SIZE": "-3"})
