"""The paged KV cache's block allocator and prefix cache (``decoding/blocks.py``, issue 27): blocks
given and taken back with reference counts, the null block never handed out, full blocks found
again by the digest of the prefix they end, and free cached blocks evicted least recently freed
first. Pure Python: no model, no torch."""

from __future__ import annotations

import random

import pytest

from intelrt.decoding.blocks import NULL_BLOCK, BlockPool, OutOfBlocks, block_digests


def test_blocks_are_handed_out_once_and_the_null_block_never() -> None:
    pool = BlockPool(9, 4)
    assert (pool.usable, pool.free, pool.used) == (8, 8, 0)
    first, second = pool.allocate(5), pool.allocate(3)
    assert NULL_BLOCK not in first + second and len(set(first + second)) == 8
    with pytest.raises(OutOfBlocks, match="1 block"):
        pool.allocate(1)
    assert pool.free == 0  # a refused allocation takes nothing
    pool.release(reversed(first))
    assert pool.free == 5 and set(pool.allocate(5)) == set(first)
    pool.check()


def test_a_block_released_twice_is_an_error_not_a_silent_double_free() -> None:
    pool = BlockPool(4, 2)
    block = pool.allocate(1)
    pool.release(block)
    with pytest.raises(RuntimeError, match="released more often"):
        pool.release(block)


def test_digests_name_the_whole_prefix_not_just_the_block() -> None:
    a = block_digests([1, 2, 3, 4, 5, 6, 7, 8, 9], 4)
    assert len(a) == 2  # the partial last block has no digest
    b = block_digests([9, 9, 9, 9, 5, 6, 7, 8], 4)
    assert a[0] != b[0] and a[1] != b[1]  # same second block, other prefix: another digest
    assert block_digests([5, 6, 7, 8], 4, parent=a[0]) == a[1:]  # continuing from a parent digest


def test_a_shared_prefix_is_found_held_by_both_and_survives_its_first_holder() -> None:
    pool = BlockPool(16, 4)
    prompt = list(range(10, 22))  # three full blocks
    digests = block_digests(prompt, 4)
    blocks = pool.allocate(3)
    for block, digest in zip(blocks, digests, strict=True):
        pool.remember(block, digest)
    assert pool.lookup(digests) == blocks
    assert pool.lookup(block_digests([*prompt[:8], 0, 0, 0, 0], 4)) == blocks[:2]  # diverges in block 3
    pool.share(blocks[:2])
    assert [pool.refs(b) for b in blocks] == [2, 2, 1]
    pool.release(reversed(blocks))  # the first request ends
    assert [pool.refs(b) for b in blocks] == [1, 1, 0] and pool.lookup(digests) == blocks  # still cached
    pool.check()


def test_free_cached_blocks_are_evicted_least_recently_freed_first() -> None:
    pool = BlockPool(5, 2)  # four usable blocks
    old, new = pool.allocate(2), pool.allocate(2)
    old_digests, new_digests = block_digests([1, 2, 3, 4], 2), block_digests([5, 6, 7, 8], 2)
    for block, digest in zip(old + new, old_digests + new_digests, strict=True):
        pool.remember(block, digest)
    pool.release(reversed(old))
    pool.release(reversed(new))
    assert pool.free == 4 and pool.cached == 4
    taken = pool.allocate(2)  # the two freed first: the old prefix's, tail first
    assert set(taken) == set(old) and pool.lookup(old_digests) == [] and pool.lookup(new_digests) == new
    assert pool.stats.evicted_blocks == 2 and pool.cached == 2
    pool.share(pool.lookup(new_digests))  # a hit takes its blocks out of the eviction queue
    with pytest.raises(OutOfBlocks):
        pool.allocate(1)
    pool.check()


def test_forget_prefixes_empties_the_cache_and_keeps_the_holders() -> None:
    pool = BlockPool(8, 2)
    blocks = pool.allocate(2)
    digests = block_digests([1, 2, 3, 4], 2)
    for block, digest in zip(blocks, digests, strict=True):
        pool.remember(block, digest)
    pool.forget_prefixes()
    assert pool.lookup(digests) == [] and pool.used == 2
    pool.check()


def test_prefix_caching_off_finds_nothing() -> None:
    pool = BlockPool(8, 2, prefix_caching=False)
    blocks = pool.allocate(2)
    digests = block_digests([1, 2, 3, 4], 2)
    for block, digest in zip(blocks, digests, strict=True):
        pool.remember(block, digest)
    assert pool.lookup(digests) == [] and pool.cached == 0


def test_random_traffic_keeps_the_books_straight() -> None:
    """Many holders taking, sharing and giving back blocks in random order: every block is free or
    held exactly as often as its holders hold it, and all come back in the end."""
    rng = random.Random(7)
    pool = BlockPool(33, 4)
    holders: list[list[int]] = []
    for _ in range(2000):
        action = rng.random()
        if action < 0.45 and pool.free:
            blocks = pool.allocate(rng.randint(1, min(4, pool.free)))
            for block in blocks:
                if rng.random() < 0.5:
                    pool.remember(block, rng.randbytes(32))
            holders.append(blocks)
        elif action < 0.6 and holders:
            shared = rng.choice(holders)[:2]
            pool.share(shared)
            holders.append(list(shared))
        elif holders:
            pool.release(reversed(holders.pop(rng.randrange(len(holders)))))
        pool.check()
    for blocks in holders:
        pool.release(blocks)
    assert pool.free == pool.usable
    pool.check()
