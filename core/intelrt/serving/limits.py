"""How much a server takes at once, from the plan and the device: rows decoding together, the
longest prompt plus completion, waiting requests. Shown when the server starts."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from ..backends.sizing import DEFAULT_CONTEXT  # the engine's context, which planning reads too
from ..errors import ConfigurationError

DRAIN_TIMEOUT_S = 30.0
"""After SIGTERM, seconds the requests in flight get to finish (``intelrt serve --drain-timeout``)."""

if TYPE_CHECKING:
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
    """Cache slots per row: a request's prompt tokens plus ``max_tokens`` must fit."""
    max_queue: int
    """Completions waiting for a row before new requests get ``429``."""
    kv_bytes: int
    """Bytes of KV cache the rows take (scratch rows for prompt passes included)."""
    reasons: tuple[str, ...] = ()

    def lines(self) -> list[str]:
        return [f"rows in flight: {self.rows}", f"context per row: {self.context} tokens (prompt + max_tokens)",
                f"KV cache: {self.kv_bytes / 2**20:,.1f} MiB", f"queue limit: {self.max_queue} waiting completions",
                *self.reasons]


def _count(name: str, value: Any) -> int | None:
    if value is None:
        return None
    if not isinstance(value, int) or isinstance(value, bool) or value < 1:
        raise ConfigurationError(f"{name}={value!r}: {name} must be a whole number >= 1")
    return value


def limits_for(loaded: Loaded, *, max_batch: int | None = None, context_length: int | None = None,
               max_queue: int | None = None) -> ServingLimits:
    """The limits for serving ``loaded`` on its device (see :func:`serving_limits`)."""
    from ..decoding.generation import free_device_memory

    model = loaded.model
    return serving_limits(loaded.plan, model.config, model.dtype.itemsize, free_device_memory(model.device),
                          loaded.decode_tuning, max_batch=max_batch, context_length=context_length,
                          max_queue=max_queue)


def serving_limits(plan: Plan, config: Any, dtype_bytes: int, free_memory: int | None, tuning: DecodeTuning, *,
                   max_batch: int | None = None, context_length: int | None = None,
                   max_queue: int | None = None) -> ServingLimits:
    """The plan's batch size (``max_batch`` overrides it) as rows; at most ``DEFAULT_CONTEXT`` (or
    ``context_length``) slots per row within the model's positions (``config``); rows cut to what
    fits ``KV_MEMORY_SHARE`` of ``free_memory`` (bytes; ``None``: unknown) with ``dtype_bytes``
    per cached value."""
    from ..decoding.generation import KV_MEMORY_SHARE, kv_bytes_per_row
    from ..decoding.inflight import admission_rows

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
    text = config.get_text_config() if hasattr(config, "get_text_config") else config
    positions = getattr(text, "max_position_embeddings", None)
    positions = positions if isinstance(positions, int) and positions > 1 else None
    if context_length is not None:
        if positions is not None and context_length > positions:
            raise ConfigurationError(f"context_length={context_length} is more than the model reads "
                                     f"(max_position_embeddings={positions}); pass at most {positions}")
        context = context_length
    else:
        context = min(positions or DEFAULT_CONTEXT, DEFAULT_CONTEXT)
        reasons.append(f"context: {context} tokens" + (
            ", the model's max_position_embeddings" if context == positions else
            f", intelrt's default (pass context_length for up to {positions or 'more'})"))
    if context < 2:
        raise ConfigurationError(f"context_length={context}: a request needs at least 2 slots (one prompt token, "
                                 "one new token)")
    per_token = kv_bytes_per_row(config, 1, dtype_bytes)
    if free_memory is not None and per_token:
        budget = int(free_memory * KV_MEMORY_SHARE)
        fit = budget // (context * per_token) - admission_rows(rows, tuning)
        free = f"{KV_MEMORY_SHARE:.0%} of the free device memory ({free_memory / 2**30:.1f} GiB)"
        if fit < 1:
            raise ConfigurationError(f"a KV cache of {context} tokens per row does not fit {free}; pass a smaller "
                                     "context_length")
        if fit < rows:
            if max_batch is not None:
                raise ConfigurationError(f"max_batch={max_batch} rows of {context} tokens do not fit {free}: at most "
                                         f"{fit} do; pass a smaller max_batch or context_length")
            reasons.append(f"rows cut from {rows} to {fit}: their KV cache must fit {free}")
            rows = fit
    elif per_token:
        reasons.append("KV cache not checked against free memory: the device reports none")
    queue = max_queue if max_queue is not None else rows * QUEUE_PER_ROW
    kv_bytes = (rows + admission_rows(rows, tuning)) * context * per_token
    return ServingLimits(rows, context, queue, kv_bytes, tuple(reasons))
