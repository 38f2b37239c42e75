"""LoRA-train the tiny model with checkpoints; with --hang-after N, stop dead after checkpoint N
is written (writing a marker file) so a test can SIGKILL the process mid-run."""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import intelrt
from intelrt.tiny import corpus_text

#: Shared with the test: the same run, interrupted or not.
TRAIN = {"lora": True, "epochs": 1.0, "max_steps": 8, "save_steps": 2, "block_size": 32, "learning_rate": 1e-2,
         "per_device_train_batch_size": 4, "seed": 7, "disable_tqdm": True}


def callbacks(hang_after: int | None, marker: Path) -> list[Any]:
    from transformers import TrainerCallback

    class HangAfterSave(TrainerCallback):
        def on_save(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
            if state.global_step == hang_after:
                marker.write_text(str(state.global_step), encoding="utf-8")
                time.sleep(600)  # the test kills us here

    return [HangAfterSave()] if hang_after else []


def start_until_checkpoint(model: Path, output: Path, step: int, marker: Path,
                           timeout: float = 150) -> subprocess.Popen[bytes]:
    """Run this script in a child that hangs once checkpoint ``step`` is written; return then."""
    process = subprocess.Popen([sys.executable, __file__, str(model), str(output), "--hang-after", str(step),
                                "--marker", str(marker)], stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                               env={**os.environ, "OMP_NUM_THREADS": "1"})
    deadline = time.monotonic() + timeout
    while not marker.exists():
        if process.poll() is not None or time.monotonic() > deadline:
            process.kill()
            _, err = process.communicate()
            raise AssertionError(f"no checkpoint-{step} within {timeout:.0f} s:\n{err.decode()[-3000:]}")
        time.sleep(0.2)
    return process


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("model")
    parser.add_argument("output")
    parser.add_argument("--hang-after", type=int, default=None)
    parser.add_argument("--marker", default=None)
    args = parser.parse_args()
    loaded = intelrt.load(args.model)
    loaded.train(corpus_text().splitlines(), output_dir=args.output,
                 callbacks=callbacks(args.hang_after, Path(args.marker or "marker")), **TRAIN)


if __name__ == "__main__":
    main()
