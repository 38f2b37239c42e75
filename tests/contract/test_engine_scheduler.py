"""The decode engine's scheduler and KV-cache manager (``decoding/scheduler.py``,
``decoding/kv_manager.py``, issue 38) without a model or torch: admission by free blocks in arrival
order, the token budget shared by decoding rows and prompt chunks, chunked prefill, preemption of
the newest request and its recompute from the prefix cache, prefix sharing, and no request starved
by a stream of others.

The runner's side of the rows (``scheduler.DeviceRows``) is :class:`HostRows`: a table of which
request holds which row, checked at every call, as the device's row buffers would be written. The
device's work is :func:`look`: each prompt chunk computed, each decoding row given one token."""

from __future__ import annotations

from typing import Any

from intelrt.decoding.blocks import BlockPool
from intelrt.decoding.kv_manager import KVCacheManager
from intelrt.decoding.report import GenerationReport
from intelrt.decoding.sampling import DecodeRequest, SampledToken, SamplingParams
from intelrt.decoding.scheduler import (
    EngineRequest,
    EngineStats,
    Progress,
    RequestStatus,
    Scheduler,
)

BLOCK = 4


class HostRows:
    """Which request holds each row, as the runner's buffers would hold them."""

    def __init__(self) -> None:
        self.rows: dict[int, int] = {}
        self.tables: dict[int, list[int]] = {}
        self.prefilled: list[tuple[int, int, int]] = []

    def take_row(self, request: EngineRequest) -> None:
        assert request.row is not None and request.row not in self.rows, "a row is taken twice"
        self.rows[request.row] = request.handle
        self.tables[request.row] = list(request.blocks)

    def move_row(self, source: int, target: int) -> None:
        assert target in self.rows and source in self.rows and source > target
        self.rows[target], self.tables[target] = self.rows[source], self.tables[source]

    def clear_row(self, row: int) -> None:
        assert row == max(self.rows), "only the last row goes idle (the others are filled from it)"
        del self.rows[row], self.tables[row]

    def write_table(self, row: int, start: int, blocks: list[int]) -> None:
        assert len(self.tables[row]) == start, "a table grows at its end"
        self.tables[row] += blocks

    def write_prefilled(self, request: EngineRequest, start: int, end: int) -> None:
        self.prefilled.append((request.handle, start, end))


def engine(blocks: int, rows: int = 8, budget: int = 32, caching: bool = True) -> tuple[Scheduler, HostRows]:
    rows_on_host = HostRows()
    scheduler = Scheduler(KVCacheManager(BlockPool(blocks + 1, BLOCK, caching)), rows, budget, rows_on_host,
                          EngineStats(), GenerationReport("fast", "", 0))
    return scheduler, rows_on_host


def request(handle: int, prompt: list[int] | int, new: int = 4) -> EngineRequest:
    tokens = prompt if isinstance(prompt, list) else [7 + handle * 1000 + i for i in range(prompt)]
    return EngineRequest(handle, DecodeRequest(tuple(tokens), SamplingParams(max_new_tokens=new)), seed=handle)


def look(scheduler: Scheduler, rows: HostRows, progress: Progress | None = None) -> dict[str, Any]:
    """One look as the engine runs it, with the device's work done by hand: the decoding rows' blocks,
    this look's chunks computed, finished prompts given a row and a first token, every other decoding
    row one token (token 1, which is no stop token)."""
    progress = progress or Progress()
    scheduler.ensure_decode_blocks(1)
    decoding = list(scheduler.decoding)
    scheduled = scheduler.schedule()
    for each in decoding:
        if each.status is RequestStatus.DECODING:
            scheduler.accept(each, [SampledToken(1)], 1, progress)
    complete = [r for r, count in scheduled.chunks if scheduler.computed(r, count)]
    for each in complete + scheduled.handed:
        scheduler.take_row(each)
        scheduler.accept(each, [SampledToken(1)], 0, progress)
    scheduler.end_look()
    scheduler.check()
    assert {row: scheduler.decoding[row].handle for row in range(len(scheduler.decoding))} == rows.rows
    assert all(rows.tables[r.row] == r.blocks for r in scheduler.decoding if r.row is not None)
    return {"chunks": [(r.handle, count) for r, count in scheduled.chunks], "progress": progress,
            "decoding": [r.handle for r in decoding]}


def drain(scheduler: Scheduler, rows: HostRows, limit: int = 500) -> list[dict[str, Any]]:
    looks = []
    while scheduler.requests:
        looks.append(look(scheduler, rows))
        assert len(looks) < limit, "the engine stopped making progress"
    return looks


def test_requests_are_let_in_by_free_blocks_in_arrival_order() -> None:
    """A request too large for the free blocks waits, and so do the smaller ones behind it (no
    overtaking); once blocks come back they are let in in order."""
    scheduler, rows = engine(blocks=6, budget=64)
    big, small = request(1, 12, new=8), request(2, 3)  # 12 + 7 tokens: 5 blocks; then 1 block
    scheduler.add(big)
    scheduler.add(request(3, 16))  # 4 blocks for its prompt: cannot join while `big` holds 5 of 6
    scheduler.add(small)
    first = look(scheduler, rows)
    assert first["chunks"] == [(1, 12)], "only the first request fits; the rest wait in order"
    assert [r.handle for r in scheduler.waiting] == [3, 2], "the small request does not overtake the large one"
    looks = drain(scheduler, rows)
    admitted = [handle for each in [first, *looks] for handle, _ in each["chunks"]]
    assert admitted.index(3) < admitted.index(2)
    assert scheduler.kv.used == 0 and not scheduler.decoding


def test_decoding_rows_take_their_token_from_the_step_budget_and_prompts_are_chunked() -> None:
    """With a budget of 8 tokens, 3 decoding rows leave 5 for prompts: a 20-token prompt is prefilled
    in chunks over several looks while the rows keep decoding; a prompt already being prefilled
    goes before newcomers."""
    scheduler, rows = engine(blocks=64, budget=8)
    for handle in (1, 2, 3):
        scheduler.add(request(handle, 2, new=30))
    look(scheduler, rows)  # three short prompts: 6 tokens
    assert len(scheduler.decoding) == 3
    scheduler.add(request(4, 20, new=2))
    scheduler.add(request(5, 2, new=2))
    chunks = []
    while any(r.handle == 4 for r in [*scheduler.waiting, *scheduler.running]) and \
            not any(r.handle == 4 for r in scheduler.decoding):
        seen = look(scheduler, rows)
        assert sum(count for _, count in seen["chunks"]) + len(seen["decoding"]) <= 8, "the budget holds"
        assert set(seen["decoding"]) >= {1, 2, 3}, "the decoding rows step while the long prompt is chunked"
        chunks += seen["chunks"]
    own = [count for handle, count in chunks if handle == 4]
    assert sum(own) == 20 and len(own) >= 4, own
    assert {handle for handle, _ in chunks} == {4}, "the request being prefilled goes on before a newcomer is let in"
    assert look(scheduler, rows)["chunks"] == [(5, 2)], "then the newcomer"


def test_out_of_blocks_the_newest_request_is_preempted_and_recomputed_from_the_prefix_cache() -> None:
    """Two requests grow into a cache too small for both: the newest gives its blocks back, waits
    first in line, and is recomputed from its tokens so far — its full blocks found again in the
    prefix cache where nobody took them — and both get all their tokens."""
    scheduler, rows = engine(blocks=9, budget=64)
    old, new = request(1, 8, new=14), request(2, 8, new=14)  # each ends at 21 tokens: 6 blocks; 12 > 9
    scheduler.add(old)
    scheduler.add(new)
    looks = drain(scheduler, rows)
    assert scheduler.stats.preemptions >= 1
    assert old.generated == 14 and new.generated == 14
    preempted = next(i for i, each in enumerate(looks) if 2 not in each["decoding"] and i > 1)
    assert any(handle == 2 for each in looks[preempted:] for handle, _ in each["chunks"]), "recomputed later"
    assert scheduler.kv.stats.hit_tokens > 0, "the recompute found its prompt's blocks in the prefix cache"
    assert scheduler.kv.used == 0


def test_requests_sharing_a_prefix_share_its_blocks() -> None:
    """A second request whose prompt starts with the first's full blocks holds those blocks too (not
    copies): its prefill starts after them, and they are given back only when both have ended."""
    scheduler, rows = engine(blocks=32)
    shared = list(range(100, 112))  # three full blocks
    first = request(1, [*shared, 5], new=6)
    scheduler.add(first)
    look(scheduler, rows)
    second = request(2, [*shared, 6, 7], new=2)
    scheduler.add(second)
    seen = look(scheduler, rows)
    assert seen["chunks"] == [(2, 2)], "only the tokens after the shared blocks are computed"
    assert second.blocks[:3] == first.blocks[:3]
    assert all(scheduler.kv.pool.refs(b) == 2 for b in first.blocks[:3])
    drain(scheduler, rows)
    assert scheduler.kv.used == 0 and scheduler.kv.stats.hit_tokens == 12


def test_prefix_caching_off_shares_nothing() -> None:
    scheduler, rows = engine(blocks=32, caching=False)
    shared = list(range(100, 112))
    scheduler.add(request(1, [*shared, 5], new=6))
    look(scheduler, rows)
    scheduler.add(request(2, [*shared, 6], new=2))
    assert look(scheduler, rows)["chunks"] == [(2, 13)]


def test_a_long_request_is_not_starved_by_a_stream_of_short_ones() -> None:
    """A long prompt queued among many short requests arriving every look is let in and finishes in
    a bounded number of looks: admission is first come, first served, and a prompt being prefilled
    keeps its share of the budget."""
    scheduler, rows = engine(blocks=48, rows=4, budget=16)
    handle = 0

    def arrive() -> None:
        nonlocal handle
        handle += 1
        scheduler.add(request(handle, 3, new=3))

    for _ in range(3):
        arrive()
    scheduler.add(long := request(999, 60, new=4))
    looks = 0
    while long.status is not RequestStatus.FINISHED and looks < 200:
        arrive()
        look(scheduler, rows)
        looks += 1
    assert long.status is RequestStatus.FINISHED and long.generated == 4, f"still {long.status} after {looks} looks"
    assert looks < 40, looks


def test_out_of_memory_halves_the_budget_or_the_rows_and_calm_restores_them() -> None:
    scheduler, rows = engine(blocks=64, rows=8, budget=32)
    for handle in range(1, 7):
        scheduler.add(request(handle, 3, new=200))
    look(scheduler, rows)
    progress = Progress()
    scheduler.prefill_ran_out([(scheduler.running[0], 20), (scheduler.running[1], 12)], MemoryError("x"), progress)
    assert scheduler.token_budget == 16 and not progress.failed
    scheduler.decode_ran_out(MemoryError("x"), progress)
    assert len(scheduler.decoding) == 3 and scheduler.row_cap == 3 and scheduler.stats.preemptions == 3
    assert [r.handle for r in scheduler.waiting][:3] == [4, 5, 6], "the newest half waits first in line"
    for _ in range(70):
        look(scheduler, rows)
    assert scheduler.token_budget == 32 and scheduler.row_cap >= 6, "a calm engine gets its budget and rows back"


def test_a_request_retired_while_waiting_prefilling_or_decoding_gives_everything_back() -> None:
    scheduler, rows = engine(blocks=16, budget=8)
    for handle, length in ((1, 3), (2, 12), (3, 4)):
        scheduler.add(request(handle, length, new=10))
    look(scheduler, rows)  # 1 decodes, 2 is being prefilled (8 - ... tokens), 3 waits or is prefilling
    statuses = {r.handle: r.status for r in scheduler.requests.values()}
    assert RequestStatus.DECODING in statuses.values()
    for handle in (3, 2, 1):
        scheduler.retire(handle)
        scheduler.check()
    assert not scheduler.requests and scheduler.kv.used == 0 and not rows.rows
