"""X1 detection of Intel GPUs and the XPU doctor findings, under the simulated XPU runtime."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import pytest

import intelrt
from intelrt.planning.diagnosis import diagnose


def _xpu(detection: Any) -> Any:
    status = detection.get("xpu")
    assert status is not None and status.plugin == "xpu"
    return status


@pytest.mark.claim("X1")
def test_X1_detection_reports_build_devices_names_and_bf16(simulate) -> None:  # type: ignore[no-untyped-def]
    sim = simulate("xpu", count=2, bf16=False, name="Intel(R) Arc(TM) A770 Graphics", memory_gib=16)
    detection = intelrt.detect()
    status = _xpu(detection)
    assert detection.chosen.name == "xpu" and status.available
    assert status.versions["xpu_build"] == "20250301"
    assert [(d.index, d.name, d.bf16) for d in status.devices] == [
        (0, "Intel(R) Arc(TM) A770 Graphics", False), (1, "Intel(R) Arc(TM) A770 Graphics", False)]
    assert status.devices[0].total_memory == 16 * 1024**3
    assert "2 Intel GPU device(s) visible" in status.reason and "bfloat16 emulated" in status.reason
    assert status.versions["hierarchy"] == "COMPOSITE" and status.versions["xccl"] == "True"
    assert len(status.notes) == 1 and "each card is one device" in status.notes[0]  # torch 2.13 meets both floors
    # stock PyTorch only: IPEX is never imported, and nothing but the detection calls touched the device
    assert "intel_extension_for_pytorch" not in sys.modules
    assert set(sim.calls) <= {"xpu.driver_init", "xpu.device_count", "xpu.init", "xpu.get_device_properties"}


@pytest.mark.claim("X1")
@pytest.mark.parametrize(("torch_version", "unmet"), [
    ("2.5.1", ("transformers does not use XPU", "accelerate does not use XPU")),
    ("2.6.0", ("accelerate does not use XPU",)),
    ("2.7.0", ()),
])
def test_X1_detection_notes_each_unmet_torch_floor(simulate, torch_version: str,  # type: ignore[no-untyped-def]
                                                   unmet: tuple[str, ...]) -> None:
    simulate("xpu", count=1, torch_version=torch_version)
    status = _xpu(intelrt.detect())
    assert status.available  # the floors are reported, the device is still there
    floors = status.notes[1:]  # after the hierarchy note
    assert len(floors) == len(unmet)
    for note, expected in zip(floors, unmet, strict=True):
        assert expected in note and torch_version in note


@pytest.mark.claim("X1")
def test_X1_non_xpu_build_is_unavailable_with_the_install_command(simulate) -> None:  # type: ignore[no-untyped-def]
    simulate("xpu", count=2, xpu_build=False)
    detection = intelrt.detect()
    status = _xpu(detection)
    assert not status.available and detection.chosen.name == "cpu"
    assert "not an XPU build" in status.reason and "download.pytorch.org/whl/xpu" in status.reason


@pytest.mark.claim("X1")
def test_X1_doctor_names_a_missing_xpu_build(simulate) -> None:  # type: ignore[no-untyped-def]
    simulate("xpu", count=1, xpu_build=False)
    findings = {f["title"]: f for f in diagnose()["findings"] if f["claim"] == "X1"}
    build = findings["torch is not an XPU build"]
    assert build["severity"] == "warning" and "whl/xpu" in build["fix"]


@pytest.mark.claim("X1")
def test_X1_doctor_errors_on_torch_too_old_for_xpu(simulate) -> None:  # type: ignore[no-untyped-def]
    simulate("xpu", count=1, torch_version="2.5.0")
    report = diagnose()
    old = [f for f in report["findings"] if f["title"] == "torch 2.5.0 is too old for Intel GPUs"]
    assert len(old) == 1 and old[0]["severity"] == "error" and "whl/xpu" in old[0]["fix"]


@pytest.mark.claim("X2")
def test_X2_doctor_warns_about_an_exported_mask(simulate) -> None:  # type: ignore[no-untyped-def]
    simulate("xpu", count=4, env={"ZE_AFFINITY_MASK": "3"})
    report = diagnose()
    stale = [f for f in report["findings"] if f["title"] == "ZE_AFFINITY_MASK=3 is set in the environment"]
    assert len(stale) == 1 and stale[0]["severity"] == "warning"
    assert "command line" in stale[0]["fix"] and "unset ZE_AFFINITY_MASK" in stale[0]["fix"]
    assert report["environment"]["ZE_AFFINITY_MASK"] == "3"


@pytest.mark.claim("X5")
def test_X5_doctor_says_fa2_kernel_is_not_cached_offline(simulate, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    simulate("xpu", count=1, packages={"kernels": "0.18.2"}, env={"KERNELS_CACHE": str(tmp_path)})
    findings = [f for f in diagnose()["findings"] if f["claim"] == "X5"]
    assert len(findings) == 1
    assert findings[0]["severity"] == "warning"  # the suite runs with HF_HUB_OFFLINE=1
    assert "kernels-community/flash-attn2 is not cached" in findings[0]["title"]
    assert "kernels.get_kernel('kernels-community/flash-attn2', version=4)" in findings[0]["fix"]
    assert "LOCAL_KERNELS=" in findings[0]["fix"]
