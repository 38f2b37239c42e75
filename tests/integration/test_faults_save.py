"""Fault catalogue: the final save of a training run killed or starved — SIGKILL at each moment of
the save (writing the staged files, after the journal, with the previous model's markers moved
aside, some of the new files in, all but the last, all in), a full disk (``RLIMIT_FSIZE``) over a
previous model and at a checkpoint. The previous model survives every failure; a directory left
half-swapped never looks complete (``plan`` says a save was killed and how it is put back); the
next ``load`` (or ``intelrt run``) puts the previous model back, or finishes a save whose new files
had all landed — one complete model, never a mix (``intelrt.training.saving``).

The kills are real: one child process trains the previous model once, then forks a child per kill
point that trains on and SIGKILLs itself from an audit hook (``sys.addaudithook``: the
``os.rename``, ``open`` and ``shutil.rmtree`` events of the save) — nothing of intelrt is patched.
The disk-full cases set ``RLIMIT_FSIZE`` around one in-process call.
"""

from __future__ import annotations

import hashlib
import json
import os
import resource
import shutil
import subprocess
import sys
import textwrap
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from faults import Catalogue, Fault, call, check, cli, error, works

import intelrt

catalogue = Catalogue(__file__)
TEXTS = ["Intel GPUs run PyTorch through the XPU backend.", "Gaudi runs PyTorch eager by default."] * 8
FAST = {"block_size": 16, "disable_tqdm": True, "per_device_train_batch_size": 4, "max_steps": 1}
POINTS = ("writing", "journal", "markers-aside", "some-new", "last-new", "all-new")
"""Where the save is killed: the first staged file opened; the first rename (the journal written);
the second (the markers moved aside); two new files moved in, the third about to; every new file in
but the last (the markers last); every new file in, the previous files not yet removed."""

CHILD = textwrap.dedent('''
    import json, os, shutil, signal, sys
    import torch
    torch.set_num_threads(1)
    import intelrt

    model, work = sys.argv[1], sys.argv[2]
    texts, fast = json.loads(sys.argv[3]), json.loads(sys.argv[4])
    loaded = intelrt.load(model)
    previous = os.path.join(work, "previous")
    loaded.train(texts, output_dir=previous, save_strategy="no", **fast)  # the model a save must not lose
    killed = {}
    for point in json.loads(sys.argv[5]):
        out = os.path.join(work, point)
        shutil.copytree(previous, out)
        pid = os.fork()
        if pid == 0:
            moved = {"aside": 0, "in": 0}

            def kill_at(event, args):  # before the event's operation runs
                hit = False
                if event == "os.rename" and ".intelrt-previous-" in str(args[1]):  # a previous file aside
                    moved["aside"] += 1
                    hit = (point, moved["aside"]) in (("journal", 1), ("markers-aside", 2))
                elif event == "os.rename" and ".intelrt-saving-" in str(args[0]):  # a new file in
                    moved["in"] += 1
                    hit = (point == "some-new" and moved["in"] == 3) or \
                        (point == "last-new" and os.path.basename(str(args[1])) == "config.json")
                elif event == "open" and point == "writing":
                    hit = ".intelrt-saving-" in str(args[0]) and isinstance(args[1], str) and "w" in args[1]
                elif event == "shutil.rmtree" and point == "all-new":
                    hit = ".intelrt-previous-" in str(args[0])
                if hit:
                    os.kill(os.getpid(), signal.SIGKILL)

            sys.addaudithook(kill_at)
            loaded.train(texts, output_dir=out, overwrite=True, save_strategy="no", learning_rate=0.05, **fast)
            os._exit(0)  # not killed: the parent reports it
        _, status = os.waitpid(pid, 0)
        killed[point] = os.WIFSIGNALED(status) and os.WTERMSIG(status) == signal.SIGKILL
    print("KILLED " + json.dumps(killed))
''')


def digest(directory: Path) -> dict[str, str]:
    """The model files of ``directory`` (not intelrt's own dot files) with the SHA-256 of each."""
    return {p.name: hashlib.sha256(p.read_bytes()).hexdigest() for p in sorted(directory.iterdir())
            if p.is_file() and not p.name.startswith(".")}


@pytest.fixture(scope="module")
def killed(tiny_model: Path, tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict[str, bool]]:
    work = tmp_path_factory.mktemp("killed-saves")
    done = subprocess.run([sys.executable, "-c", CHILD, str(tiny_model), str(work), json.dumps(TEXTS),
                           json.dumps(FAST), json.dumps(POINTS)], capture_output=True, text=True, timeout=240,
                          env={**os.environ, "OMP_NUM_THREADS": "1"})
    lines = [line for line in done.stdout.splitlines() if line.startswith("KILLED ")]
    assert done.returncode == 0 and lines, done.stderr[-3000:]
    return work, json.loads(lines[0].removeprefix("KILLED "))


@pytest.fixture
def point(request: pytest.FixtureRequest, killed: tuple[Path, dict[str, bool]], tmp_path: Path) -> Iterator[Path]:
    """A copy of the directory left by the save killed at the case's point (dot files included)."""
    work, done = killed
    name = request.node.callspec.params["case"].data
    assert done[name], f"the save was not killed at {name!r}"
    yield Path(shutil.copytree(work / name, tmp_path / name))


def previous(killed: tuple[Path, dict[str, bool]]) -> dict[str, str]:
    return digest(killed[0] / "previous")


KEPT = [works(f"save-killed-{p}-previous-kept", "save", f"SIGKILL during the final save over a previous model: "
              f"{what}", risk="data loss", trigger=f"SIGKILL {when}, then intelrt.load(DIR)", data=p)
        for p, what, when in [
            ("writing", "while the new model is written", "at the first staged file"),
            ("journal", "as the swap begins", "at the first rename, the journal written"),
            ("markers-aside", "with the previous model's config.json moved aside", "at the second rename"),
            ("some-new", "with two of the new files moved in", "at the third new file's rename"),
            ("last-new", "with every new file in but the last (config.json)", "before the last rename")]]


@catalogue.cases(KEPT)
def test_a_save_killed_before_its_last_file_leaves_the_previous_model(case: Fault, point: Path,
                                                                     killed: tuple[Path, dict[str, bool]]) -> None:
    seen = check(case, call(lambda: intelrt.load(point)))
    assert digest(point) == previous(killed), "not the previous model, byte for byte"
    assert not [p.name for p in point.iterdir() if p.name.startswith((".intelrt-previous-", ".intelrt-saving-"))
                and case.data != "writing"]
    assert seen.value.generate("Intel", max_new_tokens=2)


@catalogue.cases(works("save-killed-all-new-finished", "save", "SIGKILL after every new file landed, before the "
                       "previous files were removed", "finished", risk="silent wrong",
                       trigger="SIGKILL at shutil.rmtree of .intelrt-previous-*, then intelrt.load(DIR)",
                       data="all-new"))
def test_a_save_killed_after_its_last_file_is_finished_as_the_new_model(case: Fault, point: Path,
                                                                       killed: tuple[Path, dict[str, bool]]) -> None:
    seen = check(case, call(lambda: intelrt.load(point)))
    now = digest(point)  # the run was killed before it wrote its intelrt_train.json
    assert now.keys() == previous(killed).keys() - {"intelrt_train.json"} and now["model.safetensors"] != previous(killed)["model.safetensors"]
    assert not [p.name for p in point.iterdir() if p.name.startswith(".intelrt-previous-")]
    assert seen.value.generate("Intel", max_new_tokens=2)


HALF = [error(f"save-killed-{p}-plan-says-so", "save", f"plan() on a directory whose save was killed {what} (no "
              "config.json: it looked like no model at all)", "was killed while it replaced the model",
              "puts it back", risk="wrong culprit", error="ModelSourceError",
              trigger=f"SIGKILL {what}, then intelrt.plan(DIR)", data=p)
        for p, what in [("markers-aside", "with the markers aside"), ("some-new", "with two of the new files moved in"),
                        ("last-new", "before its last rename")]]


@catalogue.cases(HALF)
def test_a_half_swapped_directory_never_looks_complete_and_plan_names_the_kill(case: Fault, point: Path) -> None:
    assert not (point / "config.json").exists(), "a half-swapped directory looks complete"
    check(case, call(lambda: intelrt.plan(point)))


@catalogue.cases(works("save-killed-run-recovers", "save", "intelrt run on a directory whose save was killed mid-"
                       "swap", "the previous model is back in place", risk="data loss",
                       trigger="SIGKILL with two of the new files in, then intelrt run DIR", data="some-new"))
def test_intelrt_run_puts_the_previous_model_back_and_generates(case: Fault, point: Path,
                                                               killed: tuple[Path, dict[str, bool]]) -> None:
    check(case, cli("run", str(point), "--prompt", "Intel", "--max-new-tokens", "2"))
    assert digest(point) == previous(killed)


FULL = [
    error("save-disk-full-over-previous", "save", "a full disk during the final save over a previous model",
          "saving the trained model", "failed", "Nothing in", "was replaced", risk="data loss", error="SaveError",
          trigger="RLIMIT_FSIZE 64 KiB; train(output_dir=DIR-with-a-model, overwrite=True)", data="over"),
    error("save-disk-full-fresh", "save", "a full disk during the final save into a new directory",
          "saving the trained model", "partial files were removed", risk="silent wrong", error="SaveError",
          trigger="RLIMIT_FSIZE 64 KiB; train(output_dir=new)", data="fresh"),
    error("save-disk-full-checkpoint", "save", "a full disk while writing checkpoint-1", "checkpoint-1",
          risk="silent wrong", error="SaveError", trigger="RLIMIT_FSIZE 64 KiB; train(save_steps=1)", data="checkpoint"),
]


@catalogue.cases(FULL)
def test_a_full_disk_during_a_save_loses_nothing_and_leaves_nothing_that_looks_complete(
        case: Fault, tiny_model: Path, tmp_path: Path, disk_limit: Any, one_torch_thread: None) -> None:
    loaded = intelrt.load(tiny_model)
    out = tmp_path / "out"
    if case.data == "over":
        loaded.train(TEXTS, output_dir=out, save_strategy="no", **FAST)
    before = digest(out) if out.exists() else {}
    extra = {"save_steps": 1, "max_steps": 2} if case.data == "checkpoint" else {"save_strategy": "no"}
    disk_limit(64 * 1024)  # the tiny model's weights are ~400 KiB
    check(case, call(lambda: loaded.train(TEXTS, output_dir=out, overwrite=case.data == "over",
                                          **{**FAST, **extra})))
    disk_limit(resource.RLIM_INFINITY)
    assert digest(out) == before if out.exists() else not before
    if case.data != "over":
        assert not (out / "config.json").exists() and not (out / "checkpoint-1").exists()
    else:
        assert intelrt.load(out).generate("Intel", max_new_tokens=2)
    assert not [p.name for p in out.iterdir() if p.name.startswith(".intelrt-saving-")] if out.exists() else True
