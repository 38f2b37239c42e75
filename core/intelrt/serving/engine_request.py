"""A completion as the decode engine takes it (``RowRequest``), and which request fields this
build's engine applies — the one place the HTTP layer meets the engine's sampling interface.

With the engine's ``SamplingParams`` (``intelrt.decoding.sampling``, applied per row by its one
sampler) every field of :func:`~intelrt.serving.sampling_fields.sampling_kwargs` reaches it. An
engine without it samples with temperature, top-p and a seed only; ``stop_token_ids`` and
``ignore_eos`` are the end-of-sequence ids this layer hands over; any other field asked for is
refused with ``400`` naming it — never dropped.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence
from functools import cache
from typing import Any

from ..decoding.inflight import RowRequest
from .errors import ApiError

BASIC_FIELDS = frozenset({"temperature", "top_p", "seed", "stop_token_ids"})
"""What the in-flight sampler applies without ``SamplingParams`` (stop ids: as end-of-sequence ids)."""


@cache
def _sampling_params() -> Any:
    """The engine's ``SamplingParams`` class when this build's ``RowRequest`` takes one, else ``None``."""
    try:
        from ..decoding.sampling import SamplingParams
    except ImportError:
        return None
    names = {f.name for f in dataclasses.fields(RowRequest)}
    return SamplingParams if "sampling" in names else None


@cache
def applied_fields() -> frozenset[str]:
    """The ``sampling_kwargs`` names this build's engine applies."""
    params = _sampling_params()
    if params is None:
        return BASIC_FIELDS
    return frozenset(f.name for f in dataclasses.fields(params))


def adapters_supported() -> bool:
    """Whether ``RowRequest`` takes a per-request LoRA adapter (``adapter``: its name)."""
    return "adapter" in {f.name for f in dataclasses.fields(RowRequest)}


def row_request(prompt: Sequence[int], max_new_tokens: int, eos: Sequence[int], kwargs: Mapping[str, Any],
                params: Mapping[str, str], adapter: str | None = None) -> RowRequest:
    """The engine's request for one completion; ``kwargs`` from ``sampling_kwargs``, ``params``:
    the request field each kwarg came from (for the refusal of one this engine cannot apply)."""
    applied = applied_fields()
    for name in kwargs:
        if name not in applied:
            field = params.get(name, name)
            raise ApiError(400, f"{field} is not applied by this server's decode engine (it applies "
                                f"{', '.join(sorted(applied))}); leave it out", param=field)
    extra: dict[str, Any] = {}
    if adapter is not None:
        if not adapters_supported():
            raise ApiError(400, "this server's decode engine does not decode LoRA adapters per request",
                           param="model")
        extra["adapter"] = adapter
    stop_ids = tuple(kwargs.get("stop_token_ids", ()))
    params_class = _sampling_params()
    if params_class is not None:
        return RowRequest(tuple(prompt), max_new_tokens, tuple(eos),  # type: ignore[call-arg]  # issue 27's field
                          sampling=params_class(**kwargs), **extra)
    ends = tuple(dict.fromkeys([*eos, *stop_ids]))
    return RowRequest(tuple(prompt), max_new_tokens, ends, float(kwargs.get("temperature", 0.0)),
                      float(kwargs.get("top_p", 1.0)), int(kwargs.get("seed") or 0), **extra)
