"""A tiny DDP training script for `intelrt launch` tests: plain torch, no device code.

Every rank trains the same small MLP on its shard of each global batch; DDP averages the
gradients, so the run equals one process training on the whole batch. Each rank writes its
losses and final weights to OUT/rank<RANK>.json. Without a launcher (no WORLD_SIZE) it is the
single-process reference; ``train()`` is importable for the same purpose.
"""

from __future__ import annotations

import argparse
import gc
import json
import os
from pathlib import Path

import torch
import torch.distributed as dist

FEATURES, HIDDEN, EXAMPLES = 8, 16, 64


def make_data(seed: int = 0) -> tuple[torch.Tensor, torch.Tensor]:
    generator = torch.Generator().manual_seed(seed)
    x = torch.randn(EXAMPLES, FEATURES, generator=generator)
    w = torch.randn(FEATURES, 1, generator=generator)
    return x, torch.tanh(x @ w) + 0.05 * torch.randn(EXAMPLES, 1, generator=generator)


def train(rank: int, world: int, steps: int, batch: int) -> tuple[torch.nn.Module, list[float]]:
    torch.manual_seed(0)
    model: torch.nn.Module = torch.nn.Sequential(torch.nn.Linear(FEATURES, HIDDEN), torch.nn.Tanh(),
                                                 torch.nn.Linear(HIDDEN, 1))
    if world > 1:
        model = torch.nn.parallel.DistributedDataParallel(model)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.2)
    x, y = make_data()
    losses = []
    for step in range(steps):
        rows = torch.arange(step * batch, (step + 1) * batch) % EXAMPLES
        mine = rows[rank::world]  # this rank's shard of the global batch
        loss = torch.nn.functional.mse_loss(model(x[mine]), y[mine])
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        mean = loss.detach().clone()
        if world > 1:
            dist.all_reduce(mean)
            mean /= world
        losses.append(float(mean))
    return model, losses


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--out", required=True)
    parser.add_argument("--steps", type=int, default=20)
    parser.add_argument("--batch", type=int, default=16)
    args = parser.parse_args()
    rank, world = int(os.environ.get("RANK", 0)), int(os.environ.get("WORLD_SIZE", 1))
    if world > 1:
        dist.init_process_group()  # the launcher's environment says where; torch picks gloo on the CPU
    model, losses = train(rank, world, args.steps, args.batch)
    module = getattr(model, "module", model)
    weights = torch.cat([p.detach().flatten() for p in module.parameters()]).tolist()
    record = {"rank": rank, "world": world, "local_rank": os.environ.get("LOCAL_RANK"),
              "backend": dist.get_backend_config() if world > 1 else None, "losses": losses, "weights": weights}
    Path(args.out, f"rank{rank}.json").write_text(json.dumps(record), encoding="utf-8")
    if world > 1:
        # DDP's reducer holds the process group: it goes first, so the group's gloo threads are not
        # still joinable when the interpreter tears the reducer down at exit ("terminate called
        # without an active exception", SIGABRT, seen on a loaded machine)
        del model, module
        gc.collect()
        dist.barrier()  # no rank tears its connections down while another still uses them (gloo aborts then)
        dist.destroy_process_group()


if __name__ == "__main__":
    main()
