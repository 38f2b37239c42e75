"""Which path one ``generate`` call takes, and why: the plan's decisions meet the call's settings."""

from __future__ import annotations

from dataclasses import dataclass

from ..hooks.payloads import BatchingChoice, Buckets, DecodeChoice


@dataclass(frozen=True)
class Route:
    """The path for one call: ``fast`` (intelrt's loop), ``continuous`` (``generate_batch``) or
    ``generate`` (``model.generate``), with the reason and the rows per padded batch."""

    path: str
    reason: str
    batch_rows: int


@dataclass(frozen=True)
class GenerationPlan:
    """The plan's ``decode`` and ``batching`` decisions with their reasons: what the decoder follows."""

    decode: DecodeChoice
    decode_reason: str
    batching: BatchingChoice | None = None
    batching_reason: str = "the plan has no batching decision"
    buckets: Buckets | None = None
    """The plan's shape buckets (Gaudi): the engine pads its steps to them and warms each at load."""
    trains_sharded: bool = False
    """The weights are FSDP2 shards that training will update: generate runs under ``no_grad``, not
    ``inference_mode``, whose tensors FSDP's reused all-gather buffers could not be updated from."""


def choose_route(plan: GenerationPlan, count: int, as_list: bool, unsupported: str | None) -> Route:
    """Route ``count`` prompts (``as_list``: the caller passed a list) given the plan and, when the
    fast loop cannot honour the call's settings, ``unsupported`` saying why."""
    fast = plan.decode.fast
    if not as_list:
        if fast and unsupported is None:
            return Route("fast", plan.decode_reason, 1)
        return Route("generate", unsupported or plan.decode_reason, 1)
    batching = plan.batching
    rows = int(batching.max_batch or count) if batching is not None else count
    reason = plan.batching_reason
    if batching is not None and batching.method == "continuous":
        if unsupported is None:
            return Route("continuous", reason, count)
        return Route("generate", f"continuous batching would drop settings it cannot apply: {unsupported}",
                     rows if batching.max_batch else count)
    if batching is not None and batching.engine == "fast" and fast and unsupported is None:
        return Route("fast", reason, rows)
    return Route("generate", unsupported or (reason if not fast else plan.decode_reason), rows)
