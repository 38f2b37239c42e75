"""Full fine-tuning of a tiny causal LM through ``intelrt.load(...).train(...)``, for launch tests.

Under ``intelrt launch`` every rank runs this; without a launcher it is the one-process reference.
Every rank writes what it saw to OUT/rank<RANK>.json (the plan's parallelism, the logged losses);
the trained model goes to OUT/model.
"""

from __future__ import annotations

import argparse
import json
import os
from pathlib import Path

import intelrt
from intelrt.tiny import corpus_text


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("model")
    parser.add_argument("--out", required=True)
    parser.add_argument("--sharding", default="auto")
    parser.add_argument("--batch", type=int, default=4)
    parser.add_argument("--steps", type=int, default=6)
    parser.add_argument("--save-steps", type=int, default=0)
    parser.add_argument("--resume", nargs="?", const=True, default=False,
                        help="continue from the last checkpoint in OUT/model, or from the one named")
    args = parser.parse_args()
    out = Path(args.out)
    loaded = intelrt.load(args.model, backend="cpu", dtype="float32", sharding=args.sharding)
    extra = {"save_steps": args.save_steps, "save_strategy": "steps"} if args.save_steps else {"save_strategy": "no"}
    result = loaded.train(corpus_text().splitlines() * 4, output_dir=out / "model", sharding=args.sharding,
                          resume=args.resume, max_steps=args.steps, per_device_train_batch_size=args.batch,
                          learning_rate=1e-3, block_size=32, seed=0, data_seed=0, **extra)
    from torch.distributed.tensor import DTensor

    rank = os.environ.get("RANK", "0")
    parallelism = loaded.plan.decided.parallelism
    (out / f"rank{rank}.json").write_text(json.dumps({
        "rank": int(rank), "world": result.world_size, "sharding": result.sharding,
        "parallelism": parallelism.to_dict() if parallelism is not None else None,
        "losses": [loss for _, loss in result.losses], "steps": result.steps,
        "resumed_from": result.resumed_from,
        "sharded_parameters": sum(isinstance(p, DTensor) for p in loaded.model.parameters())}))


if __name__ == "__main__":
    main()
