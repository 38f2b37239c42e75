"""`intelrt train`: progress bar, summary, resume, and the --demo lifecycle (issue 5)."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

from intelrt.cli import main

pytestmark = pytest.mark.usefixtures("one_torch_thread")


def test_train_prints_progress_and_summary_then_resumes(tiny_model: Path, tmp_path: Path,
                                                        capsys: pytest.CaptureFixture[str]) -> None:
    data = tmp_path / "data.txt"
    data.write_text("Intel GPUs run PyTorch through the XPU backend.\nGaudi runs PyTorch eager by default.\n" * 6)
    out = tmp_path / "out"
    common = ["train", str(tiny_model), "--data", str(data), "--lora", "--output", str(out), "--block-size", "16",
              "--save-steps", "2", "--learning-rate", "0.01"]
    assert main([*common, "--max-steps", "4"]) == 0
    captured = capsys.readouterr()
    assert "4/4" in captured.err  # Trainer's progress bar
    summary = captured.out[captured.out.index("trained LoRA adapters"):]
    for field in ("loss ", "steps     4", "time ", f"saved to  {out}"):
        assert field in summary, summary
    assert (out / "checkpoint-4").is_dir() and (out / "adapter_model.safetensors").is_file()

    assert main([*common, "--max-steps", "6", "--resume", "--json"]) == 0
    report = json.loads(capsys.readouterr().out)["train"]
    assert report["resumed_from"].endswith("checkpoint-4") and report["steps"] == 6
    assert [step for step, _ in report["losses"]] == [1, 2, 3, 4, 5, 6]


def test_demo_runs_the_lifecycle_and_the_reloaded_model_matches(tiny_model: Path, tmp_path: Path,
                                                                capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["train", str(tiny_model), "--demo", "--epochs", "3", "--output", str(tmp_path), "--json"]) == 0
    report = json.loads(capsys.readouterr().out)
    train, generation = report["train"], report["generation"]
    assert report["plan"]["backend"]["name"] == "cpu"
    assert train["adapter"] and train["final_loss"] < train["first_loss"]
    assert generation["trained"] != generation["before"]
    assert generation["reloaded_matches"] is True and generation["reloaded"] == generation["trained"]


def test_train_needs_data_and_output_and_refuses_simulation(tiny_model: Path, tmp_path: Path,
                                                            capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["train", str(tiny_model), "--output", "x"]) == 2
    assert "--data FILE is required" in capsys.readouterr().err
    data = tmp_path / "d.txt"
    data.write_text("one example\n", encoding="utf-8")
    assert main(["train", str(tiny_model), "--data", str(data)]) == 2
    assert "--output DIR is required" in capsys.readouterr().err
    assert main(["train", str(tiny_model), "--data", str(tmp_path / "missing.txt"), "--output", "x"]) == 2
    assert "missing.txt: no such file" in capsys.readouterr().err
    assert main(["train", "--demo", "--simulate", "xpu:2"]) == 2
    assert "--simulate only plans" in capsys.readouterr().err


def test_lora_without_peft_fails_before_anything_loads(tiny_model: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                       capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setitem(sys.modules, "peft", None)  # as in an environment without it: import fails
    monkeypatch.setenv("INTELRT_CACHE", str(tmp_path / "cache"))  # where the demo would write
    assert main(["train", "--demo"]) == 2
    captured = capsys.readouterr()
    assert "--demo trains LoRA adapters with PEFT, which is not installed: pip install 'intelrt[train]'" in captured.err
    assert captured.out == ""  # not even the plan: nothing was planned, loaded or generated
    data = tmp_path / "d.txt"
    data.write_text("one example\n", encoding="utf-8")
    assert main(["train", str(tiny_model), "--data", str(data), "--lora", "--output", str(tmp_path / "o")]) == 2
    assert "or leave --lora and --4bit out to train the whole model" in capsys.readouterr().err
    assert not (tmp_path / "o").exists() and not (tmp_path / "cache").exists()
