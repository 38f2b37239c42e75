"""How much a server takes at once, from the plan and the device: rows decoding together, the
longest prompt plus completion, the KV cache's blocks within the memory budget, waiting requests.
Shown when the server starts.

The engine's size comes from the decode engine's one sizing function
(``intelrt.decoding.memory.size_engine``) over the memory budget the engine measures on the device
(``FastDecoder.serving_size``: free memory after the weights, less a profiled prefill and decode
step, times ``DecodeTuning.memory_utilization``)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from ..backends.sizing import (  # the engine's context, which planning reads too
    context_limit,
    model_positions,
)
from ..errors import ConfigurationError

DRAIN_TIMEOUT_S = 30.0
"""After SIGTERM, seconds the requests in flight get to finish (``intelrt serve --drain-timeout``)."""
CLIENT_TIMEOUT_S = 60.0
"""Seconds a streaming client may take no bytes before its completions are cancelled and its
connection closed (``intelrt serve --client-timeout``): nginx's ``send_timeout`` default, the
same measure (between two writes, not the whole answer). uvicorn has no such limit: its
``send`` waits for a full socket buffer as long as the client lets it."""

if TYPE_CHECKING:
    from ..decoding.memory import EngineSize, MemoryBudget
    from ..decoding.tuning import DecodeTuning
    from ..hooks.plan import Plan
    from ..runtime.loaded import Loaded

FALLBACK_ROWS = 64
"""Rows when the plan's batching decision names no batch size (transformers' continuous batching)."""
QUEUE_PER_ROW = 4
"""Waiting completions allowed per row unless ``max_queue`` says otherwise."""


@dataclass(frozen=True)
class ServingLimits:
    """The server's limits, each with the reason for its value."""

    rows: int
    """Completions decoding at once (each ``n`` of a request is one); also the largest ``n``."""
    context: int
    """Tokens per request: its prompt tokens plus ``max_tokens`` must fit."""
    max_queue: int
    """Completions waiting to be let in before new requests get ``429``."""
    kv_bytes: int
    """Bytes of the KV cache (0 when the engine does not run: one completion at a time)."""
    reasons: tuple[str, ...] = ()
    engine: EngineSize | None = None
    """The decode engine's size (``None``: the plan decodes with transformers' generate, or the
    model's step cannot run over the paged cache)."""
    budget: MemoryBudget | None = None
    engine_blocker: str | None = None
    """Why the decode engine cannot run this model's step in flight (then ``engine`` is ``None``)."""

    def lines(self) -> list[str]:
        lines = [f"rows in flight: {self.rows}", f"context per row: {self.context} tokens (prompt + max_tokens)"]
        engine = self.engine
        if engine is not None:
            from ..decoding.memory import size_text

            lines += [f"KV cache: {engine.blocks - 1:,} blocks of {engine.block_size} tokens ({engine.tokens:,} tokens, "
                      f"{size_text(engine.kv_bytes)})",
                      f"tokens per step: {engine.max_batch_tokens} (prompts longer than that are prefilled in chunks)"]
        if self.budget is not None:
            lines.append(f"memory budget: {self.budget.how}")
            if self.budget.ceiling is not None:
                from ..decoding.memory import size_text

                lines.append(f"device memory ceiling: {size_text(self.budget.ceiling)} (what was in use before the KV "
                             "cache plus the utilization's share of what was free)")
        lines.append(f"queue limit: {self.max_queue} waiting completions")
        return lines + list(self.reasons)


def _count(name: str, value: Any) -> int | None:
    if value is None:
        return None
    if not isinstance(value, int) or isinstance(value, bool) or value < 1:
        raise ConfigurationError(f"{name}={value!r}: {name} must be a whole number >= 1")
    return value


def limits_for(loaded: Loaded, *, max_batch: int | None = None, context_length: int | None = None,
               max_queue: int | None = None) -> ServingLimits:
    """The limits for serving ``loaded`` on its device: the plan's (see :func:`serving_limits`),
    the engine sized within the memory budget it measures on the device."""
    from ..decoding.runner import InflightUnavailable

    base = serving_limits(loaded.plan, loaded.model.config, loaded.model.dtype.itemsize, None, loaded.decode_tuning,
                          max_batch=max_batch, context_length=context_length, max_queue=max_queue)
    decoder = loaded.fast_decoder()
    if decoder is None:
        return base
    try:
        engine, budget = decoder.serving_size(base.rows, base.context, loaded.model.device,
                                              rows_asked=max_batch is not None)
    except InflightUnavailable as why:  # the decode thread says why, and serves one completion at a time
        return ServingLimits(base.rows, base.context, base.max_queue, 0, base.reasons, engine_blocker=str(why))
    reasons = [r for r in base.reasons if not r.startswith("KV cache not checked")] + list(engine.reasons[1:])
    queue = max_queue if max_queue is not None else engine.rows * QUEUE_PER_ROW
    return ServingLimits(engine.rows, base.context, queue, engine.kv_bytes, tuple(reasons), engine, budget)


def serving_limits(plan: Plan, config: Any, dtype_bytes: int, budget: MemoryBudget | None, tuning: DecodeTuning, *,
                   max_batch: int | None = None, context_length: int | None = None,
                   max_queue: int | None = None) -> ServingLimits:
    """The plan's batch size (``max_batch`` overrides it) as rows; at most ``DEFAULT_CONTEXT`` (or
    ``context_length``) tokens per request within the model's positions (``config``); with a
    memory ``budget`` (``None``: nothing loaded, e.g. ``intelrt serve --simulate``), the engine's
    KV cache sized within it (``dtype_bytes`` per cached value)."""
    from ..decoding.memory import kv_shape, size_engine

    max_batch, context_length = _count("max_batch", max_batch), _count("context_length", context_length)
    max_queue = _count("max_queue", max_queue)
    reasons: list[str] = []
    batching = plan.decided.batching
    if max_batch is not None:
        rows = max_batch
        reasons.append(f"rows: {rows}, as asked (max_batch)")
    elif batching is not None and batching.max_batch:
        rows = batching.max_batch
        reasons.append(f"rows: {rows}, the plan's batch size on {plan.backend.name} (its batching decision)")
    else:
        rows = FALLBACK_ROWS
        reasons.append(f"rows: {rows}: the plan's batching decision names no batch size")
    found = model_positions(config)
    key, positions = found if found is not None else ("", None)
    if context_length is not None:
        if positions is not None and context_length > positions:
            raise ConfigurationError(f"context_length={context_length} is more than the model reads "
                                     f"({key}={positions}); pass at most {positions}")
        context = context_length
    else:
        context = context_limit(config)
        reasons.append(f"context: {context} tokens" + (
            f", the model's {key}" if context == positions else
            f", intelrt's default (pass context_length for up to {positions or 'more'})"))
    if context < 2:
        raise ConfigurationError(f"context_length={context}: a request needs at least 2 tokens (one prompt token, "
                                 "one new token)")
    shape = kv_shape(config, dtype_bytes)
    engine = None
    if budget is not None and shape is not None:
        engine = size_engine(shape, budget, tuning, rows=rows, context=context, rows_asked=max_batch is not None)
        rows = engine.rows
        reasons += list(engine.reasons[1:])
    elif shape is not None:
        reasons.append("KV cache not checked against device memory: nothing is loaded")
    queue = max_queue if max_queue is not None else rows * QUEUE_PER_ROW
    kv = engine.kv_bytes if engine is not None else (rows * context * shape.bytes_per_token if shape else 0)
    return ServingLimits(rows, context, queue, kv, tuple(reasons), engine, budget)
