"""Generation keywords → what the fast decode loop will do (:class:`DecodeOptions`), or why it
cannot (never dropped silently).

The effective settings are computed as transformers computes them: the model's
``generation_config`` updated with the call's keywords. Every setting that differs from
transformers' default must be one the loop honours (greedy; temperature / top-k / top-p
sampling; EOS and pad ids; ``max_new_tokens``); any other one sends the call to transformers'
``generate`` with the setting named in the reason.
"""

from __future__ import annotations

import copy
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from ..errors import ConfigurationError
from .sampling import SamplingParams

#: Settings that only matter when sampling (transformers ignores them for greedy search).
SAMPLING_ONLY = frozenset({"temperature", "top_k", "top_p", "min_p", "typical_p", "epsilon_cutoff",
                           "eta_cutoff", "top_h"})
#: Sampling settings the loop honours.
SAMPLING_HONOURED = frozenset({"temperature", "top_k", "top_p"})
#: Settings the loop reads itself or that change nothing about the tokens produced.
HANDLED = frozenset({"max_new_tokens", "do_sample", "pad_token_id", "eos_token_id", "bos_token_id",
                     "decoder_start_token_id", "max_length", "use_cache", "compile_config", "disable_compile",
                     "transformers_version", "output_attentions", "output_hidden_states",
                     "continuous_batching_config"})
#: ``cache_implementation`` values the loop's static cache stands in for with equal tokens.
CACHES = (None, "static", "dynamic")


@dataclass(frozen=True)
class DecodeOptions:
    """What one call asks of the decode loop."""

    max_new_tokens: int
    do_sample: bool
    temperature: float
    top_k: int
    """0: off."""
    top_p: float
    """1.0: off."""
    eos_token_ids: tuple[int, ...]
    pad_token_id: int
    streamer: Any = field(default=None, compare=False)
    """A transformers streamer (``put`` / ``end``) the loop hands tokens to as they come (batch 1)."""

    def params(self, seed: int | None = None) -> SamplingParams:
        """The engine's per-request parameters for this call (greedy unless ``do_sample``)."""
        return SamplingParams(max_new_tokens=self.max_new_tokens,
                              temperature=self.temperature if self.do_sample else 0.0,
                              top_k=self.top_k if self.do_sample else 0, top_p=self.top_p if self.do_sample else 1.0,
                              seed=seed, stop_token_ids=self.eos_token_ids)


def check_setting_types(kwargs: Mapping[str, Any]) -> None:
    """Refuse wrong types for the settings the loop reads (ConfigurationError, never a guess)."""
    checks: dict[str, tuple[tuple[type, ...], str]] = {
        "max_new_tokens": ((int,), "an int >= 1"),
        "do_sample": ((bool,), "True or False"),
        "temperature": ((int, float), "a number > 0"),
        "top_k": ((int,), "an int >= 0"),
        "top_p": ((int, float), "a number in (0, 1]"),
    }
    for name, (types, wanted) in checks.items():
        if name not in kwargs or kwargs[name] is None:
            continue
        value = kwargs[name]
        ok = isinstance(value, types) and (name == "do_sample" or not isinstance(value, bool))
        if ok and name == "max_new_tokens":
            ok = value >= 1
        elif ok and name == "temperature":
            ok = value > 0
        elif ok and name == "top_k":
            ok = value >= 0
        elif ok and name == "top_p":
            ok = 0 < value <= 1
        if not ok:
            raise ConfigurationError(f"{name}={value!r}: {name} must be {wanted}")


def _ids(value: Any) -> tuple[int, ...]:
    if value is None:
        return ()
    if isinstance(value, int):
        return (value,)
    if isinstance(value, Sequence) or hasattr(value, "tolist"):
        items = value.tolist() if hasattr(value, "tolist") else list(value)
        return tuple(int(v) for v in (items if isinstance(items, list) else [items]))
    raise ConfigurationError(f"eos_token_id={value!r} must be an int or a list of ints")


def resolve(generation_config: Any, kwargs: Mapping[str, Any]) -> tuple[DecodeOptions | None, str | None]:
    """``(options, None)`` when the loop honours every setting, else ``(None, why not)``."""
    from transformers import GenerationConfig

    check_setting_types(kwargs)
    settings = dict(kwargs)
    streamer = settings.pop("streamer", None)
    if settings.get("max_length") is not None and settings.get("max_new_tokens") is None:
        return None, ("max_length counts the prompt's tokens too (per padded batch): transformers' generate runs "
                      "this call; pass max_new_tokens for the fast loop")
    # As GenerationMixin._prepare_generation_config does: the model's generation config, then
    # transformers' global defaults for what neither sets (top_k=50, temperature=1.0 ...), then the
    # call's keywords.
    config = copy.deepcopy(generation_config) if generation_config is not None else GenerationConfig()
    defaults = GenerationConfig._get_default_generation_params()
    config.update(**defaults, defaults_only=True)
    unused = config.update(**settings)
    unknown = sorted(k for k, v in unused.items() if v is not None)
    if unknown:
        return None, (f"generate() keyword(s) {', '.join(unknown)} are not generation settings the fast loop "
                      "reads; transformers' generate receives them as given")
    default = GenerationConfig()
    default.update(**defaults, defaults_only=True)
    sampling = bool(config.do_sample)
    odd: list[str] = []
    for name, value in sorted(vars(config).items()):
        if name.startswith("_") or name in HANDLED:
            continue
        if name in SAMPLING_ONLY and (not sampling or name in SAMPLING_HONOURED):
            continue
        if name == "cache_implementation" and value in CACHES:
            continue
        if value != getattr(default, name, value):
            odd.append(f"{name}={value!r}")
    if config.use_cache is False:
        odd.append("use_cache=False")
    if odd:
        return None, (f"{', '.join(odd)}: the fast loop does greedy search and temperature/top-k/top-p "
                      "sampling only, so transformers' generate runs this call")
    eos = _ids(config.eos_token_id)
    pad = config.pad_token_id if config.pad_token_id is not None else (eos[0] if eos else 0)
    max_new = config.max_new_tokens
    if max_new is None:
        raise ConfigurationError("max_new_tokens is not set: pass max_new_tokens=N")
    top_k = int(config.top_k or 0) if sampling else 0
    top_p = float(config.top_p if config.top_p is not None else 1.0) if sampling else 1.0
    temperature = float(config.temperature if config.temperature is not None else 1.0) if sampling else 1.0
    return DecodeOptions(int(max_new), sampling, temperature, top_k, top_p, eos, int(pad), streamer), None
