"""Batch generation through transformers' continuous batching (SPEC X7), as the plan configures it.

``ContinuousBatchingConfig`` gained and renamed fields between transformers 5.17 and 5.24
(``block_size`` → ``page_size``): only fields the installed class has are set.
"""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import Sequence
from typing import Any

from ..errors import GenerationError
from ..hooks.payloads import BatchingChoice
from .keywords import DecodeOptions

log = logging.getLogger(__name__)

REQUEST_PAGE = 32
"""Tokens per cache page when the cache is sized from the requests (small, CPU-friendly)."""


def config_kwargs(value: BatchingChoice, prompts: Sequence[Sequence[int]], max_new_tokens: int,
                  fields: set[str]) -> dict[str, Any]:
    """``ContinuousBatchingConfig`` keywords for the plan's batching ``value`` and this call."""
    kwargs: dict[str, Any] = {}
    if value.use_graphs is not None and "use_cuda_graph" in fields:
        kwargs["use_cuda_graph"] = value.use_graphs  # also drives XPU graphs (X7)
    if value.use_async_batching is not None and "use_async_batching" in fields:
        kwargs["use_async_batching"] = value.use_async_batching
    if value.kv_sizing == "requests":
        page_field = "page_size" if "page_size" in fields else "block_size"
        kwargs[page_field] = REQUEST_PAGE
        kwargs["num_blocks"] = sum(-(-(len(p) + max_new_tokens) // REQUEST_PAGE) for p in prompts) + 1
        longest = max(len(p) for p in prompts)
        kwargs["max_batch_tokens"] = max(longest, min(1024, sum(len(p) for p in prompts) + len(prompts)))
    return {k: v for k, v in kwargs.items() if k in fields}


def generate_continuous(model: Any, prompts: Sequence[Sequence[int]], options: DecodeOptions,
                        value: BatchingChoice) -> list[list[int]]:
    """New tokens per prompt (up to and including EOS) from ``model.generate_batch``."""
    from transformers import ContinuousBatchingConfig, GenerationConfig

    fields = {f.name for f in dataclasses.fields(ContinuousBatchingConfig)}
    cb_config = ContinuousBatchingConfig(**config_kwargs(value, prompts, options.max_new_tokens, fields))
    settings: dict[str, Any] = {"max_new_tokens": options.max_new_tokens, "do_sample": options.do_sample,
                                "pad_token_id": options.pad_token_id,
                                "eos_token_id": list(options.eos_token_ids) or None}
    if options.do_sample:
        settings.update(temperature=options.temperature, top_k=options.top_k or None, top_p=options.top_p)
    generation_config = GenerationConfig(**settings)
    results = model.generate_batch([list(p) for p in prompts], generation_config=generation_config,
                                   continuous_batching_config=cb_config)
    outputs = list(results.values())
    failed = [o.error for o in outputs if getattr(o, "error", None)]
    if len(outputs) != len(prompts) or failed:
        raise GenerationError(
            f"continuous batching returned {len(outputs)} of {len(prompts)} results"
            + (f"; first error: {failed[0]}" if failed else "")
            + ". Retry with batching='padded' (intelrt.load(..., batching='padded')).")
    return [list(o.generated_tokens) for o in outputs]
