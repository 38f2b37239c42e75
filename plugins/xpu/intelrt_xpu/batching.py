"""X7: how a list of prompts is generated on Intel GPUs.

transformers' continuous batching (``generate_batch``) runs on XPU with ``XPUGraph`` and async
batching, and decides itself whether to use them unless the user forces them.
"""

from __future__ import annotations

from intelrt.plugin import (
    Backend,
    BatchingChoice,
    Decision,
    Situation,
    fast_decode_planned,
    padded_generate_instead,
)


def select_batching(backend: Backend, s: Situation) -> Decision | None:
    """X7: a list of prompts goes through transformers' continuous batching, which supports XPU
    graphs and async batching and decides itself whether to use them (``None``) unless forced."""
    request, decided = s.request, s.decided
    if request.batching == "padded":
        return None  # padded batches are not XPU-specific: the generic rule applies
    fallback = padded_generate_instead(request, s.model, decided)
    if fallback is not None:
        return fallback
    graphs = {"on": True, "off": False}.get(request.graphs)
    attention = str(decided.attention or "sdpa")
    flash = "flash" in attention
    if graphs is None:
        auto = ("on: flash attention needs no attention mask" if flash else
                f"off: attention={attention} needs an attention mask, which graphs would pad")
        notes: tuple[str, ...] = (f"XPU graphs and async batching left to transformers' auto, which turns them {auto}",)
    else:
        notes = (f"XPU graphs forced {request.graphs} (ContinuousBatchingConfig.use_cuda_graph={graphs}); async "
                 "batching left to transformers' auto",)
    if fast_decode_planned(decided) and request.batching == "auto":
        notes += ("batching='padded' sends a list through the fast decode loop instead",)
    reason = "transformers' continuous batching (generate_batch) runs on Intel GPUs, with XPUGraph and async batching"
    return Decision(BatchingChoice.continuous(use_graphs=graphs), reason, claim="X7", notes=notes)
