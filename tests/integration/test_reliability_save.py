"""Saving under faults (issue 8): a full disk or a read-only output directory never leaves a model
or checkpoint that looks complete, and never costs what was there before.

The faults are made at the OS boundary, in one child process: ``RLIMIT_FSIZE`` (writes past the
limit fail with EFBIG, as on a full disk; the limit is raised again afterwards) and a directory
without write permission (as root, the child drops ``CAP_DAC_OVERRIDE`` so the mode applies).
Nothing of intelrt is patched.
"""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

import pytest

CHILD = textwrap.dedent('''
    import ctypes, ctypes.util, json, os, resource, signal, sys
    from pathlib import Path
    import torch
    torch.set_num_threads(1)
    import intelrt

    model_dir, work = sys.argv[1], Path(sys.argv[2])
    loaded = intelrt.load(model_dir)
    texts = ["Intel GPUs run PyTorch; Gaudi runs it too."] * 8
    common = dict(max_steps=1, block_size=8, disable_tqdm=True, per_device_train_batch_size=2)
    report = {}

    def attempt(name, out, **kw):
        try:
            result = loaded.train(texts, output_dir=str(out), **{**common, **kw})
            report[name] = {"ok": True, "resumed_from": result.resumed_from}
        except Exception as exc:
            report[name] = {"ok": False, "error": type(exc).__name__, "message": str(exc),
                            "intelrt": isinstance(exc, intelrt.IntelrtError), "oserror": isinstance(exc, OSError)}
        report[name]["files"] = sorted(os.listdir(out)) if os.path.isdir(out) else None

    def drop_dac_override():
        """Root ignores file modes through CAP_DAC_OVERRIDE (capability 1): drop it from the effective set."""
        libc = ctypes.CDLL(ctypes.util.find_library("c"), use_errno=True)
        class Header(ctypes.Structure):
            _fields_ = [("version", ctypes.c_uint32), ("pid", ctypes.c_int)]
        class Data(ctypes.Structure):
            _fields_ = [("effective", ctypes.c_uint32), ("permitted", ctypes.c_uint32),
                        ("inheritable", ctypes.c_uint32)]
        header, data = Header(0x20080522, 0), (Data * 2)()
        if libc.capget(ctypes.byref(header), data) == 0:
            data[0].effective &= ~(1 << 1) & 0xFFFFFFFF
            libc.capset(ctypes.byref(header), data)

    attempt("earlier", work / "kept")                      # a complete model from an earlier run
    attempt("checkpointed", work / "resume", save_steps=1)  # checkpoint-1, complete
    partial = work / "resume" / "checkpoint-2"             # what a kill during a save leaves behind
    partial.mkdir()
    (partial / "config.json").write_text((work / "kept" / "config.json").read_text())
    attempt("resume_past_partial", work / "resume", resume=True, max_steps=2, save_steps=10)

    signal.signal(signal.SIGXFSZ, signal.SIG_IGN)          # EFBIG instead of being killed
    soft, hard = resource.getrlimit(resource.RLIMIT_FSIZE)
    resource.setrlimit(resource.RLIMIT_FSIZE, (64 * 1024, hard))   # the weights (> 64 KiB) cannot be written
    attempt("full_final", work / "fresh", save_strategy="no")          # the final save fails
    attempt("full_over_earlier", work / "kept", save_strategy="no", overwrite=True)
    attempt("full_checkpoint", work / "ckpt", max_steps=2, save_steps=1)  # checkpoint-1 fails
    # resumed from checkpoint-1, Trainer rewrites the checkpoint-2 already there in place
    attempt("full_rewriting_checkpoint", work / "resume", resume=str(work / "resume" / "checkpoint-1"), max_steps=2)
    resource.setrlimit(resource.RLIMIT_FSIZE, (soft, hard))
    try:
        report["kept_loads"] = bool(intelrt.load(str(work / "kept")).generate("Intel", max_new_tokens=2) is not None)
    except Exception as exc:
        report["kept_loads"] = repr(exc)

    (work / "a-file").write_text("x")
    attempt("under_a_file", work / "a-file" / "out")
    read_only = work / "read-only"
    read_only.mkdir()
    os.chmod(read_only, 0o555)
    if os.geteuid() == 0:
        drop_dac_override()
    try:
        (read_only / "probe").write_text("x")
        report["read_only_enforced"] = False
    except OSError:
        report["read_only_enforced"] = True
        attempt("read_only_new", read_only / "out")
        attempt("read_only_itself", read_only)
        stale = work / "stale"                              # checkpoint-1 complete, checkpoint-2 cut short
        attempt("stale_run", stale, save_steps=1)
        (stale / "checkpoint-2").mkdir()
        (stale / "checkpoint-2" / "config.json").write_text("{}")
        os.chmod(stale / "checkpoint-2", 0o555)             # ...and read-only: it cannot be removed
        attempt("resume_past_read_only_stale", stale, resume=True, max_steps=2, save_steps=1)
        report["stale_left"] = sorted(os.listdir(stale / "checkpoint-2"))
        attempt("overwrite_read_only_stale", stale, overwrite=True)
    print("REPORT " + json.dumps(report))
''')


@pytest.fixture(scope="module")
def report(tiny_model: Path, tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    work = tmp_path_factory.mktemp("save-faults")
    script = work / "child.py"
    script.write_text(CHILD)
    done = subprocess.run([sys.executable, str(script), str(tiny_model), str(work)], capture_output=True,
                          text=True, timeout=240, env={**__import__("os").environ, "OMP_NUM_THREADS": "1"})
    line = next((x for x in done.stdout.splitlines() if x.startswith("REPORT ")), None)
    assert line is not None, f"the child failed:\n{done.stdout[-3000:]}\n{done.stderr[-5000:]}"
    return dict(json.loads(line[len("REPORT "):]))


def _looks_complete(files: list[str] | None) -> bool:
    return bool(files) and bool({"config.json", "adapter_config.json"} & set(files or ()))


def _refused(outcome: dict[str, Any], *words: str) -> str:
    assert not outcome["ok"], outcome
    assert outcome["error"] == "SaveError" and outcome["intelrt"] and outcome["oserror"], outcome
    for word in words:
        assert word in outcome["message"], (word, outcome["message"])
    return str(outcome["message"])


def test_disk_full_during_the_final_save_leaves_nothing_that_looks_complete(report: dict[str, Any]) -> None:
    outcome = report["full_final"]
    _refused(outcome, "saving the trained model", "File too large", "Nothing in", "was replaced")
    assert not _looks_complete(outcome["files"]), outcome["files"]
    assert not any(f.startswith(".intelrt-") for f in outcome["files"]), "staging files left behind"


def test_disk_full_keeps_the_earlier_complete_model_loadable(report: dict[str, Any]) -> None:
    assert report["earlier"]["ok"] and _looks_complete(report["earlier"]["files"])
    outcome = report["full_over_earlier"]
    _refused(outcome, "Nothing in")
    # overwrite=True removed the earlier run's checkpoint-1 before training; its model is untouched
    assert outcome["files"] == [f for f in report["earlier"]["files"] if f != "checkpoint-1"], "the model changed"
    assert report["kept_loads"] is True, report["kept_loads"]


def test_disk_full_while_checkpointing_removes_the_cut_short_checkpoint(report: dict[str, Any]) -> None:
    outcome = report["full_checkpoint"]
    _refused(outcome, "checkpoint-1", "File too large", "resume=True")
    assert "checkpoint-1" not in outcome["files"], outcome["files"]
    assert not _looks_complete(outcome["files"])


def test_disk_full_while_rewriting_an_earlier_checkpoint_removes_it(report: dict[str, Any]) -> None:
    assert "checkpoint-2" in report["resume_past_partial"]["files"]
    outcome = report["full_rewriting_checkpoint"]
    _refused(outcome, "checkpoint-2", "Removed the incomplete checkpoint-2")
    assert outcome["files"] == [f for f in report["resume_past_partial"]["files"] if f != "checkpoint-2"]


def test_resume_skips_a_checkpoint_cut_short_and_uses_the_last_complete_one(report: dict[str, Any]) -> None:
    assert report["checkpointed"]["ok"] and "checkpoint-1" in report["checkpointed"]["files"]
    outcome = report["resume_past_partial"]
    assert outcome["ok"], outcome
    assert outcome["resumed_from"].endswith("checkpoint-1")  # not the partial checkpoint-2


def test_output_dir_under_a_file_is_refused_before_training(report: dict[str, Any]) -> None:
    _refused(report["under_a_file"], "cannot be written", "nothing was trained")


def test_read_only_output_dir_is_refused_before_training(report: dict[str, Any]) -> None:
    if not report["read_only_enforced"]:
        pytest.skip("this system lets the test process write into a read-only directory")
    _refused(report["read_only_new"], "cannot be written", "Permission denied", "nothing was trained")
    message = _refused(report["read_only_itself"], "cannot be written")
    assert report["read_only_itself"]["files"] == [], message


def test_a_read_only_stale_checkpoint_is_named_as_still_there_never_as_removed(report: dict[str, Any]) -> None:
    """The SaveError said "Removed the incomplete checkpoint" while it was still there."""
    if not report["read_only_enforced"]:
        pytest.skip("this system lets the test process write into a read-only directory")
    message = _refused(report["resume_past_read_only_stale"], "checkpoint-2 (PermissionError", "cannot be removed",
                       "nothing was trained")
    assert "Removed" not in message and report["stale_left"] == ["config.json"]
    message = _refused(report["overwrite_read_only_stale"], "cannot all be removed: checkpoint-2 (PermissionError",
                       "(removed checkpoint-1)", "nothing was trained")
    assert "checkpoint-2" in report["overwrite_read_only_stale"]["files"]
