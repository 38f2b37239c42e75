"""Fault catalogue: ``intelrt bench`` pointed at the wrong place or asked for what its model cannot
hold — ``--workdir`` on a real model directory (it replaced every file there with a random tiny
model and exited 0), on a file, on a directory of someone's notes; ``--prompt-tokens`` past the
model's positions (it ran for minutes and reported "0 tok/s"); counts of zero, a sweep without
``--shape``, options ``--only-verify`` ignores, an output file in a directory that does not exist.

Each refusal comes before anything is built, and a refused ``--workdir`` is left byte for byte as
it was. The bench runs that must work are real ``--tiny --only-verify`` runs (seconds each).
"""

from __future__ import annotations

import hashlib
import shutil
from pathlib import Path

from faults import Catalogue, Fault, check, cli, error, works

catalogue = Catalogue(__file__)
QUICK = ("--tiny", "--only-verify", "--requests", "1", "--new-tokens", "2", "--prompt-tokens", "4")
"""A bench run of seconds: the float32 comparison of one 4-token prompt."""


def snapshot(path: Path) -> dict[str, str]:
    """Every file under ``path`` (or ``path`` itself) with the SHA-256 of its bytes."""
    files = [path] if path.is_file() else sorted(p for p in path.rglob("*") if p.is_file())
    return {str(p.relative_to(path.parent)): hashlib.sha256(p.read_bytes()).hexdigest() for p in files}


def _w(id: str, fault: str, *says: str) -> Fault:
    return error(f"bench-workdir-{id}", "bench", fault, *says, risk="data loss",
                 trigger=f"intelrt bench --tiny --workdir DIR ({fault})", data=id)


WORKDIRS = [
    _w("real-model", "DIR is a real model's directory (it replaced every file and exited 0)",
       "holds files bench did not write", "model.safetensors", "Pass a new or empty directory"),
    _w("file", "DIR is a file", "is a file", "pass a directory"),
    _w("other-files", "DIR holds someone's notes", "holds files bench did not write (notes.txt)"),
    _w("marker-removed", "DIR is an earlier bench's, its .intelrt-bench marker removed: no longer provably bench's",
       "holds files bench did not write", "config.json"),
]


@catalogue.cases(WORKDIRS)
def test_a_workdir_bench_did_not_make_is_refused_and_left_as_it_was(case: Fault, tiny_model: Path,
                                                                    tmp_path: Path) -> None:
    target = tmp_path / "dir"
    if case.data == "real-model":
        shutil.copytree(tiny_model, target)
    elif case.data == "file":
        target.write_text("not a directory\n")
    elif case.data == "other-files":
        target.mkdir()
        (target / "notes.txt").write_text("my notes\n")
    else:  # a model as bench leaves it, without the marker that says so
        shutil.copytree(tiny_model, target)
    before = snapshot(target)
    check(case, cli("bench", *QUICK, "--workdir", str(target)))
    assert snapshot(target) == before, f"{case.id}: --workdir was changed"


def _a(id: str, fault: str, argv: tuple[str, ...], *says: str, risk: str = "traceback") -> Fault:
    return error(f"bench-{id}", "bench", fault, *says, risk=risk, trigger="intelrt bench " + " ".join(argv),
                 data=argv)


ARGS = [
    _a("prompt-tokens-1e5", "--prompt-tokens 100000 on a 512-position model (it reported 0 tok/s)",
       ("--tiny", "--prompt-tokens", "100000"), "needs 100032 positions", "at most 512", "--prompt-tokens 480 or less",
       risk="silent wrong"),
    _a("new-tokens-1e5", "--new-tokens 100000 on a 512-position model", ("--tiny", "--new-tokens", "100000"),
       "needs 100032 positions", "--new-tokens 480 or less", risk="hang"),
    _a("one-position-past", "--prompt-tokens 500 --new-tokens 13: one position past the model's 512",
       ("--tiny", "--prompt-tokens", "500", "--new-tokens", "13"), "needs 513 positions", "--prompt-tokens 499 or less",
       risk="silent wrong"),
    _a("both-past", "--prompt-tokens and --new-tokens each past the positions",
       ("--tiny", "--prompt-tokens", "600", "--new-tokens", "600"), "needs 1200 positions", "lower both",
       risk="silent wrong"),
    _a("prompt-tokens-zero", "--prompt-tokens 0", ("--tiny", "--prompt-tokens", "0"), "--prompt-tokens", ">= 1"),
    _a("requests-zero", "--requests 0", ("--tiny", "--requests", "0"), "--requests", ">= 1"),
    _a("new-tokens-word", "--new-tokens many", ("--tiny", "--new-tokens", "many"), "--new-tokens"),
    _a("sweep-without-shape", "a sweep of prompt lengths without --shape", ("--tiny", "--prompt-tokens", "32,64"),
       "a sweep of prompt lengths is a --shape option", risk="silent wrong"),
    _a("only-verify-ignores", "--only-verify with options it would ignore", ("--tiny", "--only-verify", "--variants"),
       "--variants", "would do nothing", risk="silent wrong"),
    _a("output-dir-missing", "--output in a directory that does not exist (it failed after the whole run)",
       ("--tiny", "--output", "no-such-dir/results.json"), "--output", "does not exist", risk="data loss"),
]


@catalogue.cases(ARGS)
def test_bench_options_it_cannot_honour_are_refused_before_any_work(case: Fault, tmp_path: Path) -> None:
    work = tmp_path / "work"  # never made: each refusal comes first
    check(case, cli("bench", *case.data, "--workdir", str(work)))
    assert not work.exists()


RUNS = [
    works("bench-workdir-new", "bench", "--workdir DIR that does not exist yet", "identical",
          trigger="intelrt bench --tiny --only-verify --workdir new-dir", data="new"),
    works("bench-workdir-again", "bench", "--workdir DIR an earlier bench made (its marker there)", "identical",
          trigger="intelrt bench … --workdir DIR twice", data="again"),
    works("bench-last-position", "bench", "--prompt-tokens 510 --new-tokens 2: every one of the 512 positions",
          "identical", trigger="intelrt bench --tiny --only-verify --prompt-tokens 510 --new-tokens 2", data="last"),
]


@catalogue.cases(RUNS)
def test_bench_runs_into_its_own_workdir_and_at_the_last_position(case: Fault, tmp_path: Path,
                                                                  one_torch_thread: None) -> None:
    work = tmp_path / "bench-model"
    argv = QUICK
    if case.data == "again":
        assert cli("bench", *QUICK, "--workdir", str(work)).code == 0
    elif case.data == "last":
        argv = (*QUICK[:-4], "--new-tokens", "2", "--prompt-tokens", "510")
    check(case, cli("bench", *argv, "--workdir", str(work)))
    assert (work / ".intelrt-bench").is_file() and (work / "model.safetensors").is_file()
