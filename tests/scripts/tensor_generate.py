"""Greedy generation through ``intelrt.load(..., parallel=...)``, for launch tests and benchmarks.

Under ``intelrt launch`` every rank runs this with ``--parallel tensor`` (transformers' tensor
parallel plan); without a launcher, ``--parallel none`` is the one-process reference. Every rank
writes OUT/rank<RANK>.json: the plan's parallelism, the generated text, and whether its weights
were split (a DTensor or a tensor smaller than the checkpoint's).
"""

from __future__ import annotations

import argparse
import json
import os
from pathlib import Path

import intelrt

PROMPTS = ["Intel GPUs are", "The quick brown fox"]


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("model")
    parser.add_argument("--out", required=True)
    parser.add_argument("--parallel", default="auto")
    parser.add_argument("--max-new-tokens", type=int, default=12)
    args = parser.parse_args()
    loaded = intelrt.load(args.model, backend="cpu", dtype="float32", parallel=args.parallel)
    texts = loaded.generate(PROMPTS, max_new_tokens=args.max_new_tokens)
    proj = loaded.model.model.layers[0].self_attn.q_proj.weight
    local = proj.to_local() if hasattr(proj, "to_local") else proj
    rank = os.environ.get("RANK", "0")
    parallelism = loaded.plan.decided.parallelism
    Path(args.out, f"rank{rank}.json").write_text(json.dumps({
        "rank": int(rank), "texts": texts, "q_proj_rows": int(local.shape[0]),
        "q_proj_rows_full": int(loaded.model.config.num_attention_heads * loaded.model.config.head_dim),
        "parallelism": parallelism.to_dict() if parallelism is not None else None,
        "path": loaded.last_generation.path if loaded.last_generation else None}))


if __name__ == "__main__":
    main()
