"""The paged cache's write as an operator a compiler does not look into: ``intelrt::write_cache``.

``paged.write`` stores a step's keys and values at their slots of a layer's pool with one
``index_copy_``. Traced into a compiled step as plain tensor code, torch 2.11's inductor lowered a
write followed by a read of the same pool (every layer's attention) as a copy of the whole pool:
allocated, written, read, copied back, every step — 776 MiB a layer for an 8B server's cache on an
H100, where the compiled steps with prompt chunks ran out of memory (torch 2.13 writes in place).
A custom op's mutation is applied in place by every version (``intelrt::decode_attention`` writes
the same pools so), so ``paged.write`` calls this op while torch compiles and :func:`store`
otherwise (a custom op costs a dispatch in eager code). Importing this module imports torch and
registers the op; ``PagedCache`` imports it, so it exists before a step over a cache compiles.
"""

from __future__ import annotations

import torch


def store(pool: torch.Tensor, slots: torch.Tensor, states: torch.Tensor) -> None:
    """``states`` (tokens, heads, dim) at flat ``slots`` (tokens,) of ``pool`` (blocks, block_size,
    heads, dim), in eager code."""
    pool.view(-1, pool.shape[2], pool.shape[3]).index_copy_(0, slots, states.to(pool.dtype))


@torch.library.custom_op("intelrt::write_cache", mutates_args={"pool"})
def write_cache(pool: torch.Tensor, slots: torch.Tensor, states: torch.Tensor) -> None:
    """:func:`store` as one operator, for a step torch compiles."""
    store(pool, slots, states)


@write_cache.register_fake
def _write_cache_shape(pool: torch.Tensor, slots: torch.Tensor, states: torch.Tensor) -> None:
    return None


__all__ = ["store", "write_cache"]
