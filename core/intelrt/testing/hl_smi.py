"""The simulated ``hl-smi`` (Intel Gaudi's management tool): ``hl-smi -Q index,module_id -f csv``.

A Gaudi simulation puts an ``hl-smi`` executable first on ``PATH`` that runs this file; it reads
the machine from ``INTELRT_SIMULATION`` and prints what the real tool prints for the query
Habana's documentation uses to map device indices to module ids
(https://docs.habana.ai/en/latest/Orchestration/Multiple_Tenants_on_HPU/Multiple_Dockers_each_with_Single_Workload.html).
On an 8-Gaudi server indices and module ids differ, as in the output quoted in
huggingface/optimum-habana#1089 (the simulation's default order)::

    index, module_id
    0, 0
    1, 4
    2, 1
    ...

Other queries exit with status 2 and say that the simulation does not know them. Every run is
reported to the simulation (``Simulation.children()``), so tests can prove when it ran.
"""

from __future__ import annotations

import json
import os
import sys

FIELDS = ("index", "module_id")


def main(argv: list[str]) -> int:
    description = os.environ.get("INTELRT_SIMULATION")
    if not description:
        print("hl-smi (simulated): no simulated machine (INTELRT_SIMULATION is not set)", file=sys.stderr)
        return 1
    from intelrt.testing.machine import Machine

    facts = json.loads(description)
    machine = Machine.from_json(facts["machine"])
    if facts.get("child_log"):
        with open(facts["child_log"], "a", encoding="utf-8") as log:
            log.write(json.dumps({"pid": os.getpid(), "import_env": None, "calls": [" ".join(["hl-smi", *argv])]}) + "\n")
    if machine.kind != "hpu":
        print("hl-smi: no Habana devices found", file=sys.stderr)
        return 1
    query = argv[argv.index("-Q") + 1] if "-Q" in argv and argv.index("-Q") + 1 < len(argv) else None
    csv = "-f" in argv and argv[argv.index("-f") + 1: argv.index("-f") + 2] == ["csv"]
    fields = query.split(",") if query else []
    if not csv or not fields or any(f not in FIELDS for f in fields):
        print(f"hl-smi (simulated) answers only -Q <{','.join(FIELDS)}> -f csv; got {' '.join(argv)!r}",
              file=sys.stderr)
        return 2
    modules = machine.modules()
    rows = [{"index": index, "module_id": modules[index]} for index in range(machine.count)]
    print(", ".join(fields))
    for row in rows:
        print(", ".join(str(row[f]) for f in fields))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
