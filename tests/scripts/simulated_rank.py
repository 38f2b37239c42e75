"""One rank of a launch on a simulated machine (tests/test_fidelity_*.py start it with `intelrt.launch`).

It enters the parent's simulated machine (``INTELRT_SIMULATION``), plans, builds transformers'
own ``TrainingArguments`` from the plan and asks accelerate's ``PartialState`` what it decided —
upstream code deciding on the simulated vendor runtime — and writes OUT/rank<LOCAL_RANK>.json.
"""

from __future__ import annotations

import argparse
import json
import os
from pathlib import Path

from intelrt.testing.simulation import inherited


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--out", required=True)
    args = parser.parse_args()
    out = Path(args.out)
    # Importing the Trainer stack under a simulated XPU makes bitsandbytes (through peft) build its
    # tables on the device, which a CPU build of torch cannot hold: import it before the simulation.
    import transformers.training_args  # noqa: F401

    with inherited() as sim:
        import torch
        from accelerate import PartialState

        import intelrt
        from intelrt.planning.planner import plan_backend

        plan = plan_backend()
        report: dict[str, object] = {
            "local_rank": os.environ["LOCAL_RANK"], "collective": plan.decided.collective,
            "mask": os.environ.get("ZE_AFFINITY_MASK"), "modules": os.environ.get("HABANA_VISIBLE_MODULES"),
            "visible": plan.backend.device_count,
        }
        try:
            training = intelrt.training_arguments(out / "trainer", plan=plan, report_to="none")
        except Exception as exc:  # noqa: BLE001 - the parent asserts on what went wrong
            report["error"] = f"{type(exc).__name__}: {exc}"
        else:
            state = PartialState()
            report.update(device=str(training.device), backend=state.backend,
                          distributed_type=str(state.distributed_type).split(".")[-1],
                          world_size=torch.distributed.get_world_size() if torch.distributed.is_initialized() else 1)
            if sim.kind == "xpu" and training.device.index is not None:
                report["uuid"] = torch.xpu.get_device_properties(training.device.index).uuid.hex()
            if sim.kind == "hpu":
                report["hls_module_id"] = os.environ.get("HLS_MODULE_ID")
    (out / f"rank{os.environ['LOCAL_RANK']}.json").write_text(json.dumps(report), encoding="utf-8")


if __name__ == "__main__":
    main()
