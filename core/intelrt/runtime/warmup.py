"""The warm-up of a plan's shape buckets at load: every prompt bucket runs once, largest first, before
the model serves, so a device that compiles a graph per input shape (Gaudi) compiles them now rather
than mid-run (vLLM-Gaudi's ``warmup_model``: warm-up "so serving never compiles",
``docs/features/bucketing_mechanism.md``).

Decode buckets are warmed by the decode engine, which owns the KV cache the decode step reads: it
captures one step per ``Buckets.decode_shapes()`` entry (docs/backends/gaudi-performance.md names the
hook it needs).
"""

from __future__ import annotations

import logging
import time
from typing import Any

from ..hooks.payloads import Buckets

log = logging.getLogger(__name__)


def warm_prompt_buckets(model: Any, buckets: Buckets) -> list[tuple[int, int]]:
    """Run one prompt pass per prompt bucket (batch × length, largest first) on ``model``'s device, with
    every position attended; returns the shapes run."""
    import torch

    shapes = buckets.prompt_shapes()
    started = time.perf_counter()
    device = getattr(model, "device", None)
    with torch.inference_mode():
        for batch, length in shapes:
            ids = torch.zeros(batch, length, dtype=torch.long, device=device)
            model(input_ids=ids, attention_mask=torch.ones_like(ids), use_cache=False)
    log.info("warmed %d prompt buckets in %.1f s (largest %s)", len(shapes), time.perf_counter() - started,
             "x".join(map(str, shapes[0])) if shapes else "none")
    return shapes
