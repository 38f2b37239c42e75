"""Which KV blocks each request holds, and the prefix cache: vLLM v1's ``KVCacheManager`` over its
``BlockPool`` (``vllm/v1/core/kv_cache_manager.py``), for one kind of layer and one device.

Pure Python (no torch). The scheduler (``scheduler.py``) asks it whether a request fits, to find a
request's cached prefix, to give a request more blocks or take them back; the block ids live in
the request (``EngineRequest.blocks``, its block table in order) and in ``blocks.BlockPool``'s
reference counts; the runner (``runner.py``) writes the device copy of the tables.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol

from .blocks import BlockPool, PrefixStats


class EngineRequest(Protocol):
    """What the manager reads and writes of a request (``scheduler.EngineRequest``): its tokens, its
    block table, how far it is computed and how many of its full blocks the prefix cache holds.
    Declared here, so that the manager does not import the scheduler that imports it."""

    tokens: list[int]
    blocks: list[int]
    computed: int
    remembered: int

    def full_digests(self, blocks: int, size: int) -> list[bytes]: ...


class KVCacheManager:
    """The blocks of ``pool`` as requests hold them."""

    def __init__(self, pool: BlockPool) -> None:
        self.pool = pool
        self.block_size = pool.block_size

    # -- counts -------------------------------------------------------------------------------------
    @property
    def usable(self) -> int:
        return self.pool.usable

    @property
    def free(self) -> int:
        return self.pool.free

    @property
    def used(self) -> int:
        return self.pool.used

    @property
    def stats(self) -> PrefixStats:
        return self.pool.stats

    def blocks_for(self, tokens: int) -> int:
        """Blocks that hold ``tokens`` token slots."""
        return self.pool.blocks_for(tokens)

    # -- admission ----------------------------------------------------------------------------------
    def cached_prefix(self, request: EngineRequest) -> list[int]:
        """The blocks holding the longest cached prefix of ``request``'s tokens (every full block
        but one that holds its last token, which must be computed for its logits). Looked up at
        every try: a block found at an earlier look may have been evicted since."""
        usable = (len(request.tokens) - 1) // self.block_size
        return self.pool.lookup(request.full_digests(usable, self.block_size))

    def admits(self, found: list[int], need: int) -> bool:
        """``need`` new blocks can be taken beside the cached ``found`` (which, if nobody holds them,
        are in the free queue too and must not be counted twice)."""
        evictable = sum(1 for block in found if self.pool.refs(block) == 0)
        return need <= self.pool.free - evictable

    def admit(self, request: EngineRequest, found: list[int], need: int) -> int:
        """``request`` holds the cached ``found`` and ``need`` new blocks; the prompt tokens found
        (counted in the prefix cache's statistics)."""
        start = len(found) * self.block_size
        self.pool.share(found)
        self.pool.stats.queried_tokens += len(request.tokens)
        self.pool.stats.hit_tokens += start
        request.blocks = list(found) + self.pool.allocate(need)
        request.computed = request.remembered = start
        return start

    # -- growing and giving back --------------------------------------------------------------------
    def missing(self, request: EngineRequest, tokens: int) -> int:
        """Blocks ``request`` still needs for its first ``tokens`` token slots."""
        return self.pool.blocks_for(tokens) - len(request.blocks)

    def extend(self, request: EngineRequest, count: int) -> list[int]:
        """``count`` more blocks for ``request`` (``OutOfBlocks`` when fewer are free), the new ones."""
        new = self.pool.allocate(count)
        request.blocks += new
        return new

    def release(self, request: EngineRequest) -> None:
        """Give back ``request``'s blocks, its tail first (evicted before its prefix)."""
        self.pool.release(reversed(request.blocks))
        request.blocks, request.remembered = [], 0

    def remember(self, request: EngineRequest) -> None:
        """Give the prefix cache ``request``'s blocks that are full of computed keys."""
        full = min(request.computed // self.block_size, len(request.blocks))
        if full <= request.remembered or not self.pool.prefix_caching:
            request.remembered = max(request.remembered, full)
            return
        digests = request.full_digests(full, self.block_size)
        for i in range(request.remembered, full):
            self.pool.remember(request.blocks[i], digests[i])
        request.remembered = full

    def forget_prefixes(self) -> None:
        """Empty the prefix cache (the weights changed: cached keys no longer match them)."""
        self.pool.forget_prefixes()

    def check(self, holders: Sequence[EngineRequest]) -> None:
        """Raise ``AssertionError`` when the pool's reference counts are not what ``holders`` hold."""
        self.pool.check()
        held: dict[int, int] = {}
        for request in holders:
            for block in request.blocks:
                held[block] = held.get(block, 0) + 1
        for block in range(1, self.pool.blocks):
            assert self.pool.refs(block) == held.get(block, 0), (
                f"block {block}: pool says {self.pool.refs(block)}, holders {held.get(block, 0)}")
