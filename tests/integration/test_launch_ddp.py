"""`intelrt launch --nproc 2` on the CPU, for real: torchrun, gloo, DDP (issue 5, SPEC X11/H10 path)."""

from __future__ import annotations

import importlib.util
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

SCRIPT = Path(__file__).parents[1] / "scripts" / "ddp_tiny.py"
INTELRT = shutil.which("intelrt", path=os.path.dirname(sys.executable)) or "intelrt"
STEPS, BATCH = 20, 16


def _reference() -> tuple[list[float], list[float]]:
    spec = importlib.util.spec_from_file_location("ddp_tiny", SCRIPT)
    assert spec is not None and spec.loader is not None
    module: Any = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    import torch

    model, losses = module.train(rank=0, world=1, steps=STEPS, batch=BATCH)
    return losses, torch.cat([p.detach().flatten() for p in model.parameters()]).tolist()


@pytest.mark.slow
def test_launch_two_cpu_ranks_train_like_one_process(tmp_path: Path) -> None:
    result = subprocess.run([INTELRT, "launch", "--nproc", "2", str(SCRIPT), "--out", str(tmp_path),
                             "--steps", str(STEPS), "--batch", str(BATCH)],
                            capture_output=True, text=True, timeout=180, env={**os.environ, "OMP_NUM_THREADS": "1"})
    assert result.returncode == 0, result.stderr[-3000:]
    ranks = [json.loads((tmp_path / f"rank{r}.json").read_text()) for r in (0, 1)]
    assert [(r["rank"], r["world"], r["local_rank"]) for r in ranks] == [(0, 2, "0"), (1, 2, "1")]
    assert all("cpu:gloo" in r["backend"] for r in ranks), [r["backend"] for r in ranks]
    assert ranks[0]["weights"] == ranks[1]["weights"], "DDP ranks must end with identical weights"

    losses, weights = _reference()
    assert ranks[0]["losses"] == pytest.approx(losses, rel=1e-5, abs=1e-6)
    assert ranks[0]["weights"] == pytest.approx(weights, rel=1e-5, abs=1e-6)
    assert losses[-1] < 0.5 * losses[0], "the reference run must actually learn"
