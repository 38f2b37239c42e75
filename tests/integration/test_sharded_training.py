"""Bigger than one device, for real on the CPU over gloo (issue 20): `intelrt launch` subprocesses
run intelrt.load(..., sharding=/parallel=) and Loaded.train, and are compared with one process.

* two ranks of FSDP2 (weights sharded as they load: DTensors) train with the same loss curve as
  one process on the whole batch, and save a normal safetensors model plain from_pretrained loads;
* two DDP ranks resume from a checkpoint and continue exactly as the uninterrupted run;
* two "nodes" (two `intelrt launch --nnodes 2` commands on 127.0.0.1) train to the same weights
  as one node;
* two ranks of tensor parallel generate the same greedy text as one process.
"""

from __future__ import annotations

import json
import os
import shutil
import socket
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from launched_jobs import error_lines, run_job
from varied_weights import varied_copy

SCRIPTS = Path(__file__).parents[1] / "scripts"
TRAIN, GENERATE = SCRIPTS / "sharded_train.py", SCRIPTS / "tensor_generate.py"
INTELRT = shutil.which("intelrt", path=os.path.dirname(sys.executable)) or "intelrt"
ENV = {**os.environ, "OMP_NUM_THREADS": "1", "HF_HUB_OFFLINE": "1"}
STEPS, BATCH = 6, 4  # each of 2 ranks takes BATCH blocks a step; the reference takes 2 * BATCH
TIMEOUT = 300

pytestmark = pytest.mark.slow


def _run(argv: list[str]) -> None:
    result = run_job(argv, timeout=TIMEOUT, env=ENV)
    assert result.returncode == 0, error_lines(result.stderr)


def _launch(script: Path, *args: str, nproc: int = 2) -> None:
    _run([INTELRT, "launch", "--nproc", str(nproc), str(script), *args])


def _ranks(out: Path, world: int = 2) -> list[dict[str, Any]]:
    return [json.loads((out / f"rank{r}.json").read_text()) for r in range(world)]


def _weights(directory: Path) -> dict[str, Any]:
    """The model in ``directory`` as plain transformers loads it."""
    from transformers import AutoModelForCausalLM

    return AutoModelForCausalLM.from_pretrained(directory).state_dict()


def _assert_same_weights(a: dict[str, Any], b: dict[str, Any]) -> None:
    import torch

    assert sorted(a) == sorted(b)
    for name in a:
        torch.testing.assert_close(a[name], b[name], rtol=1e-4, atol=1e-5, msg=name)


@pytest.fixture(scope="module")
def reference(tiny_model: Path, tmp_path_factory: pytest.TempPathFactory) -> tuple[list[float], Path]:
    """One process, no launcher, the whole global batch each step: the losses and the saved model."""
    out = tmp_path_factory.mktemp("one-process")
    _run([sys.executable, str(TRAIN), str(tiny_model), "--out", str(out), "--sharding", "none",
          "--batch", str(2 * BATCH), "--steps", str(STEPS)])
    (one,) = _ranks(out, 1)
    assert (one["world"], one["sharding"], one["sharded_parameters"]) == (1, "none", 0)
    assert one["losses"][-1] < one["losses"][0], "the reference run must learn"
    return one["losses"], out / "model"


def test_two_fsdp_ranks_train_like_one_process_and_save_a_plain_model(
        tiny_model: Path, tmp_path: Path, reference: tuple[list[float], Path]) -> None:
    _launch(TRAIN, str(tiny_model), "--out", str(tmp_path), "--sharding", "fsdp", "--batch", str(BATCH),
            "--steps", str(STEPS))
    ranks = _ranks(tmp_path)
    for rank in ranks:
        assert (rank["world"], rank["sharding"], rank["steps"]) == (2, "fsdp", STEPS)
        assert rank["parallelism"]["distributed_config"] == {"fsdp_size": 2}
        assert rank["sharded_parameters"] > 0, "FSDP2 holds each parameter as a sharded DTensor"
        assert rank["losses"] == pytest.approx(reference[0], rel=1e-4)
    model = tmp_path / "model"
    assert (model / "model.safetensors").is_file() and (model / "config.json").is_file()
    assert not [p for p in model.iterdir() if p.name.startswith(".intelrt-staging")]
    _assert_same_weights(_weights(model), _weights(reference[1]))


def test_two_ddp_ranks_resume_from_a_checkpoint_like_the_uninterrupted_run(tiny_model: Path, tmp_path: Path) -> None:
    whole, resumed = tmp_path / "whole", tmp_path / "resumed"
    common = [str(tiny_model), "--sharding", "ddp", "--batch", str(BATCH), "--steps", str(STEPS), "--save-steps", "3"]
    _launch(TRAIN, *common, "--out", str(whole))
    shutil.copytree(whole / "model" / "checkpoint-3", resumed / "model" / "checkpoint-3")
    _launch(TRAIN, *common, "--out", str(resumed), "--resume")
    before, after = _ranks(whole), _ranks(resumed)
    assert after[0]["resumed_from"].endswith("checkpoint-3") and after[0]["sharding"] == "ddp"
    # the history carries the checkpoint's first 3 steps; the next 3 continue as the whole run did
    assert after[0]["losses"] == pytest.approx(before[0]["losses"], rel=1e-4)
    _assert_same_weights(_weights(resumed / "model"), _weights(whole / "model"))


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def test_two_nodes_train_to_the_same_weights_as_one(tiny_model: Path, tmp_path: Path,
                                                     reference: tuple[list[float], Path]) -> None:
    endpoint = f"127.0.0.1:{_free_port()}"
    nodes = [subprocess.Popen([INTELRT, "launch", "--nnodes", "2", "--node-rank", str(n), "--nproc", "1",
                               "--rdzv-endpoint", endpoint, str(TRAIN), str(tiny_model), "--out", str(tmp_path),
                               "--sharding", "fsdp", "--batch", str(BATCH), "--steps", str(STEPS)],
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=ENV)
             for n in (0, 1)]
    try:
        outputs = [node.communicate(timeout=TIMEOUT) for node in nodes]
    finally:
        for node in nodes:
            node.kill()
    assert [node.returncode for node in nodes] == [0, 0], [err[-3000:] for _, err in outputs]
    ranks = _ranks(tmp_path)
    assert all(r["world"] == 2 and r["sharding"] == "fsdp" for r in ranks)
    assert ranks[0]["losses"] == pytest.approx(reference[0], rel=1e-4)
    _assert_same_weights(_weights(tmp_path / "model"), _weights(reference[1]))


def test_two_tensor_parallel_ranks_generate_what_one_process_does(tiny_model: Path, tmp_path: Path) -> None:
    model = varied_copy(tiny_model, tmp_path / "varied", seed=3)  # greedy text that changes token to token
    one, two = tmp_path / "one", tmp_path / "two"
    one.mkdir()
    two.mkdir()
    _run([sys.executable, str(GENERATE), str(model), "--out", str(one), "--parallel", "none"])
    _launch(GENERATE, str(model), "--out", str(two), "--parallel", "tensor")
    (reference,), ranks = _ranks(one, 1), _ranks(two)
    assert len(set(reference["texts"][0])) > 3, reference["texts"]
    for rank in ranks:
        assert rank["parallelism"]["inference"] == "tensor"
        assert rank["q_proj_rows"] == rank["q_proj_rows_full"] // 2, "each rank holds half of every projection"
        assert rank["path"] == "generate"
        assert rank["texts"] == reference["texts"]


def test_every_rank_refuses_an_output_dir_holding_a_model(tiny_model: Path, tmp_path: Path) -> None:
    """Issue 16's refusal holds for every rank of a sharded run: none trains, nothing is replaced."""
    shutil.copytree(tiny_model, tmp_path / "model")
    before = {p.name: p.stat().st_mtime_ns for p in (tmp_path / "model").iterdir()}
    result = subprocess.run([INTELRT, "launch", "--nproc", "2", str(TRAIN), str(tiny_model), "--out", str(tmp_path),
                             "--sharding", "fsdp", "--steps", "1"], capture_output=True, text=True, timeout=TIMEOUT,
                            env=ENV)
    assert result.returncode != 0
    assert "holds a whole model" in result.stderr or "already holds" in result.stderr, result.stderr[-3000:]
    assert {p.name: p.stat().st_mtime_ns for p in (tmp_path / "model").iterdir()} == before
    assert not list(tmp_path.glob("rank*.json"))


def test_intelrt_train_sharding_fsdp_under_launch(tiny_model: Path, tmp_path: Path) -> None:
    """`intelrt train --sharding fsdp` in two ranks, generating before training too (FSDP2's
    buffers must stay trainable) and after reloading; rank 0 alone reports."""
    data = tmp_path / "data.txt"
    from intelrt.tiny import corpus_text

    data.write_text(corpus_text())
    result = subprocess.run([INTELRT, "launch", "--nproc", "2", "-m", "intelrt.cli", "train", str(tiny_model),
                             "--data", str(data), "--output", str(tmp_path / "out"), "--sharding", "fsdp",
                             "--backend", "cpu", "--dtype", "float32", "--max-steps", "2", "--prompt", "Intel",
                             "--json"], capture_output=True, text=True, timeout=TIMEOUT, env=ENV)
    assert result.returncode == 0, result.stderr[-4000:]
    # rank 0's JSON report, then launch's own summary of the ranks
    report, _ = json.JSONDecoder().raw_decode(result.stdout[result.stdout.index("{"):])
    assert (report["train"]["sharding"], report["train"]["world_size"]) == ("fsdp", 2)
    assert report["plan"]["decisions"]["parallelism"]["value"]["distributed_config"] == {"fsdp_size": 2}
    assert report["generation"]["reloaded_matches"] is True
