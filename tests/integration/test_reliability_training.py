"""Training never loses data or reports a false success (issue 16), for real on the tiny model.

* the output directory: the model's own directory and any directory holding what this run did
  not write are refused (unless ``overwrite=True`` or ``resume=True``); one training per
  directory at a time (a file lock naming its holder);
* divergence: a non-finite loss, gradient norm or weight stops the run, saves nothing as the final
  model, keeps the checkpoints written before, and says which step and what to lower;
* debris: what a run cut short by a kill or Ctrl-C leaves is removed (and named) by the next run;
* resuming: a damaged checkpoint file is named, with the way out.

Faults are made as users and the OS make them: a learning rate of 1e38, a second process, SIGKILL,
SIGINT, files cut short on disk. Nothing of intelrt is patched.
"""

from __future__ import annotations

import json
import logging
import os
import shutil
import signal
import socket
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

import intelrt
from intelrt.cli import main
from intelrt.cli.interrupt import Terminated, interrupts
from intelrt.errors import ConfigurationError, ModelSourceError, TrainingDivergedError
from intelrt.training.locking import HOLDER_NAME, LOCK_NAME

pytestmark = pytest.mark.usefixtures("one_torch_thread")

TEXTS = ["Intel GPUs run PyTorch through the XPU backend.", "Gaudi runs PyTorch eager by default."] * 8
FAST = {"block_size": 16, "disable_tqdm": True, "per_device_train_batch_size": 4}


def _files(directory: Path) -> dict[str, bytes]:
    """Every file under ``directory`` with its bytes (what must not change)."""
    return {str(p.relative_to(directory)): p.read_bytes() for p in sorted(directory.rglob("*")) if p.is_file()}


def _copy(tiny_model: Path, target: Path) -> Path:
    shutil.copytree(tiny_model, target)
    return target


def _cli(*args: str, timeout: int = 180) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "intelrt.cli", *args], capture_output=True, text=True,
                          timeout=timeout, env={**os.environ, "OMP_NUM_THREADS": "1"})


def _corpus(tmp_path: Path) -> Path:
    from intelrt.tiny import corpus_text

    path = tmp_path / "corpus.txt"
    path.write_text(corpus_text(), encoding="utf-8")
    return path


# -- the model's own directory and directories holding other content -------------------------------------

def test_lora_into_the_base_models_own_directory_is_refused_and_the_base_still_loads(tiny_model: Path,
                                                                                       tmp_path: Path) -> None:
    """It deleted base/config.json and wrote an adapter whose base model was itself."""
    base = _copy(tiny_model, tmp_path / "base")
    before = _files(base)
    loaded = intelrt.load(base)
    for overwrite in (False, True):
        with pytest.raises(ConfigurationError, match=r"holds the model the adapters are trained on .*overwrite=True "
                                                     r"\(--overwrite\) does not change this"):
            loaded.train(TEXTS, lora=True, output_dir=base, overwrite=overwrite, max_steps=1, **FAST)
    assert _files(base) == before, "the base directory changed"
    assert intelrt.load(base).generate("Intel", max_new_tokens=3)


@pytest.mark.slow
def test_the_issues_command_into_the_base_directory_exits_non_zero_and_the_base_still_runs(tiny_model: Path,
                                                                                         tmp_path: Path) -> None:
    base = _copy(tiny_model, tmp_path / "base")
    before = _files(base)
    done = _cli("train", str(base), "--data", str(_corpus(tmp_path)), "--lora", "--output", str(base),
                "--max-steps", "2")
    assert done.returncode == 2 and "Traceback" not in done.stderr, done.stderr[-2000:]
    assert f"output_dir {base} holds the model the adapters are trained on" in done.stderr
    assert _files(base) == before
    again = _cli("run", str(base), "--max-new-tokens", "3", "--json")
    assert again.returncode == 0, again.stderr[-2000:]
    assert json.loads(again.stdout)["output"]


def test_full_training_into_the_models_own_directory_needs_overwrite(tiny_model: Path, tmp_path: Path) -> None:
    base = _copy(tiny_model, tmp_path / "base")
    before = _files(base)
    loaded = intelrt.load(base)
    with pytest.raises(ConfigurationError, match=r"is where the model being trained was loaded from .*overwrite=True"):
        loaded.train(TEXTS, output_dir=base, max_steps=1, **FAST)
    assert _files(base) == before
    result = loaded.train(TEXTS, output_dir=base, overwrite=True, max_steps=1, save_strategy="no", **FAST)
    assert result.steps == 1 and (base / "intelrt_train.json").is_file()
    assert _files(base)["model.safetensors"] != before["model.safetensors"]  # replaced by the fine-tuned one
    assert intelrt.load(base).generate("Intel", max_new_tokens=3)


def _a_file(directory: Path) -> None:
    (directory / "notes.txt").write_text("my notes", encoding="utf-8")


def _an_adapter(directory: Path) -> None:
    (directory / "adapter_config.json").write_text(json.dumps({"base_model_name_or_path": "elsewhere"}))
    (directory / "adapter_model.safetensors").write_bytes(b"")


def _a_checkpoint(directory: Path) -> None:
    (directory / "checkpoint-3").mkdir()
    (directory / "checkpoint-3" / "trainer_state.json").write_text(json.dumps({"global_step": 3}))


def _an_incomplete_checkpoint(directory: Path) -> None:
    (directory / "checkpoint-2").mkdir()
    (directory / "checkpoint-2" / "config.json").write_text("{}")


@pytest.mark.parametrize(("fill", "named"), [
    (_a_file, "other files (notes.txt)"),
    (lambda d: shutil.copytree(intelrt.tiny.default_model_path(), d, dirs_exist_ok=True),
     "a saved model (config.json and 5 more files)"),  # chat_template.jinja among them
    (_an_adapter, "a saved model (adapter_config.json and 1 more files)"),
    (_a_checkpoint, "checkpoints of an earlier run (checkpoint-3)"),
    (_an_incomplete_checkpoint, "checkpoints of an earlier run (checkpoint-2)"),
], ids=["a-file", "another-model", "an-adapter", "checkpoints", "an-incomplete-checkpoint"])
def test_a_directory_holding_what_this_run_did_not_write_is_refused_naming_it(tiny_model: Path, tmp_path: Path,
                                                                             fill: Callable[[Path], None],
                                                                             named: str) -> None:
    """A non-empty output directory was overwritten without a word."""
    import intelrt.tiny  # noqa: F401 - the parametrization reads it

    out = tmp_path / "out"
    out.mkdir()
    fill(out)
    before = _files(out)
    with pytest.raises(ConfigurationError, match=rf"already holds {named.replace('(', '[(]').replace(')', '[)]')}, "
                                                 r"which this run did not write.*resume=True.*overwrite=True"):
        intelrt.load(tiny_model).train(TEXTS, output_dir=out, max_steps=1, **FAST)
    assert _files(out) == before


def _checkpoint_steps(directory: Path) -> list[int]:
    return sorted(int(p.name.split("-")[1]) for p in directory.glob("checkpoint-*"))


def test_overwrite_removes_the_earlier_runs_checkpoints_so_they_never_mix(tiny_model: Path, tmp_path: Path,
                                                                          caplog: pytest.LogCaptureFixture) -> None:
    """Two runs into one directory left each other's files in every checkpoint-N, and a later
    full-model resume failed with a ValueError traceback."""
    out = tmp_path / "out"
    intelrt.load(tiny_model).train(TEXTS, output_dir=out, max_steps=6, save_steps=2, **FAST)
    assert _checkpoint_steps(out) == [2, 4, 6]
    with caplog.at_level(logging.WARNING, logger="intelrt"):
        intelrt.load(tiny_model).train(TEXTS, output_dir=out, overwrite=True, max_steps=2, save_steps=2, **FAST)
    assert "overwrite=True: removed the earlier run's checkpoint-2, checkpoint-4, checkpoint-6" in caplog.text
    assert _checkpoint_steps(out) == [2]
    resumed = intelrt.load(tiny_model).train(TEXTS, output_dir=out, resume=True, max_steps=4, save_steps=2, **FAST)
    assert resumed.resumed_from == str(out / "checkpoint-2") and resumed.steps == 4
    assert json.loads((out / "intelrt_train.json").read_text())["steps"] == 4


def test_overwrite_with_resume_and_a_non_bool_overwrite_are_refused(tiny_model: Path, tmp_path: Path) -> None:
    loaded = intelrt.load(tiny_model)
    with pytest.raises(ConfigurationError, match="removes the earlier checkpoints that resume= would continue from"):
        loaded.train(TEXTS, output_dir=tmp_path / "o", overwrite=True, resume=True)
    with pytest.raises(ConfigurationError, match="overwrite must be True or False, got 'yes'"):
        loaded.train(TEXTS, output_dir=tmp_path / "o", overwrite="yes")  # type: ignore[arg-type]
    with pytest.raises(ConfigurationError, match=r"pass overwrite=True \(not overwrite_output_dir=\)"):
        loaded.train(TEXTS, output_dir=tmp_path / "o", overwrite_output_dir=True)
    assert not (tmp_path / "o").exists()


def test_a_loaded_adapter_is_never_trained_into_its_base_or_its_own_directory(tiny_model: Path,
                                                                              tmp_path: Path) -> None:
    base = _copy(tiny_model, tmp_path / "base")
    lora = tmp_path / "lora"
    intelrt.load(base).train(TEXTS, lora=True, output_dir=lora, max_steps=1, save_strategy="no", **FAST)
    before, adapter_before = _files(base), _files(lora)
    adapter = intelrt.load(lora)
    with pytest.raises(ConfigurationError, match=r"holds the model the adapters are trained on"):
        adapter.train(TEXTS, lora=True, output_dir=base, overwrite=True, max_steps=1, **FAST)
    with pytest.raises(ConfigurationError, match=r"is where the model being trained was loaded from"):
        adapter.train(TEXTS, lora=True, output_dir=lora, max_steps=1, **FAST)
    with pytest.raises(ConfigurationError, match=r"train from the base model instead"):
        adapter.train(TEXTS, lora=True, output_dir=lora, overwrite=True, max_steps=1, **FAST)
    assert _files(base) == before and _files(lora) == adapter_before


# -- divergence ---------------------------------------------------------------------------------------------

def _no_final_model(out: Path) -> None:
    left = sorted(p.name for p in out.iterdir()) if out.exists() else []
    assert not {"config.json", "adapter_config.json", "model.safetensors", "adapter_model.safetensors",
                "intelrt_train.json"} & set(left), left
    assert not [n for n in left if n.startswith(".intelrt-")], left


@pytest.mark.slow
def test_a_learning_rate_of_1e38_exits_non_zero_with_no_final_model(tiny_model: Path, tmp_path: Path) -> None:
    """It reported losses 5.96, 0.0, 0.0, 0.0, exited 0, and every tensor of the saved model was nan."""
    out = tmp_path / "out"
    done = _cli("train", str(tiny_model), "--data", str(_corpus(tmp_path)), "--output", str(out), "--learning-rate",
                "1e38", "--max-steps", "4")
    assert done.returncode == 1 and "Traceback" not in done.stderr, done.stderr[-3000:]  # a run that failed
    assert "intelrt: error: training diverged at step 2 of 4: the loss became nan" in done.stderr
    assert "Nothing was saved as the final model" in done.stderr and "it was 1e+38" in done.stderr
    _no_final_model(out)


@pytest.mark.parametrize(("save", "message"), [
    ({}, r"diverged at step 2 of 3: the loss became nan\. "),
    ({"save_steps": 1}, r"diverged at step 1 of 3: the weights stopped being finite numbers \(base_model\..*lora_.* "
                        r"holds nan or inf\)"),
], ids=["caught-by-the-loss", "caught-at-the-checkpoint"])
def test_lora_with_a_learning_rate_of_1e38_stops_before_saving(tiny_model: Path, tmp_path: Path,
                                                               save: dict[str, int], message: str) -> None:
    out = tmp_path / "out"
    with pytest.raises(TrainingDivergedError, match=message + r".*1e-4 to 2e-4 for LoRA is usual"):
        intelrt.load(tiny_model).train(TEXTS, lora=True, output_dir=out, learning_rate=1e38, max_steps=3, **save,
                                       **FAST)
    _no_final_model(out)
    assert _checkpoint_steps(out) == []


def _raise_learning_rate_at(step: int, value: float) -> Any:
    """A schedule that jumps to ``value`` for step ``step`` + 1 (a user's callback, as a bad custom schedule)."""
    from transformers import TrainerCallback

    class Jump(TrainerCallback):  # type: ignore[misc]
        def on_step_begin(self, args: Any, state: Any, control: Any, optimizer: Any = None,
                          lr_scheduler: Any = None, **kwargs: Any) -> None:
            if state.global_step == step:
                for group in optimizer.param_groups:
                    group["lr"] = value
                lr_scheduler.base_lrs = [value] * len(optimizer.param_groups)

    return Jump()


def test_divergence_stops_at_its_step_and_keeps_the_last_good_checkpoint(tiny_model: Path, tmp_path: Path) -> None:
    out = tmp_path / "out"
    with pytest.raises(TrainingDivergedError) as caught:
        intelrt.load(tiny_model).train(TEXTS, output_dir=out, max_steps=6, save_steps=1,
                                       callbacks=[_raise_learning_rate_at(2, 1e39)], **FAST)
    message = str(caught.value)
    assert message.startswith("training diverged at step 3 of 6: the weights stopped being finite numbers")
    assert f"the last checkpoint before it, {out / 'checkpoint-2'}, is kept" in message
    assert "Lower the learning rate" in message and "load it again before generating" in message
    assert _checkpoint_steps(out) == [1, 2]
    _no_final_model(out)
    from safetensors.torch import load_file

    assert all(bool(t.isfinite().all()) for t in load_file(str(out / "checkpoint-2" / "model.safetensors")).values())
    resumed = intelrt.load(tiny_model).train(TEXTS, output_dir=out, resume=str(out / "checkpoint-2"), max_steps=6,
                                             save_steps=1, **FAST)  # the way out the message gives
    assert resumed.steps == 6 and all(map(lambda loss: loss == loss, (x for _, x in resumed.losses)))


@pytest.mark.parametrize("save_strategy", ["no", "steps"])
def test_a_last_update_that_breaks_the_weights_saves_nothing(tiny_model: Path, tmp_path: Path,
                                                            save_strategy: str) -> None:
    """The loss of the last step is computed before its update: only the weights tell."""
    out = tmp_path / "out"
    with pytest.raises(TrainingDivergedError, match=r"diverged at step 1 of 1: the weights stopped being finite "
                                                    r"numbers .*no checkpoint was written before it"):
        intelrt.load(tiny_model).train(TEXTS, output_dir=out, learning_rate=1e39, max_steps=1,
                                       save_strategy=save_strategy, **FAST)
    _no_final_model(out)


def test_divergence_between_logged_steps_is_caught_at_its_step(tiny_model: Path, tmp_path: Path) -> None:
    """Trainer logs the mean loss every logging_steps and filters nan out of it; intelrt checks every step."""
    with pytest.raises(TrainingDivergedError, match=r"diverged at step 2 of 4: the loss became nan"):
        intelrt.load(tiny_model).train(TEXTS, output_dir=tmp_path / "out", learning_rate=1e38, max_steps=4,
                                       logging_steps=50, **FAST)


# -- one training per directory ------------------------------------------------------------------------------

def test_a_second_training_into_a_held_directory_is_refused_naming_this_process(tiny_model: Path,
                                                                                tmp_path: Path) -> None:
    from transformers import TrainerCallback

    out, refusals = tmp_path / "out", []
    second = intelrt.load(tiny_model)

    class StartAnother(TrainerCallback):  # type: ignore[misc]
        def on_step_end(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
            try:
                second.train(TEXTS, output_dir=out, resume=True, max_steps=1, **FAST)
            except ConfigurationError as exc:
                refusals.append(str(exc))

    intelrt.load(tiny_model).train(TEXTS, output_dir=out, max_steps=1, callbacks=[StartAnother()], **FAST)
    assert len(refusals) == 1
    assert refusals[0].startswith(f"output_dir {out} is in use by another training: process {os.getpid()} on host "
                                  f"{socket.gethostname()}, training since ")
    assert not (out / LOCK_NAME).exists() and not (out / HOLDER_NAME).exists()


@pytest.mark.slow
def test_two_concurrent_trainings_one_clear_refusal_and_a_killed_holder_blocks_nothing(
        tiny_model: Path, tmp_path: Path, train_until_killed: ModuleType) -> None:
    out = tmp_path / "out"
    first = train_until_killed.start_until_checkpoint(tiny_model, out, 2, tmp_path / "saved-step")
    try:
        common = ["train", str(tiny_model), "--data", str(_corpus(tmp_path)), "--lora", "--output", str(out),
                  "--block-size", "32", "--batch-size", "4", "--save-steps", "2", "--max-steps", "4"]
        second = _cli(*common)
        assert second.returncode == 2 and "Traceback" not in second.stderr, second.stderr[-2000:]
        assert (f"output_dir {out} is in use by another training: process {first.pid} on host "
                f"{socket.gethostname()}") in second.stderr
        first.send_signal(signal.SIGKILL)
        first.wait()
        assert (out / LOCK_NAME).exists(), "a SIGKILLed run leaves its lock file"
        third = _cli(*common, "--resume")
        assert third.returncode == 0, third.stderr[-2000:]
        assert "resumed   from" in third.stdout and "checkpoint-2" in third.stdout
    finally:
        first.kill()
        first.wait()
    assert not [p.name for p in out.iterdir() if p.name.startswith(".intelrt-")]


# -- debris of a run cut short ---------------------------------------------------------------------------

def test_a_staging_directory_and_a_lock_left_by_a_kill_are_removed_and_named(tiny_model: Path, tmp_path: Path,
                                                                           caplog: pytest.LogCaptureFixture) -> None:
    """SIGKILL during the final save left a hidden .intelrt-saving-* directory behind."""
    out = tmp_path / "out"
    staging = out / ".intelrt-saving-k1ll3d"
    staging.mkdir(parents=True)
    (staging / "model.safetensors").write_bytes(b"\0" * 100)  # what a kill during the save leaves
    (out / LOCK_NAME).write_text("")
    (out / HOLDER_NAME).write_text(json.dumps({"pid": 999999, "host": "gone", "started": "earlier"}))
    with caplog.at_level(logging.WARNING, logger="intelrt"):
        intelrt.load(tiny_model).train(TEXTS, output_dir=out, max_steps=1, save_strategy="no", **FAST)
    assert f"{out}: removed .intelrt-saving-k1ll3d, left by a run that was cut short" in caplog.text
    assert not [p.name for p in out.iterdir() if p.name.startswith(".intelrt-")]
    assert (out / "config.json").is_file()


def test_an_empty_checkpoint_left_by_ctrl_c_is_removed_and_named(tiny_model: Path, tmp_path: Path,
                                                                caplog: pytest.LogCaptureFixture) -> None:
    out = tmp_path / "out"
    (out / "checkpoint-3").mkdir(parents=True)
    with caplog.at_level(logging.WARNING, logger="intelrt"):
        intelrt.load(tiny_model).train(TEXTS, output_dir=out, max_steps=1, save_strategy="no", **FAST)
    assert f"{out}: removed checkpoint-3, left by a run that was cut short" in caplog.text
    assert _checkpoint_steps(out) == []


@pytest.mark.usefixtures("ctrl_c_raises")
@pytest.mark.parametrize(("sent", "raised"), [(signal.SIGINT, KeyboardInterrupt), (signal.SIGTERM, Terminated)],
                         ids=["ctrl-c", "sigterm"])
def test_ctrl_c_during_a_checkpoint_leaves_no_empty_checkpoint(tiny_model: Path, tmp_path: Path,
                                                               caplog: pytest.LogCaptureFixture, sent: int,
                                                               raised: type[BaseException]) -> None:
    """Ctrl-C while checkpoint-N was being written left an empty checkpoint-N behind. SIGTERM, as
    the command line takes it (``intelrt.cli.interrupt``), stops the run the same way."""
    from transformers import TrainerCallback

    out, armed = tmp_path / "out", []

    class ArmAtStep2(TrainerCallback):  # type: ignore[misc]
        def on_step_end(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
            if state.global_step == 2:
                armed.append(True)

    def ctrl_c(module: Any, state_dict: Any, prefix: str, local_metadata: Any) -> None:
        if armed:  # checkpoint-2's directory exists and nothing is written into it yet
            os.kill(os.getpid(), sent)

    loaded = intelrt.load(tiny_model)
    handle = loaded.model.register_state_dict_post_hook(ctrl_c)
    try:
        with caplog.at_level(logging.WARNING, logger="intelrt"), pytest.raises(raised), interrupts():
            loaded.train(TEXTS, output_dir=out, max_steps=4, save_steps=1, callbacks=[ArmAtStep2()], **FAST)
    finally:
        handle.remove()
    assert "training interrupted during a checkpoint. Removed the incomplete checkpoint-2" in caplog.text
    assert _checkpoint_steps(out) == [1] and (out / "checkpoint-1" / "trainer_state.json").is_file()
    assert not [p.name for p in out.iterdir() if p.name.startswith(".intelrt-")]


# -- resuming from a damaged checkpoint ------------------------------------------------------------------------

@pytest.fixture(scope="module")
def checkpointed(tiny_model: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A LoRA run with checkpoint-2 and checkpoint-4."""
    import torch

    torch.set_num_threads(1)
    out = tmp_path_factory.mktemp("checkpointed") / "run"
    intelrt.load(tiny_model).train(TEXTS, lora=True, output_dir=out, max_steps=4, save_steps=2, **FAST)
    assert _checkpoint_steps(out) == [2, 4]
    return out


def _cut(path: Path) -> None:
    data = path.read_bytes()
    path.write_bytes(data[:len(data) // 2])


@pytest.mark.parametrize(("name", "damage", "problem"), [
    ("trainer_state.json", lambda p: p.write_text('{"global_step": 4, "log_hist'), "is not readable JSON"),
    ("trainer_state.json", lambda p: p.write_text("[1, 2]"), r"is not a Trainer state \(no global_step\)"),
    ("optimizer.pt", _cut, r"is truncated or damaged \(not a complete torch.save archive"),
    ("scheduler.pt", _cut, r"is truncated or damaged"),
    ("rng_state.pth", _cut, r"is truncated or damaged"),
    ("adapter_model.safetensors", _cut, r"is truncated: tensor '.+' ends at byte"),
    ("adapter_model.safetensors", lambda p: p.write_bytes(b""), r"is empty \(0 bytes\)"),
], ids=["garbled-trainer-state", "trainer-state-not-an-object", "truncated-optimizer", "truncated-scheduler",
        "truncated-rng-state", "truncated-adapter-weights", "empty-adapter-weights"])
def test_a_damaged_checkpoint_file_is_named_with_the_way_out(tiny_model: Path, tmp_path: Path, checkpointed: Path,
                                                            name: str, damage: Callable[[Path], None],
                                                            problem: str) -> None:
    """Each ended in a traceback from deep inside Trainer."""
    out = Path(shutil.copytree(checkpointed, tmp_path / "run"))
    damage(out / "checkpoint-4" / name)
    with pytest.raises(ModelSourceError, match=rf"cannot resume from {out}/checkpoint-4: {name} {problem}.* Ways "
                                               rf"out: resume from the checkpoint before it \(resume='{out}/checkpoint-2'; "
                                               rf"CLI: --resume {out}/checkpoint-2\), or start over \(overwrite=True"):
        intelrt.load(tiny_model).train(TEXTS, lora=True, output_dir=out, resume=True, max_steps=6, **FAST)


def test_the_way_out_of_a_damaged_checkpoint_works_and_the_only_one_says_so(tiny_model: Path, tmp_path: Path,
                                                                          checkpointed: Path,
                                                                          capsys: pytest.CaptureFixture[str]) -> None:
    out = Path(shutil.copytree(checkpointed, tmp_path / "run"))
    _cut(out / "checkpoint-4" / "optimizer.pt")
    with pytest.raises(ModelSourceError, match="checkpoint-4: optimizer.pt"):
        intelrt.load(tiny_model).train(TEXTS, lora=True, output_dir=out, resume=str(out / "checkpoint-4"), **FAST)
    data = tmp_path / "data.txt"
    data.write_text("\n".join(TEXTS), encoding="utf-8")
    assert main(["train", str(tiny_model), "--data", str(data), "--lora", "--output", str(out), "--block-size", "16",
                 "--batch-size", "4", "--max-steps", "6", "--resume", str(out / "checkpoint-2"), "--json"]) == 0
    report = json.loads(capsys.readouterr().out)["train"]
    assert report["resumed_from"] == str(out / "checkpoint-2") and report["steps"] == 6
    _cut(out / "checkpoint-2" / "adapter_model.safetensors")
    with pytest.raises(ModelSourceError, match=r"checkpoint-2: adapter_model.safetensors is truncated.* no earlier "
                                               r"checkpoint is left, or start over"):
        intelrt.load(tiny_model).train(TEXTS, lora=True, output_dir=out, resume=str(out / "checkpoint-2"), **FAST)


def test_a_truncated_full_model_checkpoint_is_named(tiny_model: Path, tmp_path: Path) -> None:
    """A full-model checkpoint cut short (model.safetensors) gave a SafetensorError traceback on resume."""
    out = tmp_path / "out"
    intelrt.load(tiny_model).train(TEXTS, output_dir=out, max_steps=2, save_steps=1, **FAST)
    _cut(out / "checkpoint-2" / "model.safetensors")
    with pytest.raises(ModelSourceError, match=r"checkpoint-2: model.safetensors is truncated.*resume='.*checkpoint-1'"):
        intelrt.load(tiny_model).train(TEXTS, output_dir=out, resume=True, max_steps=3, **FAST)
