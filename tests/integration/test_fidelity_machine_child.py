"""A simulated machine reaches a child process (moved from tests/contract/test_fidelity_machine.py in
issue 41: the contract tier starts no process)."""

from __future__ import annotations

import json
import os
import subprocess
import sys

from intelrt.testing.machine import Machine
from intelrt.testing.simulation import CHILD_VAR, simulate

GAUDI3_SHARED = Machine("hpu", 8, generation="gaudi3", mode="eager", busy_modules=(0, 1),
                        packages={"accelerate": "1.15.0"}, env={"HABANA_VISIBLE_MODULES": "2,3"})


def test_a_machine_round_trips_through_json_and_reaches_a_child_process() -> None:
    assert Machine.from_json(json.loads(GAUDI3_SHARED.describe())) == GAUDI3_SHARED
    with simulate(GAUDI3_SHARED) as sim:
        assert sim.machine == GAUDI3_SHARED and sim.count == 8 and sim.generation == "gaudi3"
        assert os.environ["PT_HPU_LAZY_MODE"] == "0" and os.environ["HABANA_VISIBLE_MODULES"] == "2,3"
        script = ("import json, os; from intelrt.testing.simulation import current; "
                  "print(current().machine.describe())")
        env = {**os.environ, "PYTHONPATH": os.pathsep.join(p for p in sys.path if p)}
        seen = subprocess.run([sys.executable, "-c", script], env=env, capture_output=True, text=True, check=True)
        assert Machine.from_json(json.loads(seen.stdout)) == GAUDI3_SHARED
        assert [sim.holder(m) for m in (0, 1, 2)] == ["tenant", "tenant", None]
    assert CHILD_VAR not in os.environ and "PT_HPU_LAZY_MODE" not in os.environ
