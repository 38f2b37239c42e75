"""The simulated machine is data: a ``Machine`` value round-trips through JSON, reaches child
processes unchanged, starts the same simulation as keyword arguments do, and refuses facts that
contradict each other or belong to the other kind of device."""

from __future__ import annotations

from typing import Any

import pytest
import torch

from intelrt.errors import ConfigurationError
from intelrt.testing.machine import GAUDI_MEMORY_GIB, Machine


def test_the_fixture_takes_a_machine_as_keyword_arguments_do(simulate: Any) -> None:
    sim = simulate(Machine("xpu", 2, product="max1100", memory_used_gib=4.0))
    assert torch.xpu.device_count() == 2
    assert torch.xpu.mem_get_info(1) == (int(44 * 1024**3), int(48 * 1024**3))
    assert sim.machine.with_facts(count=3).count == 3


@pytest.mark.parametrize(("generation", "gib"), sorted(GAUDI_MEMORY_GIB.items()))
def test_each_gaudi_generation_has_its_own_memory(simulate: Any, generation: str, gib: float) -> None:
    simulate("hpu", 1, generation=generation, env={"PT_ENABLE_INT64_SUPPORT": "1"})
    import habana_frameworks.torch.hpu as hthpu

    assert hthpu.mem_get_info()[1] == int(gib * 1024**3)


@pytest.mark.parametrize(("facts", "message"), [
    ({"kind": "hpu", "mode": "lazy", "env": {"PT_HPU_LAZY_MODE": "0"}}, "both set the execution mode"),
    ({"kind": "hpu", "count": 2, "busy_modules": (5,)}, r"busy_modules \[5\] are not module ids"),
    ({"kind": "xpu", "torch_fork": True}, "describe Gaudi machines"),
    ({"kind": "hpu", "memory_used_gib": 1.0}, "describe Intel GPUs"),
    ({"kind": "hpu", "pyzes": True}, "describe Intel GPUs"),
    ({"kind": "hpu", "memory_gib": 64.0}, "a Gaudi's memory is its generation's HBM"),
    ({"kind": "hpu", "mode": "fast"}, "mode must be one of"),
    ({"kind": "tpu"}, "kind must be one of"),
])
def test_contradictory_or_foreign_facts_are_refused(facts: dict[str, Any], message: str) -> None:
    with pytest.raises(ConfigurationError, match=message):
        Machine(**facts)


def test_unknown_facts_in_a_description_are_refused() -> None:
    with pytest.raises(ConfigurationError, match="not facts of a simulated machine: gpus"):
        Machine.from_json({"kind": "xpu", "gpus": 2})
