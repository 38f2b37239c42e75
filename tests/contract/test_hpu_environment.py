"""The environment of a Gaudi run: int64 support set before the stack loads (H3), device
selection by module id, partial servers and tenants (H5)."""

from __future__ import annotations

import os
import re
import socket
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

import intelrt
from intelrt.errors import PlanError
from intelrt.hooks.types import EnvVar, Finding
from intelrt.host.manager import PluginHost

INT64 = {"PT_ENABLE_INT64_SUPPORT": "1"}
SUPPORTED = "0,1 2,3 4,5 6,7 0,1,2,3 4,5,6,7"


@pytest.fixture
def restore_environ() -> Iterator[None]:
    """load()/setup_env() write os.environ on purpose; put it back for the next test."""
    before = dict(os.environ)
    yield
    os.environ.clear()
    os.environ.update(before)


def _env(plan: intelrt.Plan) -> dict[str, tuple[str, str, str | None]]:
    return {s.name: (s.value, s.action, s.claim) for s in plan.env}


def _findings(plan: intelrt.Plan, claim: str) -> list[Finding]:
    return [f for f in plan.findings if f.claim == claim]


@pytest.mark.claim("H3")
def test_H3_detection_counts_gaudis_without_loading_the_stack_here(simulate) -> None:  # type: ignore[no-untyped-def]
    # lazy mode: `import torch` imports only the autoload entry point, not the stack (in eager mode
    # it loads the stack, and int64 is on by default there: see test_fidelity_hpu.py)
    sim = simulate("hpu", 8, generation="gaudi3", mode="lazy", torch_fork=True)
    status = intelrt.detect().chosen
    assert status.name == "hpu" and status.device_count == 8
    assert sim.import_env is None and sys.modules.get("habana_frameworks.torch") is None
    children = sim.children()
    assert len(children) == 1, "one probe process, whose stack saw int64 support on"
    assert children[0]["import_env"]["PT_ENABLE_INT64_SUPPORT"] == "1"
    assert "hpu.device_count" in children[0]["calls"]
    assert any("child process with PT_ENABLE_INT64_SUPPORT=1" in n for n in status.notes)


@pytest.mark.claim("H3")
def test_H3_load_sets_int64_before_the_stack_is_imported(simulate, tiny_model: Path, restore_environ: None) -> None:  # type: ignore[no-untyped-def]
    sim = simulate("hpu", 2, generation="gaudi2", mode="lazy", torch_fork=True)  # no autoload in lazy mode
    plan = intelrt.plan(tiny_model)
    assert _env(plan)["PT_ENABLE_INT64_SUPPORT"] == ("1", "set", "H3")
    assert sim.import_env is None  # planning left this process free of the stack
    # A simulated Gaudi cannot hold tensors, so loading stops when weights reach the device:
    # by then intelrt has set the variable and the stack has been imported with it.
    with pytest.raises((RuntimeError, ModuleNotFoundError)):
        intelrt.load(tiny_model)
    assert sim.import_env is not None, "load() imports the Gaudi stack"
    assert sim.import_env["PT_ENABLE_INT64_SUPPORT"] == "1"
    assert os.environ["PT_ENABLE_INT64_SUPPORT"] == "1"


@pytest.mark.claim("H3")
def test_H3_user_value_is_kept_with_a_warning(simulate, tiny_model: Path, restore_environ: None) -> None:  # type: ignore[no-untyped-def]
    simulate("hpu", 2, env={"PT_ENABLE_INT64_SUPPORT": "0"})
    plan = intelrt.plan(tiny_model)
    assert _env(plan)["PT_ENABLE_INT64_SUPPORT"] == ("0", "kept", "H3")
    warnings = [f for f in _findings(plan, "H3") if f.severity == "warning"]
    assert len(warnings) == 1 and "PT_ENABLE_INT64_SUPPORT=0" in warnings[0].title
    assert "export PT_ENABLE_INT64_SUPPORT=1" in warnings[0].fix
    assert intelrt.setup_env(plan) == [] and os.environ["PT_ENABLE_INT64_SUPPORT"] == "0"


@pytest.mark.claim("H3")
@pytest.mark.parametrize(("machine", "why"), [
    ({"mode": "lazy", "torch_fork": True}, "lazy mode"),  # the user imported the stack: int64 off by default
    ({"mode": "eager", "generation": "gaudi1"}, "first-generation Gaudi"),  # autoloaded; Gaudi 1 has int64 off
])
def test_H3_stack_loaded_too_early_is_reported(simulate, tiny_model: Path, machine: dict[str, object],  # type: ignore[no-untyped-def]
                                               why: str) -> None:
    sim = simulate("hpu", 2, **machine)
    import habana_frameworks.torch  # noqa: F401 - lazy mode: the user's import; eager: `import torch` did it

    assert sim.import_env is not None and "PT_ENABLE_INT64_SUPPORT" not in sim.import_env
    assert sim.int64_support() is False
    plan = intelrt.plan(tiny_model)
    early = [f for f in _findings(plan, "H3") if "loaded before" in f.title]
    assert len(early) == 1 and early[0].severity == "warning" and "intelrt launch" in early[0].fix
    assert why in early[0].detail
    assert sim.children() == [], "the stack was loaded already: detection asked it in-process"


@pytest.mark.claim("H5")
def test_H5_devices_are_module_ids_for_the_launched_process(simulate, tiny_model: Path) -> None:  # type: ignore[no-untyped-def]
    simulate("hpu", 8, generation="gaudi3", env={**INT64, "HABANA_VISIBLE_MODULES": "0,1,2,3,4,5,6,7"})
    plan = intelrt.plan(tiny_model, devices="4,5,6,7")
    assert _env(plan)["HABANA_VISIBLE_MODULES"] == ("4,5,6,7", "replaced", "H5")
    assert not [f for f in plan.findings if f.title == "unsupported Gaudi set for distributed work"]
    assert plan.device == "hpu" and plan.decided.placement.device_map == "hpu"
    assert not re.search(r"hpu:\d", plan.to_json()), "the device is 'hpu', never 'hpu:N'"
    assert not re.search(r"hpu:\d", str(plan))


@pytest.mark.claim("H5")
def test_H5_invisible_module_ids_are_refused(simulate, tiny_model: Path) -> None:  # type: ignore[no-untyped-def]
    simulate("hpu", 8, env={**INT64, "HABANA_VISIBLE_MODULES": "0,1,2,3"})
    with pytest.raises(PlanError, match=r"module id\(s\) 4,5 are not visible .*HABANA_VISIBLE_MODULES=0,1,2,3"):
        intelrt.plan(tiny_model, devices=[4, 5])


@pytest.mark.claim("H5")
def test_H5_partial_server_set_warns_and_strict_refuses(simulate, tiny_model: Path) -> None:  # type: ignore[no-untyped-def]
    simulate("hpu", 8, env=INT64)
    plan = intelrt.plan(tiny_model, devices="1,2")
    partial = [f for f in _findings(plan, "H5") if f.title == "unsupported Gaudi set for distributed work"]
    assert len(partial) == 1 and partial[0].severity == "warning"
    assert "modules 1,2" in partial[0].detail and SUPPORTED in partial[0].detail
    with pytest.raises(PlanError, match="strict mode"):
        intelrt.plan(tiny_model, devices="1,2", strict=True)
    for ok in ("0,1", "6,7", "4,5,6,7", "0,1,2,3,4,5,6,7", "3"):
        assert not [f for f in intelrt.plan(tiny_model, devices=ok).findings if f.title.startswith("unsupported")], ok


@pytest.mark.claim("H5")
def test_H5_visible_devices_is_understood_and_reported_as_index_based(simulate, tiny_model: Path) -> None:  # type: ignore[no-untyped-def]
    simulate("hpu", 8, env={**INT64, "HABANA_VISIBLE_DEVICES": "2,3"})
    status = intelrt.detect().chosen
    # the container runtime reads it when a container starts; the Gaudi stack in a process never does
    assert status.device_count == 8
    assert any("HABANA_VISIBLE_DEVICES=2,3 selects Gaudis by device index only when a container starts" in n
               for n in status.notes)
    plan = intelrt.plan(tiny_model)
    index = [f for f in _findings(plan, "H5") if f.title == "HABANA_VISIBLE_DEVICES selects Gaudis by index"]
    assert len(index) == 1 and "hl-smi -Q index,module_id -f csv" in index[0].fix
    assert "HABANA_VISIBLE_MODULES" not in _env(plan)


def _launch(plan: intelrt.Plan, nproc: int, env: dict[str, str]) -> list[EnvVar | Finding]:
    host = PluginHost()
    return [item for _plugin, item in
            host.launch_env(backend=plan.backend, plan=plan, nproc=nproc, env=env)]


@pytest.mark.claim("H5")
def test_H5_each_tenant_gets_its_own_free_master_port(simulate, tiny_model: Path) -> None:  # type: ignore[no-untyped-def]
    simulate("hpu", 8, env=INT64)
    tenants = [intelrt.plan(tiny_model, devices=ids) for ids in ("0,1,2,3", "4,5,6,7")]
    ports = []
    for plan in tenants:
        port = [i for i in _launch(plan, 4, dict(os.environ)) if isinstance(i, EnvVar) and i.name == "MASTER_PORT"]
        assert len(port) == 1 and port[0].claim == "H5"
        ports.append(int(port[0].value))
    assert ports[0] != ports[1]
    for port in ports:  # free now: a rendezvous can bind it
        with socket.socket() as sock:
            sock.bind(("127.0.0.1", port))


@pytest.mark.claim("H10")
def test_H10_one_process_per_gaudi_at_launch(simulate, tiny_model: Path) -> None:  # type: ignore[no-untyped-def]
    simulate("hpu", 8, env=INT64)
    plan = intelrt.plan(tiny_model, devices="4,5")
    with pytest.raises(PlanError, match="one process per Gaudi"):
        _launch(plan, 4, dict(os.environ))
    idle = [i for i in _launch(intelrt.plan(tiny_model), 4, dict(os.environ)) if isinstance(i, Finding)]
    assert [f.claim for f in idle] == ["H10"] and "4 stay idle" in idle[0].detail


@pytest.mark.claim("H5")
def test_H5_inherited_partial_set_warns_at_launch(simulate, tiny_model: Path) -> None:  # type: ignore[no-untyped-def]
    simulate("hpu", 8, env={**INT64, "HABANA_VISIBLE_MODULES": "1,2"})
    plan = intelrt.plan(tiny_model)
    items = _launch(plan, 2, dict(os.environ))
    partial = [i for i in items if isinstance(i, Finding) and i.title.startswith("unsupported Gaudi set")]
    assert len(partial) == 1 and "HABANA_VISIBLE_MODULES=1,2" in partial[0].detail
