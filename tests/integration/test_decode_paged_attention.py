"""Attention over the paged KV cache in torch operations (``decoding/paged.py``, issue 27): a
prompt chunk attends its request's cached context and itself, whether the chunks of several
requests are attended one by one or packed into one masked ``scaled_dot_product_attention``, and
both equal plain causal attention over each request's whole sequence written out contiguously."""

from __future__ import annotations

from typing import Any

import pytest

from intelrt.decoding.compact import Segment
from intelrt.decoding.paged import PackedPrefill, attend, write


def _case(seed: int, window: int | None, softcap: float | None = None) -> dict[str, Any]:
    """Three requests in a pool of 40 blocks of 4 slots (shuffled block ids), each with a context
    already cached and a new chunk: queries, the pools with every key written, and the expected
    output of plain attention over each request's whole sequence."""
    import torch

    generator = torch.Generator().manual_seed(seed)
    q_heads, kv_heads, dim, block = 4, 2, 8, 4
    pool_k = torch.randn(40, block, kv_heads, dim, generator=generator)
    pool_v = torch.randn(40, block, kv_heads, dim, generator=generator)
    order = (torch.randperm(39, generator=generator) + 1).tolist()
    cached, chunks = [0, 9, 17], [6, 5, 3]  # tokens already in the cache, tokens of this chunk
    segments, positions, queries, expected = [], [], [], []
    start = 0
    for before, count in zip(cached, chunks, strict=True):
        total = before + count
        blocks = [order.pop() for _ in range(-(-total // block))]
        table = torch.zeros((1, 12), dtype=torch.long)
        table[0, :len(blocks)] = torch.tensor(blocks)
        keys = torch.randn(total, kv_heads, dim, generator=generator)
        values = torch.randn(total, kv_heads, dim, generator=generator)
        slots = torch.tensor([blocks[p // block] * block + p % block for p in range(total)])
        write(pool_k, slots, keys)
        write(pool_v, slots, values)
        q = torch.randn(1, q_heads, count, dim, generator=generator)
        where = torch.arange(before, total)
        allowed = torch.arange(total)[None, :] <= where[:, None]
        if window is not None:
            allowed &= torch.arange(total)[None, :] > where[:, None] - window
        expected.append(attend(q, keys.transpose(0, 1)[None], values.transpose(0, 1)[None], allowed[None], 0.3,
                               softcap))
        segments.append(Segment(start, start + count, table, total))
        positions.append(where)
        queries.append(q)
        start += count
    return {"segments": segments, "positions": torch.cat(positions), "q": torch.cat(queries, dim=2),
            "k": pool_k, "v": pool_v, "expected": torch.cat(expected, dim=1)}


@pytest.mark.parametrize("window", [None, 5], ids=["full", "sliding-5"])
@pytest.mark.parametrize("packed, pack_keys, packs", [(False, 16384, 0), (True, 16384, 1), (True, 30, 2),
                                                      (True, 1, 3)], ids=["each", "one-pack", "two-packs", "a-pack-each"])
def test_prefill_chunks_attend_their_own_request_through_its_blocks(window: int | None, packed: bool,
                                                                    pack_keys: int, packs: int) -> None:
    import torch

    case = _case(3, window)
    prefill = PackedPrefill(case["segments"], case["positions"], 4, torch.device("cpu"), torch.float32,
                            packed=packed, pack_keys=pack_keys)
    assert prefill.packed is packed and len(prefill.packs) == packs  # contexts of 6, 14 and 20 keys
    out = prefill.attend(case["q"], case["k"], case["v"], 0.3, window, None)
    torch.testing.assert_close(out, case["expected"], rtol=1e-5, atol=1e-5)


def test_a_soft_capped_prefill_is_attended_in_tiles_and_equals_plain_attention() -> None:
    import torch

    case, plain = _case(4, None, softcap=2.0), _case(4, None)
    prefill = PackedPrefill(case["segments"], case["positions"], 4, torch.device("cpu"), torch.float32, packed=True)
    capped = prefill.attend(case["q"], case["k"], case["v"], 0.3, None, 2.0)
    torch.testing.assert_close(capped, case["expected"], rtol=1e-5, atol=1e-5)
    assert not torch.allclose(capped, plain["expected"], atol=1e-3)  # the cap changed the scores


def test_a_compiled_step_writes_the_cache_in_place() -> None:
    """A compiled step's cache write, then its attention over the pool (every layer's order), writes
    the pool in place: the tokens land in the caller's pool, the attention sees them, and the
    compiled code allocates nothing the size of a pool. Traced as plain ``index_copy_``, torch
    2.11's inductor copied the whole pool to write it (checked by hand with 2.11: two pool-sized
    buffers here; an 8B server's compiled steps ran out of memory on a 776 MiB copy), so
    ``write`` goes through ``intelrt::write_cache`` while compiling."""
    import torch
    from torch._inductor.utils import run_and_get_code

    from intelrt.decoding.paged import PagedCache

    cache = PagedCache(2, 2, 8, torch.float32, torch.device("cpu"), blocks=512, block_size=4)
    slots, table = torch.tensor([5, 9]), torch.tensor([1, 2])

    def step(keys: list[Any], states: Any) -> Any:
        read = []
        for pool in keys:
            write(pool, slots, states)
            read.append(pool[table].sum())
        return torch.stack(read)

    states = torch.randn(2, 2, 8)
    torch._dynamo.reset()
    with torch.inference_mode():
        out, code = run_and_get_code(torch.compile(step, fullgraph=True), cache.keys, states)
    flat = [pool.view(-1, 2, 8) for pool in cache.keys]
    for pool in flat:
        torch.testing.assert_close(pool[slots], states)
    torch.testing.assert_close(out, torch.stack([pool.view(512, 4, 2, 8)[table].sum() for pool in flat]))
    pool_sized = f"({512 * 4}, 2, 8)"
    assert not any(pool_sized in source for source in code), "the compiled step copies a pool to write it"
