"""How much memory the engine's KV cache may take, and the one function that sizes the engine.

The budget follows vLLM's ``--gpu-memory-utilization`` (``vllm/v1/worker/gpu_worker.py``,
``Worker.determine_available_memory``: profile a forward at the largest batch, then give the KV
cache what the utilization leaves), in the form the issue asks for: the KV cache gets
``utilization`` × (free device memory after the weights are loaded − the activation peak of the
largest prefill and decode step − the memory the decode step's device graphs will hold). The
rest — ``1 - utilization`` of what was free — is headroom for the allocator's fragmentation and
for other users of the device. On the CPU nothing is queried: the budget is the configured
``DecodeTuning.cpu_kv_cache_bytes``.

:func:`size_engine` turns a budget into the engine's size (rows, blocks, token budget per step):
the offline ``generate`` path and ``intelrt serve`` both size through it. Importing this module
imports no torch.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from ..errors import ConfigurationError

if TYPE_CHECKING:
    from ..hooks.backend import Backend
    from .tuning import DecodeTuning

log = logging.getLogger(__name__)

GIB = 2**30


def size_text(count: int) -> str:
    """``count`` bytes as GiB, or MiB below one GiB."""
    return f"{count / GIB:,.2f} GiB" if abs(count) >= GIB else f"{count / 2**20:,.1f} MiB"


@dataclass(frozen=True)
class KVShape:
    """What the KV cache stores per token: keys and values of every layer."""

    layers: int
    kv_heads: int
    head_dim: int
    dtype_bytes: int
    value_dim: int | None = None
    """Numbers per head in the values (``None``: ``head_dim``; ``0``: latent attention, whose
    values are part of its keys: ``paged.PagedCache``)."""

    @property
    def bytes_per_token(self) -> int:
        value_dim = self.head_dim if self.value_dim is None else self.value_dim
        return self.layers * self.kv_heads * (self.head_dim + value_dim) * self.dtype_bytes


def kv_shape(config: Any, dtype_bytes: int) -> KVShape | None:
    """The KV shape of a transformers config (its text config for a multimodal one), or ``None``
    when the config does not say it plainly."""
    text = config.get_text_config() if hasattr(config, "get_text_config") else config
    layers = int(getattr(text, "num_hidden_layers", 0) or 0)
    heads = int(getattr(text, "num_attention_heads", 0) or 0)
    kv_heads = int(getattr(text, "num_key_value_heads", 0) or heads)
    head_dim = getattr(text, "head_dim", None) or (int(getattr(text, "hidden_size", 0) or 0) // max(1, heads))
    if not (layers and kv_heads and head_dim):
        return None
    return KVShape(layers, kv_heads, int(head_dim), dtype_bytes)


class PeakMemory:
    """The most memory the allocator reserved from ``device`` while the block ran, above what it
    held at the start (``bytes``; 0 where the runtime keeps no peak, e.g. the CPU). Reserved, not
    allocated: the allocator keeps freed blocks cached, and the device (and ``nvidia-smi``) counts
    them as used. ``backend`` answers the queries (``Backend.memory_in_use`` …)."""

    def __init__(self, backend: Backend, device: Any) -> None:
        self.backend, self.device, self.bytes, self._start = backend, device, 0, 0

    def __enter__(self) -> PeakMemory:
        self.backend.empty_cache(self.device)
        self.backend.reset_peak_memory(self.device)
        self._start = self.backend.memory_in_use(self.device) or 0
        return self

    def __exit__(self, *exc: object) -> None:
        peak = self.backend.memory_in_use(self.device, peak=True)
        self.bytes = max(0, peak - self._start) if peak is not None else 0


@dataclass(frozen=True)
class MemoryBudget:
    """Bytes the KV cache may take, and how that was found."""

    kv_bytes: int
    how: str
    """One line saying where the number comes from (shown when a server starts)."""
    ceiling: int | None = None
    """Bytes of device memory the process should stay under (what was in use before the KV cache
    plus ``utilization`` of what was free); ``None`` on the CPU."""


def memory_budget(backend: Backend, device: Any, tuning: DecodeTuning, activation_bytes: int = 0,
                  graph_bytes: int = 0, utilization: float | None = None) -> MemoryBudget:
    """The KV budget on ``device`` now (the weights loaded), as ``backend`` reports its memory:
    ``utilization`` (default ``tuning.memory_utilization``) × free memory, less ``activation_bytes``
    (the profiled peak of one step) and ``graph_bytes`` (what the step's device graphs will hold);
    where the runtime reports no free memory (the CPU), ``tuning.cpu_kv_cache_bytes``."""
    share = tuning.memory_utilization if utilization is None else utilization
    if not 0 < share <= 1:
        raise ConfigurationError(f"memory utilization {share!r} must be in (0, 1] (e.g. 0.9: 90 % of the free "
                                 "device memory)")
    backend.empty_cache(device)
    memory = backend.memory_info(device)
    if memory is None:
        kv = tuning.cpu_kv_cache_bytes
        where = "the CPU" if backend.device_module() is None else f"{device} (its runtime reports no free memory)"
        return MemoryBudget(kv, f"KV cache budget {size_text(kv)}: configured for {where} "
                                "(DecodeTuning.cpu_kv_cache_bytes)")
    free, total = memory
    kv = int(share * free) - activation_bytes - graph_bytes
    how = (f"KV cache budget {size_text(max(kv, 0))} = {share:g} x {size_text(free)} free on {device} "
           f"({size_text(total)} total, the weights loaded) - {size_text(activation_bytes)} activation peak - "
           f"{size_text(graph_bytes)} for device graphs")
    return MemoryBudget(kv, how, ceiling=(total - free) + int(share * free))


@dataclass(frozen=True)
class EngineSize:
    """The decode engine's size: what :func:`size_engine` decided, with the reasons."""

    rows: int
    """Completions decoding at once."""
    context: int
    """Prompt plus new tokens one completion may have."""
    block_size: int
    blocks: int
    """Blocks of the KV cache, the null block included."""
    max_batch_tokens: int
    """Tokens one engine step computes at most: a decode token per row plus prefill chunks."""
    bytes_per_token: int
    reasons: tuple[str, ...] = ()

    @property
    def max_blocks_per_row(self) -> int:
        return -(-self.context // self.block_size)

    @property
    def kv_bytes(self) -> int:
        return self.blocks * self.block_size * self.bytes_per_token

    @property
    def tokens(self) -> int:
        """Token slots of the KV cache (the null block's left out)."""
        return (self.blocks - 1) * self.block_size


def size_engine(shape: KVShape, budget: MemoryBudget, tuning: DecodeTuning, *, rows: int, context: int,
                needed_tokens: int | None = None, rows_asked: bool = False, step_tokens: int | None = None
                ) -> EngineSize:
    """The engine's size for ``rows`` completions of up to ``context`` tokens each within
    ``budget``: as many blocks as the budget holds — at most what ``needed_tokens`` (an offline
    call's prompts and new tokens) need, when given, else at most every row at ``context`` tokens. ``ConfigurationError`` when the budget
    cannot hold one completion of ``context`` tokens, naming the largest context it holds;
    ``rows_asked``: the caller gave ``rows`` itself (rows beyond the blocks are refused rather than cut);
    ``step_tokens``: the tokens a step computes at most (``DecodeTuning.max_batch_tokens`` when set,
    else this, else ``sizing.DEFAULT_STEP_TOKENS``)."""
    from ..backends.sizing import DEFAULT_STEP_TOKENS

    block = tuning.block_size
    per_block = block * shape.bytes_per_token
    affordable = max(0, budget.kv_bytes // per_block)
    longest = -(-context // block)
    reasons: list[str] = [budget.how]
    if affordable < longest:
        fits = affordable * block
        raise ConfigurationError(
            f"the KV cache budget ({size_text(budget.kv_bytes)}, {affordable} blocks of {block} tokens) cannot "
            f"hold one completion of {context} tokens: at most {fits} fit. Pass a context length of at most "
            f"{fits}, or give the cache more memory (a higher memory utilization, DecodeTuning.cpu_kv_cache_bytes "
            "on the CPU)" if fits else
            f"the KV cache budget ({budget.how}) holds no block of {block} tokens: free device memory, or raise the "
            "memory utilization")
    blocks = affordable
    if needed_tokens is not None:
        need = -(-needed_tokens // block)
        blocks = max(longest, min(affordable, need))
    elif affordable > rows * longest:
        blocks = rows * longest
        reasons.append(f"KV cache capped at {rows} rows x {context} tokens: more blocks than every row at its "
                       "longest could use")
    if rows > blocks:
        if rows_asked:
            raise ConfigurationError(f"{rows} rows need at least {rows} KV blocks, and the budget holds {blocks}: "
                                     f"pass at most {blocks} rows, or give the cache more memory")
        reasons.append(f"rows cut from {rows} to {blocks}: each decoding row needs a block of its own")
        rows = blocks
    tokens = tuning.max_batch_tokens or step_tokens or DEFAULT_STEP_TOKENS
    return EngineSize(rows, context, block, blocks + 1, max(tokens, block), shape.bytes_per_token, tuple(reasons))
