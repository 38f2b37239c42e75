"""Fault catalogue: resuming from a damaged checkpoint — each file of ``checkpoint-2`` cut in half,
emptied, garbled or missing, in a whole-model run and a LoRA run; checkpoints that hold the wrong
weights (a LoRA resume next to a whole ``model.safetensors`` reported success and restored no
adapter); ``resume=`` values that name no checkpoint. Every damaged file is named, with the
previous checkpoint as the way out (``resume='…/checkpoint-1'``; CLI ``--resume …``) — and that way
out works.

Two real runs make the checkpoints once per module (the tiny model, ``max_steps=2``,
``save_steps=1``); each case damages a copy. The refusals come before any step.
"""

from __future__ import annotations

import json
import shutil
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from faults import Catalogue, Fault, call, check, cli, error, works

import intelrt

catalogue = Catalogue(__file__)
TEXTS = ["Intel GPUs run PyTorch through the XPU backend.", "Gaudi runs PyTorch eager by default."] * 8
FAST = {"block_size": 16, "disable_tqdm": True, "per_device_train_batch_size": 4}


@pytest.fixture(scope="module")
def runs(tiny_model: Path, tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """A whole-model run and a LoRA run, each with checkpoint-1 and checkpoint-2."""
    import torch

    before = torch.get_num_threads()
    torch.set_num_threads(1)
    made = {}
    for kind in ("full", "lora"):
        out = tmp_path_factory.mktemp(f"resume-{kind}") / "run"
        intelrt.load(tiny_model).train(TEXTS, lora=kind == "lora", output_dir=out, max_steps=2, save_steps=1, **FAST)
        assert (out / "checkpoint-1" / "trainer_state.json").is_file() and (out / "checkpoint-2").is_dir()
        made[kind] = out
    torch.set_num_threads(before)
    return made


def cut(path: Path) -> None:
    data = path.read_bytes()
    path.write_bytes(data[:len(data) // 2])


DAMAGES: dict[str, Callable[[Path], None]] = {
    "truncated": cut, "empty": lambda p: p.write_bytes(b""), "missing": Path.unlink,
    "garbled": lambda p: p.write_text('{"global_step": 2, "log_hist'), "not-a-state": lambda p: p.write_text("[1, 2]"),
}
WAY_OUT = ("resume from the checkpoint before it", "checkpoint-1", "--resume", "overwrite=True")


def _f(kind: str, name: str, how: str, *says: str, error_type: str = "ModelSourceError",
       risk: str = "traceback") -> Fault:
    key = name.split(".")[0].replace("_", "-")
    return error(f"resume-{kind}-{key}-{how}", "resume", f"{'a LoRA' if kind == 'lora' else 'a whole-model'} "
                 f"checkpoint-2 with {name} {how.replace('-', ' ')}", *says, risk=risk, error=error_type,
                 trigger=f"train(..., resume=True) after {name} of the last checkpoint was {how.replace('-', ' ')}",
                 data=(kind, name, how))


DAMAGED = [
    _f("full", "model.safetensors", "truncated", "checkpoint-2: model.safetensors is truncated", *WAY_OUT),
    _f("full", "model.safetensors", "empty", "model.safetensors is empty", *WAY_OUT),
    _f("full", "model.safetensors", "missing", "holds no model weights", "checkpoint-1", error_type="IntelrtError",
       risk="silent wrong"),
    _f("full", "optimizer.pt", "truncated", "optimizer.pt is truncated or damaged", *WAY_OUT),
    _f("full", "scheduler.pt", "truncated", "scheduler.pt is truncated or damaged", *WAY_OUT),
    _f("full", "trainer_state.json", "garbled", "trainer_state.json is not readable JSON", *WAY_OUT),
    _f("full", "trainer_state.json", "not-a-state", "not a Trainer state (no global_step)", *WAY_OUT),
    _f("lora", "adapter_model.safetensors", "truncated", "checkpoint-2: adapter_model.safetensors is truncated",
       *WAY_OUT),
    _f("lora", "adapter_model.safetensors", "empty", "adapter_model.safetensors is empty (0 bytes)", *WAY_OUT),
    _f("lora", "rng_state.pth", "truncated", "rng_state.pth is truncated or damaged", *WAY_OUT),
]


@catalogue.cases(DAMAGED)
def test_a_damaged_checkpoint_is_named_with_the_previous_one_as_the_way_out(case: Fault, runs: dict[str, Path],
                                                                           tiny_model: Path, tmp_path: Path,
                                                                           one_torch_thread: None) -> None:
    kind, name, how = case.data
    out = Path(shutil.copytree(runs[kind], tmp_path / "run"))
    DAMAGES[how](out / "checkpoint-2" / name)
    before = sorted(p.name for p in out.iterdir())
    check(case, call(lambda: intelrt.load(tiny_model).train(TEXTS, lora=kind == "lora", output_dir=out, resume=True,
                                                            max_steps=3, **FAST)))
    assert sorted(p.name for p in out.iterdir()) == before, "the refused resume changed the run's directory"


@catalogue.cases(
    error("resume-lora-next-to-whole-model", "resume", "a LoRA checkpoint that also holds a whole model.safetensors "
          "(the resume reported success and restored no adapter)", "holds a whole model", "next to the LoRA adapter",
          risk="silent wrong", error="ConfigurationError",
          trigger="cp checkpoint-2/../model.safetensors into a LoRA checkpoint-2; train(lora=True, resume=True)",
          data="mixed"),
    error("resume-lora-checkpoint-as-full", "resume", "a LoRA run's checkpoint resumed as a whole-model run",
          "holds only LoRA adapters", "lora=True", risk="silent wrong", error="ConfigurationError",
          trigger="train(lora=False, resume=True) in a LoRA run's directory", data="as-full"),
)
def test_a_checkpoint_holding_other_weights_than_this_run_trains_is_refused(case: Fault, runs: dict[str, Path],
                                                                           tiny_model: Path, tmp_path: Path,
                                                                           one_torch_thread: None) -> None:
    out = Path(shutil.copytree(runs["lora"], tmp_path / "run"))
    if case.data == "mixed":
        shutil.copy(runs["full"] / "checkpoint-2" / "model.safetensors", out / "checkpoint-2" / "model.safetensors")
    check(case, call(lambda: intelrt.load(tiny_model).train(TEXTS, lora=case.data == "mixed", output_dir=out,
                                                            resume=True, max_steps=3, **FAST)))


RESUME_VALUES = [
    error("resume-nothing-to-resume", "resume", "resume=True in a directory holding no checkpoint",
          "holds no checkpoint-N directory", error="ConfigurationError", trigger="train(..., resume=True) into a new "
          "directory", data=True),
    error("resume-not-a-checkpoint", "resume", "resume= a directory that is no checkpoint", "is not a Trainer checkpoint",
          error="ConfigurationError", trigger="train(..., resume='an-empty-dir')", data="dir"),
    error("resume-an-int", "resume", "resume=2, a step number", "resume= takes True, False or a checkpoint directory",
          error="ConfigurationError", trigger="train(..., resume=2)", data=2),
]


@catalogue.cases(RESUME_VALUES)
def test_a_resume_value_naming_no_checkpoint_is_refused(case: Fault, tiny_model: Path, tmp_path: Path) -> None:
    (tmp_path / "an-empty-dir").mkdir()
    resume: Any = str(tmp_path / "an-empty-dir") if case.data == "dir" else case.data
    check(case, call(lambda: intelrt.load(tiny_model).train(TEXTS, output_dir=tmp_path / "out", resume=resume,
                                                            max_steps=1, **FAST)))


@catalogue.cases(error("resume-cli-truncated-model", "resume", "intelrt train --resume with the last checkpoint's "
                       "model.safetensors truncated", "model.safetensors is truncated", "--resume", "checkpoint-1",
                       trigger="intelrt train MODEL --data d.txt --output run --resume (checkpoint-2 cut)"))
def test_the_cli_names_the_damaged_checkpoint_file(case: Fault, runs: dict[str, Path], tiny_model: Path,
                                                   tmp_path: Path, one_torch_thread: None) -> None:
    out = Path(shutil.copytree(runs["full"], tmp_path / "run"))
    cut(out / "checkpoint-2" / "model.safetensors")
    data = tmp_path / "d.txt"
    data.write_text("\n".join(TEXTS), encoding="utf-8")
    check(case, cli("train", str(tiny_model), "--data", str(data), "--output", str(out), "--block-size", "16",
                    "--batch-size", "4", "--max-steps", "3", "--resume"))


@catalogue.cases(works("resume-the-way-out", "resume", "the way out the message gives: resume from checkpoint-1 "
                       "after checkpoint-2 was cut", "resumed", trigger="intelrt train … --resume run/checkpoint-1 "
                       "--max-steps 3 --json"))
def test_the_way_out_resumes_from_the_previous_checkpoint_and_trains_to_the_end(case: Fault, runs: dict[str, Path],
                                                                               tiny_model: Path, tmp_path: Path,
                                                                               one_torch_thread: None) -> None:
    out = Path(shutil.copytree(runs["full"], tmp_path / "run"))
    cut(out / "checkpoint-2" / "model.safetensors")
    data = tmp_path / "d.txt"
    data.write_text("\n".join(TEXTS), encoding="utf-8")
    seen = check(case, cli("train", str(tiny_model), "--data", str(data), "--output", str(out), "--block-size", "16",
                           "--batch-size", "4", "--max-steps", "3", "--resume", str(out / "checkpoint-1"), "--json"))
    report = json.loads(seen.stdout)["train"]
    assert report["resumed_from"] == str(out / "checkpoint-1") and report["steps"] == 3
    assert intelrt.load(out).generate("Intel", max_new_tokens=2)
