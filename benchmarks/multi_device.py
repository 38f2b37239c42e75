"""What the two multi-GPU benchmarks share: a Qwen3 of a given shape with random bf16 weights
(no download), running this script again as launched ranks, and reading the ranks' reports."""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

#: Shapes of public Qwen3 checkpoints (their config.json), built with random weights.
SHAPES: dict[str, dict[str, Any]] = {
    "1.7b": {"vocab_size": 151936, "hidden_size": 2048, "intermediate_size": 6144, "num_hidden_layers": 28,
             "num_attention_heads": 16, "num_key_value_heads": 8, "head_dim": 128, "tie_word_embeddings": True},
    "8b": {"vocab_size": 151936, "hidden_size": 4096, "intermediate_size": 12288, "num_hidden_layers": 36,
           "num_attention_heads": 32, "num_key_value_heads": 8, "head_dim": 128, "tie_word_embeddings": False},
}
INTELRT = shutil.which("intelrt", path=os.path.dirname(sys.executable)) or "intelrt"


def add_common_arguments(parser: argparse.ArgumentParser, strategy: str) -> None:
    """``--tiny`` and ``--workdir``, and the hidden arguments of this script run as a worker (one
    process or one launched rank): ``--worker``, ``--model``, ``--out`` and ``strategy``."""
    parser.add_argument("--tiny", action="store_true", help="the tiny model on CPU ranks (a smoke run)")
    parser.add_argument("--workdir", default=None, help="where the model is built (reused when it is there)")
    for name in ("--model", "--out", strategy):
        parser.add_argument(name, help=argparse.SUPPRESS)
    parser.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)


def build_model(directory: Path, shape: str | None) -> Path:
    """Save a random-weight bf16 Qwen3 of ``shape`` (``None``: intelrt's tiny model) and a small
    tokenizer in ``directory``; reused when it is already there."""
    if (directory / "config.json").is_file():
        return directory
    from intelrt.tiny import build_causal_lm, build_tokenizer

    if shape is None:
        build_causal_lm(directory, hidden_size=64, layers=2)
        return directory
    import torch
    from transformers import Qwen3Config, Qwen3ForCausalLM

    build_tokenizer(directory)
    config = Qwen3Config(**SHAPES[shape], max_position_embeddings=4096, bos_token_id=None, eos_token_id=None,
                         pad_token_id=1, dtype="bfloat16")
    torch.manual_seed(0)
    device = "cuda" if torch.cuda.is_available() else "cpu"
    with torch.device(device):
        model: Any = Qwen3ForCausalLM(config).to(torch.bfloat16)
    model.generation_config.eos_token_id = None
    model.generation_config.pad_token_id = 1
    model.save_pretrained(directory, safe_serialization=True)
    return directory


def run_ranks(script: str, args: list[str], nproc: int) -> subprocess.CompletedProcess[str]:
    """``script args`` in one process (``nproc`` 1, no launcher) or as ``nproc`` launched ranks."""
    argv = [sys.executable, script, *args] if nproc == 1 else [INTELRT, "launch", "--nproc", str(nproc), script, *args]
    print("$", " ".join(argv), flush=True)
    return subprocess.run(argv, capture_output=True, text=True, env={**os.environ, "OMP_NUM_THREADS": "1"})


def fresh(out: Path) -> Path:
    """``out`` emptied of an earlier run's reports and model (the benchmark's own folder)."""
    shutil.rmtree(out, ignore_errors=True)
    out.mkdir(parents=True)
    return out


def reports(out: Path, ranks: int) -> list[dict[str, Any]]:
    """What each rank wrote to ``out/rank<R>.json``."""
    return [json.loads((out / f"rank{r}.json").read_text()) for r in range(ranks)]


def peak_memory_gib() -> float | None:
    """This process's peak accelerator memory (``None`` on the CPU)."""
    import torch

    if not torch.cuda.is_available():
        return None
    return torch.cuda.max_memory_allocated() / 2**30


def write_report(out: Path, data: dict[str, Any]) -> None:
    (out / f"rank{os.environ.get('RANK', '0')}.json").write_text(json.dumps(data))
