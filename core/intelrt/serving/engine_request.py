"""A completion as the decode engine takes it, and which request fields this build's engine
applies — the one place the HTTP layer meets the engine's interface.

Every completion is described by the engine's :class:`~intelrt.decoding.sampling.SamplingParams`
(built here, so its own checks refuse a bad value with the field named). An engine whose
in-flight batch takes :class:`~intelrt.decoding.sampling.DecodeRequest` (issue 27's rebuild)
gets it whole. The earlier engine (``RowRequest``: temperature, top-p, a seed, end-of-sequence
ids) gets what it can apply; any other field asked for is refused with ``400`` naming it — never
dropped.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence
from functools import cache
from typing import Any

from ..decoding.sampling import DecodeRequest, SamplingParams
from .errors import ApiError

ROW_REQUEST_FIELDS = frozenset({"max_new_tokens", "temperature", "top_p", "seed", "stop_token_ids"})
"""What the earlier in-flight sampler applies (stop ids: as its end-of-sequence ids)."""
NEUTRAL = {f.name: getattr(SamplingParams(), f.name) for f in dataclasses.fields(SamplingParams)}
"""Each ``SamplingParams`` field's value that asks for nothing."""


@cache
def _row_request() -> Any:
    """The earlier engine's ``RowRequest`` class while this build's batch takes it, else ``None``
    (the rebuilt engine keeps a ``RowRequest`` function that makes a ``DecodeRequest``: not it)."""
    from ..decoding import inflight

    found = getattr(inflight, "RowRequest", None)
    return found if isinstance(found, type) and found is not DecodeRequest else None


def applied_fields() -> frozenset[str]:
    """The ``SamplingParams`` fields this build's engine applies."""
    if _row_request() is None:
        return frozenset(f.name for f in dataclasses.fields(SamplingParams))
    return ROW_REQUEST_FIELDS


def adapters_supported() -> bool:
    """Whether the engine takes a per-request LoRA adapter (``DecodeRequest.adapter``, its name)."""
    return _row_request() is None and "adapter" in {f.name for f in dataclasses.fields(DecodeRequest)}


def sampling_params(kwargs: Mapping[str, Any], params: Mapping[str, str]) -> SamplingParams:
    """``SamplingParams(**kwargs)``; its refusal of a value as a ``400`` naming the request field
    (``params``: the field each keyword came from, when its name differs)."""
    try:
        return SamplingParams(**kwargs)
    except ValueError as exc:
        name = str(exc).removeprefix("SamplingParams.").split("=", 1)[0].split("[", 1)[0].split(":", 1)[0]
        field = params.get(name, name)
        raise ApiError(400, f"{field}: {str(exc).removeprefix('SamplingParams.')}", param=field) from None


def engine_request(prompt: Sequence[int], sampling: SamplingParams, params: Mapping[str, str],
                   adapter: str | None = None) -> Any:
    """The engine's request for one completion."""
    row_request = _row_request()
    applied = applied_fields()
    for name in (f.name for f in dataclasses.fields(SamplingParams)):
        if name not in applied and getattr(sampling, name) != NEUTRAL[name]:
            field = params.get(name, name)
            raise ApiError(400, f"{field} is not applied by this server's decode engine (it applies temperature, "
                                "top_p, seed and stop token ids); leave it out", param=field)
    if adapter is not None and not adapters_supported():
        raise ApiError(400, "this server's decode engine does not decode LoRA adapters per request", param="model")
    if row_request is None:
        extra = {"adapter": adapter} if adapter is not None else {}
        return DecodeRequest(tuple(prompt), sampling, **extra)
    return row_request(tuple(prompt), sampling.max_new_tokens, sampling.stop_token_ids, sampling.temperature,
                       sampling.top_p, (sampling.seed or 0) & (2**63 - 1))
