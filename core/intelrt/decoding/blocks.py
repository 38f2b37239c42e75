"""The paged KV cache's bookkeeping: fixed-size blocks, their reference counts, and the prefix cache.

Pure Python (no torch): the device tensors live in ``paged.py``; this module only says which
block ids a request may write and which blocks already hold a prefix.

The ideas are vLLM's (``vllm/v1/core/block_pool.py``, ``BlockPool``; ``kv_cache_utils.py``,
``hash_block_tokens`` and ``FreeKVCacheBlockQueue``), written anew for one kind of layer and one
device:

* Block 0 is the *null block* (vLLM's ``null_block``): never handed out, it is where a batch's idle
  rows and any slot past a row's allocation write, so a padded or over-running row never touches
  another request's keys.
* Every other block is free (in the free queue) or held by one or more requests (``refs``). The
  free queue is in eviction order: allocation takes the block freed longest ago; a request frees
  its blocks last-first, so the tail of a sequence is evicted before its prefix.
* A block full of known tokens (prompt or accepted output) gets a digest chained from the digest of
  the block before it (sha256 of the parent's digest and the tokens: a digest names the whole
  prefix up to the block's end). A digest maps to the one block holding those keys; a later request
  whose prompt starts with the same blocks takes them (``refs`` + 1) instead of computing them
  again. A cached block whose last holder left stays in the free queue, still findable, until
  allocation needs it (then its digest is forgotten: LRU eviction of free cached blocks).
"""

from __future__ import annotations

import hashlib
from array import array
from collections import OrderedDict
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

NULL_BLOCK = 0
"""The block id idle rows and unallocated table entries point at (never allocated)."""


def block_digests(tokens: Sequence[int], block_size: int, parent: bytes | None = None) -> list[bytes]:
    """The chained digest of every full block of ``tokens`` (a partial last block has none),
    continuing from ``parent`` (the digest of the block before ``tokens[0]``; ``None``: none)."""
    digests = []
    for start in range(0, len(tokens) - block_size + 1, block_size):
        h = hashlib.sha256(parent or b"")
        h.update(array("q", tokens[start:start + block_size]).tobytes())
        parent = h.digest()
        digests.append(parent)
    return digests


@dataclass
class PrefixStats:
    """Prefix-cache use since the pool was made: prompt tokens of admitted requests, those found in
    the cache, and cached blocks evicted (the engine counts the first two as it admits)."""

    queried_tokens: int = 0
    hit_tokens: int = 0
    evicted_blocks: int = 0

    @property
    def hit_rate(self) -> float:
        return self.hit_tokens / self.queried_tokens if self.queried_tokens else 0.0


class OutOfBlocks(Exception):
    """Fewer free blocks than asked for (the caller queues or preempts; nothing was taken)."""


class BlockPool:
    """``blocks`` blocks of ``block_size`` token slots each (block 0 the null block), with a prefix
    cache when ``prefix_caching``. Not thread-safe: the engine's one thread drives it."""

    def __init__(self, blocks: int, block_size: int, prefix_caching: bool = True) -> None:
        if blocks < 2:
            raise ValueError(f"a block pool needs at least 2 blocks (one is the null block), got {blocks}")
        if block_size < 1:
            raise ValueError(f"block_size must be >= 1, got {block_size}")
        self.blocks, self.block_size, self.prefix_caching = blocks, block_size, prefix_caching
        self._refs = [0] * blocks
        self._digest: list[bytes | None] = [None] * blocks
        self._free: OrderedDict[int, None] = OrderedDict((b, None) for b in range(1, blocks))
        self._cached: dict[bytes, int] = {}
        self.stats = PrefixStats()

    # -- counts --------------------------------------------------------------------------------
    @property
    def usable(self) -> int:
        """Blocks that can ever be handed out (all but the null block)."""
        return self.blocks - 1

    @property
    def free(self) -> int:
        """Blocks allocation can take now (free ones, cached or not)."""
        return len(self._free)

    @property
    def used(self) -> int:
        """Blocks held by at least one request."""
        return self.usable - self.free

    @property
    def cached(self) -> int:
        """Blocks whose digest is in the prefix cache (held or free)."""
        return len(self._cached)

    def blocks_for(self, tokens: int) -> int:
        """Blocks that hold ``tokens`` token slots."""
        return -(-tokens // self.block_size)

    # -- allocation ------------------------------------------------------------------------------
    def allocate(self, count: int) -> list[int]:
        """``count`` blocks for one holder (``OutOfBlocks`` when fewer are free: none are taken).
        A free cached block taken here leaves the prefix cache."""
        if count > len(self._free):
            raise OutOfBlocks(f"{count} block(s) asked for, {len(self._free)} free")
        taken = []
        for _ in range(count):
            block, _ = self._free.popitem(last=False)
            digest = self._digest[block]
            if digest is not None:
                self._digest[block] = None
                if self._cached.get(digest) == block:
                    del self._cached[digest]
                self.stats.evicted_blocks += 1
            self._refs[block] = 1
            taken.append(block)
        return taken

    def release(self, blocks: Iterable[int]) -> None:
        """One holder gives ``blocks`` back, in the order they should be evicted (pass a
        sequence's blocks last-first); a block nobody holds any more joins the free queue."""
        for block in blocks:
            if block == NULL_BLOCK:
                continue
            if self._refs[block] <= 0:
                raise RuntimeError(f"block {block} released more often than it was taken")
            self._refs[block] -= 1
            if self._refs[block] == 0:
                self._free[block] = None

    def refs(self, block: int) -> int:
        return self._refs[block]

    # -- the prefix cache ------------------------------------------------------------------------
    def lookup(self, digests: Sequence[bytes]) -> list[int]:
        """The blocks holding the longest prefix of ``digests`` (a request's full prompt blocks, in
        order); nothing is taken (``share`` them once the request is let in)."""
        found: list[int] = []
        if self.prefix_caching:
            for digest in digests:
                block = self._cached.get(digest)
                if block is None:
                    break
                found.append(block)
        return found

    def share(self, blocks: Iterable[int]) -> None:
        """One more holder of each of ``blocks`` (found by ``lookup``): a free one leaves the free
        queue, so allocation cannot evict it while it is held."""
        for block in blocks:
            if self._refs[block] == 0:
                del self._free[block]
            self._refs[block] += 1

    def remember(self, block: int, digest: bytes) -> None:
        """``block`` is full and its keys are those of the prefix ``digest`` names: later lookups
        find it (unless another block already holds that prefix, which then stays the one found)."""
        if not self.prefix_caching or self._digest[block] is not None or digest in self._cached:
            return
        self._digest[block] = digest
        self._cached[digest] = block

    def forget_prefixes(self) -> None:
        """Empty the prefix cache (the weights changed: cached keys no longer match them)."""
        for block, digest in enumerate(self._digest):
            if digest is not None:
                self._digest[block] = None
        self._cached.clear()

    def check(self) -> None:
        """Raise ``AssertionError`` when the bookkeeping is inconsistent (tests, and after a fault)."""
        assert self._refs[NULL_BLOCK] == 0 and NULL_BLOCK not in self._free
        for block in range(1, self.blocks):
            assert (self._refs[block] == 0) == (block in self._free), f"block {block}: refs {self._refs[block]}"
        for digest, block in self._cached.items():
            assert self._digest[block] == digest
