"""A request's sampling fields → the engine's ``SamplingParams`` (``intelrt.decoding.sampling``),
as a pure function: defaults from the model's generation config, token ids checked against the
vocabulary, a greedy choice's sampling-only fields left at their neutral values.

Defaults follow ``vllm serve``'s ``--generation-config auto``: a field the request leaves out takes
the value the model's ``generation_config.json`` sets explicitly (``GenerationConfig.to_diff_dict``,
vLLM's ``get_diff_sampling_param``), else OpenAI's neutral one. A model whose config does not
sample decodes greedily unless the request asks for a temperature; ``top_p`` alone samples at
temperature 1 (OpenAI's default). vLLM's ``top_k`` of ``-1`` or ``0`` means all tokens.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from .errors import ApiError

if TYPE_CHECKING:
    from ..decoding.sampling import SamplingParams
    from .protocol import _Generation

#: The request field each ``SamplingParams`` field comes from, where the names differ.
PARAM_OF = {"max_new_tokens": "max_tokens", "constraint": "response_format"}


@dataclass(frozen=True)
class GenerationDefaults:
    """What the model's ``generation_config.json`` sets explicitly (``None``: it does not)."""

    do_sample: bool = False
    temperature: float | None = None
    top_p: float | None = None
    top_k: int | None = None
    min_p: float | None = None
    repetition_penalty: float | None = None

    @classmethod
    def of(cls, config: Any) -> GenerationDefaults:
        """From a ``transformers.GenerationConfig`` (or ``None``)."""
        if config is None:
            return cls()
        explicit = config.to_diff_dict() if hasattr(config, "to_diff_dict") else {}

        def number(name: str) -> Any:
            value = explicit.get(name)
            return value if isinstance(value, (int, float)) and not isinstance(value, bool) else None

        return cls(bool(explicit.get("do_sample", False)), number("temperature"), number("top_p"), number("top_k"),
                   number("min_p"), number("repetition_penalty"))


def token_id(value: Any, vocabulary: int, param: str) -> int:
    """A token id inside the vocabulary, or a ``400`` naming ``param``."""
    tid = int(value)
    if not 0 <= tid < vocabulary:
        raise ApiError(400, f"{param}: token id {tid} is outside the model's vocabulary (0 .. {vocabulary - 1})",
                       param=param)
    return tid


def sampling_params(body: _Generation, defaults: GenerationDefaults, vocabulary: int, *, max_new_tokens: int,
                    eos: tuple[int, ...] = (), seed: int | None = None, constraint: Any = None,
                    params: Mapping[str, str] | None = None) -> SamplingParams:
    """The engine's ``SamplingParams`` for one choice of ``body``; a ``400`` naming the request
    field for a value it refuses.

    ``max_new_tokens``: the choice's token budget (the caller fits it to the context); ``eos``:
    the model's end-of-sequence ids (left out for ``ignore_eos``), listed before the request's
    ``stop_token_ids``; ``seed``: this choice's own seed (derived from ``body.seed`` per choice
    by the caller); ``constraint``: a ``TokenConstraint`` (structured output) or ``None``;
    ``params``: request field names that differ from :data:`PARAM_OF`'s."""
    temperature = body.temperature
    if temperature is None:
        if body.top_p is not None and body.top_p < 1:
            temperature = 1.0
        elif defaults.do_sample:
            temperature = defaults.temperature if defaults.temperature is not None else 1.0
        else:
            temperature = 0.0
    sampled = temperature > 0

    def chosen(name: str) -> Any:
        value = getattr(body, name)
        default = getattr(defaults, name) if sampled or name == "repetition_penalty" else None
        return value if value is not None else default

    top_k = chosen("top_k")
    stops = tuple(token_id(t, vocabulary, "stop_token_ids") for t in body.stop_token_ids or ())
    kwargs: dict[str, Any] = {
        "max_new_tokens": max_new_tokens,
        "temperature": float(temperature),
        "top_p": float(chosen("top_p") if chosen("top_p") is not None and sampled else 1.0),
        "top_k": 0 if top_k is None or top_k <= 0 or not sampled else int(top_k),
        "min_p": float(chosen("min_p") or 0.0) if sampled else 0.0,
        "repetition_penalty": float(chosen("repetition_penalty") or 1.0),
        "presence_penalty": float(body.presence_penalty or 0.0),
        "frequency_penalty": float(body.frequency_penalty or 0.0),
        "logit_bias": {token_id(k, vocabulary, "logit_bias"): float(v) for k, v in (body.logit_bias or {}).items()},
        "logprobs": body.top_logprobs_count,
        "seed": seed if sampled else None,
        "stop_token_ids": tuple(dict.fromkeys([*eos, *stops])),
        "constraint": constraint,
    }
    from .engine_request import sampling_params as build

    return build(kwargs, {**PARAM_OF, **(params or {})})
