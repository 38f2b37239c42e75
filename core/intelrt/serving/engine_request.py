"""A completion as the decode engine takes it — the one place the HTTP layer meets the engine's
interface.

Every completion is described by the engine's :class:`~intelrt.decoding.sampling.SamplingParams`
(built here, so its own checks refuse a bad value with the field named) and handed to the
engine whole as a :class:`~intelrt.decoding.sampling.DecodeRequest`.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from ..decoding.sampling import DecodeRequest, SamplingParams
from .errors import ApiError


def sampling_params(kwargs: Mapping[str, Any], params: Mapping[str, str]) -> SamplingParams:
    """``SamplingParams(**kwargs)``; its refusal of a value as a ``400`` naming the request field
    (``params``: the field each keyword came from, when its name differs)."""
    try:
        return SamplingParams(**kwargs)
    except ValueError as exc:
        name = str(exc).removeprefix("SamplingParams.").split("=", 1)[0].split("[", 1)[0].split(":", 1)[0]
        field = params.get(name, name)
        raise ApiError(400, f"{field}: {str(exc).removeprefix('SamplingParams.')}", param=field) from None


def engine_request(prompt: Sequence[int], sampling: SamplingParams, adapter: str | None = None) -> DecodeRequest:
    """The engine's request for one completion (``adapter``: the LoRA adapter's name, ``None``: the base)."""
    return DecodeRequest(tuple(prompt), sampling, adapter=adapter)
