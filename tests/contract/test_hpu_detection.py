"""Intel Gaudi detection under the simulated stack: install checks (H2), execution mode (H1),
the accelerate < 1.5.0 diagnosis (H4), and the stack never loaded by ``import intelrt`` (H3)."""

from __future__ import annotations

import pytest

import intelrt
from intelrt.errors import BackendUnavailableError
from intelrt.planning.diagnosis import diagnose

INT64 = {"PT_ENABLE_INT64_SUPPORT": "1"}  # as the Gaudi guide says to export: detection asks in-process


def _hpu(detection: intelrt.Detection) -> intelrt.BackendStatus:
    status = detection.get("hpu")
    assert status is not None and status.plugin == "hpu"
    return status


@pytest.mark.claim("H2")
@pytest.mark.parametrize("generation, label", [("gaudi1", "first-generation Gaudi"), ("gaudi2", "Gaudi 2"),
                                               ("gaudi3", "Gaudi 3")])
def test_H2_detects_every_gaudi_generation_with_versions(simulate, generation: str, label: str) -> None:  # type: ignore[no-untyped-def]
    simulate("hpu", 8, generation=generation, env=INT64)
    detection = intelrt.detect()
    status = _hpu(detection)
    assert detection.chosen.name == "hpu" and status.available and status.device_count == 8
    assert status.reason == f"8 {label} device(s) visible"
    assert status.versions["device_generation"] == generation
    assert status.versions["habana-torch-plugin"] == "1.22.0.740"  # RELEASE.BUILD, as the real wheels
    assert all(d.bf16 for d in status.devices)


@pytest.mark.claim("H2")
def test_H2_missing_stack_is_unavailable_and_named_no_silent_fallback(simulate) -> None:  # type: ignore[no-untyped-def]
    simulate("hpu", 8, packages={"habana-torch-plugin": None})
    detection = intelrt.detect()
    status = _hpu(detection)
    assert not status.available and "habana-torch-plugin" in status.reason and "habana_frameworks" in status.reason
    assert detection.chosen.name == "cpu" and "hpu:" in detection.reason
    with pytest.raises(BackendUnavailableError, match="habana-torch-plugin"):
        intelrt.detect("hpu")


@pytest.mark.claim("H4")
def test_H4_accelerate_below_1_5_is_why_transformers_reports_no_gaudi(simulate) -> None:  # type: ignore[no-untyped-def]
    simulate("hpu", 8, generation="gaudi2", packages={"accelerate": "1.4.0"}, env=INT64)
    status = _hpu(intelrt.detect())
    assert not status.available
    assert "accelerate 1.4.0 < 1.5.0" in status.reason and "is_torch_hpu_available() is False" in status.reason
    # transformers itself agrees: a Gaudi is present, yet it reports none
    from transformers.utils.import_utils import is_torch_hpu_available

    assert is_torch_hpu_available() is False
    findings = [f for f in diagnose()["findings"] if f["claim"] == "H4"]
    assert len(findings) == 1
    assert findings[0]["severity"] == "error"
    assert findings[0]["title"] == "accelerate < 1.5.0: transformers reports no Gaudi"
    assert "pip install --upgrade 'accelerate>=1.5.0'" in findings[0]["fix"]


@pytest.mark.claim("H4")
def test_H4_with_accelerate_1_5_transformers_sees_the_gaudi_and_doctor_is_quiet(simulate) -> None:  # type: ignore[no-untyped-def]
    simulate("hpu", 8, generation="gaudi2", packages={"accelerate": "1.5.0"}, env=INT64)
    assert _hpu(intelrt.detect()).available
    from transformers.utils.import_utils import is_torch_hpu_available

    assert is_torch_hpu_available() is True
    report = diagnose()
    assert not [f for f in report["findings"] if f["claim"] == "H4"]
    assert report["backends"][0]["name"] == "hpu" and report["backends"][0]["available"]


@pytest.mark.claim("H1")
@pytest.mark.parametrize("lazy, expected", [
    (None, "eager (PT_HPU_LAZY_MODE unset"),
    ("0", "eager (PT_HPU_LAZY_MODE=0"),
    ("1", "lazy (PT_HPU_LAZY_MODE=1"),
])
def test_H1_execution_mode_is_reported(simulate, tiny_model, lazy: str | None, expected: str) -> None:  # type: ignore[no-untyped-def]
    # lazy mode runs on Gaudi's PyTorch fork only (the bridge refuses stock torch, issue 30)
    simulate("hpu", 2, torch_fork=lazy == "1", env={**INT64, "PT_HPU_LAZY_MODE": lazy})
    status = _hpu(intelrt.detect())
    mode = [n for n in status.notes if n.startswith("execution mode: ")]
    assert len(mode) == 1 and mode[0].startswith(f"execution mode: {expected}")
    if lazy is None:
        assert "transformers treats unset as lazy '1'" in mode[0]
    doctor = [f for f in diagnose()["findings"] if f["claim"] == "H1"]
    assert doctor and doctor[0]["detail"].startswith(expected)
    # models run unchanged: eager by default, compiling is opt-in; lazy mode has no torch.compile
    compile_decision = intelrt.plan(tiny_model).decisions["compile"]
    assert compile_decision.value.enabled is False and compile_decision.claim == "H1"
    if lazy == "1":
        assert "torch.compile does not run in lazy mode" in compile_decision.reason
    else:
        assert "eagerly by default" in compile_decision.reason


