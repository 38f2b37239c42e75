"""Nothing is lost when training dies: SIGKILL after a checkpoint, resume, same weights (issue 5)."""

from __future__ import annotations

import signal
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

pytestmark = pytest.mark.usefixtures("one_torch_thread")


def _adapter(directory: Path) -> dict[str, Any]:
    from safetensors.torch import load_file

    return load_file(str(directory / "adapter_model.safetensors"))


@pytest.mark.slow
def test_sigkill_after_checkpoint_then_resume_equals_uninterrupted_run(tiny_model: Path, tmp_path: Path,
                                                                      train_until_killed: ModuleType) -> None:
    import torch

    import intelrt
    from intelrt.tiny import corpus_text

    script = train_until_killed
    killed, marker = tmp_path / "killed", tmp_path / "saved-step"
    process = script.start_until_checkpoint(tiny_model, killed, 4, marker)
    try:
        process.send_signal(signal.SIGKILL)
    finally:
        process.kill()
        process.wait()
    assert process.returncode == -signal.SIGKILL
    assert (killed / "checkpoint-4" / "adapter_model.safetensors").is_file()
    assert not (killed / "adapter_model.safetensors").exists(), "the killed run must not have finished"

    resumed = intelrt.load(tiny_model).train(corpus_text().splitlines(), output_dir=killed, resume=True,
                                             **script.TRAIN)
    assert resumed.resumed_from is not None and resumed.resumed_from.endswith("checkpoint-4")
    assert resumed.steps == 8

    whole = tmp_path / "whole"
    straight = intelrt.load(tiny_model).train(corpus_text().splitlines(), output_dir=whole, **script.TRAIN)
    assert straight.resumed_from is None and straight.steps == 8

    after_kill, uninterrupted = _adapter(killed), _adapter(whole)
    assert after_kill.keys() == uninterrupted.keys() and after_kill
    start = _adapter(killed / "checkpoint-4")
    assert any(not torch.equal(start[k], after_kill[k]) for k in start), "resuming must have trained further"
    for name, tensor in uninterrupted.items():
        torch.testing.assert_close(after_kill[name], tensor, rtol=1e-5, atol=1e-6, msg=name)
    assert [s for s, _ in resumed.losses] == [s for s, _ in straight.losses]
    assert [round(v, 4) for _, v in resumed.losses] == [round(v, 4) for _, v in straight.losses]


def test_resume_without_a_checkpoint_says_what_the_directory_holds(tiny_model: Path, tmp_path: Path) -> None:
    import intelrt
    from intelrt.errors import ConfigurationError

    (tmp_path / "notes.txt").write_text("x")
    loaded = intelrt.load(tiny_model)
    with pytest.raises(ConfigurationError, match=r"resume=True.*no checkpoint-N.*notes\.txt.*save_steps"):
        loaded.train(["some text to train on"], lora=True, output_dir=tmp_path, resume=True)
