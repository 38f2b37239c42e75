"""SPEC C1: backend selection — auto, forced, and clear errors; no silent CPU fallback."""

from __future__ import annotations

import pytest

import intelrt
from intelrt.errors import BackendUnavailableError, ConfigurationError


@pytest.mark.claim("C1")
def test_c1_auto_without_accelerator_runs_on_cpu_and_says_why() -> None:
    detection = intelrt.detect()
    assert detection.chosen.name == "cpu"
    assert not detection.forced
    assert detection.reason.startswith("no accelerator found, running on the CPU")
    assert "xpu:" in detection.reason and "not an XPU build" in detection.reason


@pytest.mark.claim("C1")
def test_c1_auto_picks_the_simulated_accelerator(simulate) -> None:  # type: ignore[no-untyped-def]
    simulate("xpu", count=2, product="max1100")  # one tile per card: two devices
    detection = intelrt.detect()
    assert detection.chosen.name == "xpu" and detection.chosen.device_count == 2
    assert detection.reason == "highest-priority available accelerator"


@pytest.mark.claim("C1")
def test_c1_unknown_backend_name_lists_known_backends() -> None:
    with pytest.raises(ConfigurationError) as info:
        intelrt.detect("tpu")
    message = str(info.value)
    assert "'tpu' is not a backend intelrt knows" in message
    for name in ("cpu", "cuda", "xpu", "hpu"):
        assert f"- {name} (" in message


@pytest.mark.claim("C1")
def test_c1_forced_xpu_with_none_present_lists_every_backend_and_reason() -> None:
    with pytest.raises(BackendUnavailableError) as info:
        intelrt.detect("xpu")
    message = str(info.value)
    assert "backend 'xpu' was asked for (backend=) but is not available" in message
    assert "not an XPU build" in message
    assert "hpu (hpu): unavailable" in message and "Gaudi software stack" in message
    assert "cpu (cpu): available" in message
    assert "does not fall back" in message


@pytest.mark.claim("C1")
def test_c1_intelrt_backend_env_bogus_is_an_error(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("INTELRT_BACKEND", "bogus")
    with pytest.raises(ConfigurationError, match="INTELRT_BACKEND='bogus' is not a backend intelrt knows"):
        intelrt.detect()


@pytest.mark.claim("C1")
def test_c1_intelrt_backend_env_forces_cpu_over_an_accelerator(simulate, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    simulate("xpu", count=2)
    monkeypatch.setenv("INTELRT_BACKEND", "cpu")
    detection = intelrt.detect()
    assert detection.chosen.name == "cpu" and detection.forced
    assert detection.reason == "forced by INTELRT_BACKEND"


@pytest.mark.claim("C1")
def test_c1_explicit_argument_wins_over_environment(simulate, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    simulate("hpu", count=8)
    monkeypatch.setenv("INTELRT_BACKEND", "cpu")
    assert intelrt.detect("hpu").chosen.name == "hpu"


@pytest.mark.claim("H2")
def test_h2_gaudi_detected_under_simulation(simulate) -> None:  # type: ignore[no-untyped-def]
    simulate("hpu", count=8)
    detection = intelrt.detect()
    assert detection.chosen.name == "hpu" and detection.chosen.device_count == 8


@pytest.mark.claim("H4")
def test_h4_old_accelerate_makes_gaudi_unavailable_with_the_reason(simulate) -> None:  # type: ignore[no-untyped-def]
    simulate("hpu", count=8, packages={"accelerate": "1.4.0"})
    with pytest.raises(BackendUnavailableError, match=r"accelerate 1.4.0 < 1.5.0"):
        intelrt.detect("hpu")


@pytest.mark.claim("X1")
def test_x1_xpu_detected_with_names_and_bf16(simulate) -> None:  # type: ignore[no-untyped-def]
    simulate("xpu", count=4, bf16=False)  # four Max 1550 cards: eight devices in FLAT mode (issue 17)
    status = intelrt.detect().chosen
    assert status.name == "xpu" and status.device_count == 8
    assert all(d.bf16 is False for d in status.devices)
    assert status.devices[0].name.startswith("Intel(R)")
