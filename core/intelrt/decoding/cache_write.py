"""The paged cache's write as an operator a compiler does not look into: ``intelrt::write_cache``.

``paged.write`` stores a step's keys and values at their slots of a layer's pool with one
``index_copy_``. Traced into a compiled step as plain tensor code, torch 2.11's inductor lowered a
write followed by a read of the same pool (every layer's attention) as a copy of the whole pool:
allocated, written, read, copied back, every step — 776 MiB a layer for an 8B server's cache on an
H100, where the compiled steps with prompt chunks ran out of memory (torch 2.13 writes in place).
A custom op's mutation is applied in place by every version (``intelrt::decode_attention`` writes
the same pools so), so ``paged.write`` calls this op while torch compiles and ``index_copy_``
otherwise (a custom op costs a dispatch in eager code). Importing this module imports torch and
registers the op; ``PagedCache`` imports it, so it exists before a step over a cache compiles.
"""

from __future__ import annotations

import torch

from . import paged


@torch.library.custom_op("intelrt::write_cache", mutates_args={"pool"})
def write_cache(pool: torch.Tensor, slots: torch.Tensor, states: torch.Tensor) -> None:
    """``paged.write(pool, slots, states)``: ``states`` (tokens, heads, dim) at flat ``slots`` (tokens,)
    of ``pool`` (blocks, block_size, heads, dim)."""
    paged.write(pool, slots, states)


@write_cache.register_fake
def _write_cache_shape(pool: torch.Tensor, slots: torch.Tensor, states: torch.Tensor) -> None:
    return None


__all__ = ["write_cache"]
