"""What the decode engine runs next: vLLM v1's scheduler (``vllm/v1/core/sched/scheduler.py``,
``Scheduler.schedule``), on one thread, without torch.

Each *look* (the host's turn between device work) first gives every decoding row the blocks its
next steps write — taking them back from the newest requests when none are free (they are
*preempted*, to be recomputed later: vLLM's RECOMPUTE preemption) — then spends what is left of the
step's token budget on prompt chunks: requests already prefilling first, then waiting ones in order
while their blocks are free and a row is left (admission by free blocks; the rest wait, and so do
those behind them: first come, first served). A prompt longer than the budget is prefilled in
chunks over several looks, between which the decoding rows keep getting tokens (chunked prefill):
one long prompt never stalls the others. After an out-of-memory error the budget or the rows are
halved, and raised again once the engine has been calm for :data:`CALM_LOOKS` looks.

The scheduler decides *what* runs; ``kv_manager.py`` where its keys and values live; the runner
(``runner.py``) *how* it runs on the device, told of every row the scheduler hands out, moves or
frees (:class:`DeviceRows`). Requests are :class:`EngineRequest` objects in a :class:`RequestStatus`.
"""

from __future__ import annotations

import enum
import logging
from collections import deque
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Protocol

from .blocks import block_digests
from .kv_manager import KVCacheManager
from .sampling import MAX_LOGPROBS, DecodeRequest, SampledToken

if TYPE_CHECKING:
    from .lora import EngineAdapter
    from .report import GenerationReport

log = logging.getLogger(__name__)

CALM_LOOKS = 64
"""Looks without an out-of-memory error after which a reduced row cap or token budget is raised again."""


class RequestStatus(enum.Enum):
    """Where a request is in the engine."""

    WAITING = "waiting"
    """Queued (or preempted, to be recomputed): holds no blocks and no row."""
    PREFILLING = "prefilling"
    """Let in: holds blocks; its prompt (and, after a preemption, its tokens so far) being computed."""
    DECODING = "decoding"
    """Holds a row: one new token per step."""
    FINISHED = "finished"
    """Ended, failed or retired: holds nothing."""


class EngineRequest:
    """The engine's view of one request: its tokens, blocks, row and status."""

    def __init__(self, handle: int, request: DecodeRequest, seed: int, adapter: EngineAdapter | None = None) -> None:
        self.handle, self.request, self.params, self.seed = handle, request, request.params, seed
        self.adapter_key = adapter.key if adapter is not None else None
        """The PEFT name of the LoRA adapter it decodes with (``None``: the base model)."""
        self.prefilled = request.prefilled
        self.salt = adapter.salt if adapter is not None else request.prefilled.digest if request.prefilled else None
        """Where its blocks' digest chain starts: an adapter's keys and values differ from the base's, and a
        handed prefill's from those of the same token ids with other images."""
        self.tokens = list(request.prompt)
        self.prompt_length = len(request.prompt)
        self.generated = 0
        self.computed = 0
        """Tokens whose keys and values are in the cache."""
        self.blocks: list[int] = []
        self.digests: list[bytes] = []
        """Digests of the full blocks of ``tokens`` (computed as they fill)."""
        self.remembered = 0
        """Blocks given to the prefix cache."""
        self.row: int | None = None
        self.status = RequestStatus.WAITING
        self.stops = frozenset(self.params.stop_token_ids)

    @property
    def last_written(self) -> int:
        """One past the last position whose key and value may ever be written: every token but
        the last one it may generate."""
        return self.prompt_length + self.params.max_new_tokens - 1

    def full_digests(self, blocks: int, size: int) -> list[bytes]:
        """Digests of its first ``blocks`` full blocks (computed the first time asked)."""
        if len(self.digests) < blocks:
            start = len(self.digests) * size
            parent = self.digests[-1] if self.digests else self.salt
            self.digests += block_digests(self.tokens[start:blocks * size], size, parent)
        return self.digests[:blocks]


@dataclass
class Progress:
    """What one look produced: new tokens per request handle, the requests that ended
    (``stop``: a stop token, which is included, or the constraint's end; ``length``:
    ``max_new_tokens``) and those that cannot be served (``failed``: the reason) — ended and failed
    requests are already gone from the engine."""

    outputs: dict[int, list[SampledToken]] = field(default_factory=dict)
    finished: dict[int, str] = field(default_factory=dict)
    failed: dict[int, str] = field(default_factory=dict)

    @property
    def tokens(self) -> dict[int, list[int]]:
        return {handle: [t.token_id for t in sampled] for handle, sampled in self.outputs.items()}


@dataclass
class EngineStats:
    """Counts since the engine was made (a server's metrics read them)."""

    preemptions: int = 0
    oom_retries: int = 0
    steps: int = 0
    prefill_tokens: int = 0
    looks: int = 0
    mixed_steps: int = 0
    """Steps that carried decoding rows and prompt chunks in one forward."""
    chunk_steps: int = 0
    """Steps that carried prompt chunks, with decoding rows or without (``prefill_tokens`` over this is
    how full they were)."""
    look_seconds: float = 0.0
    """Wall time spent in looks (``InflightBatch.step``)."""
    wait_seconds: float = 0.0
    """Of that, the host waiting for the device's results (the rest is the host's own work: scheduling,
    inputs, launches, handing out tokens)."""
    mixed_device_seconds: float = 0.0
    """Device time of the steps that carried prompt chunks (timed by device events; 0 on the CPU)."""
    decode_device_seconds: float = 0.0
    """Device time of the decode-only steps (timed by device events; 0 on the CPU)."""
    compiles_after_warmup: int = 0
    """Frames torch compiled during looks after ``warm_up`` (a shape the warm-up did not cover: each is
    seconds to minutes a request waits; a server should see none)."""
    warm_up_seconds: float = 0.0
    """Wall time of ``warm_up`` (a server's start after its memory profile)."""
    warm_up_compiles: int = 0
    """Frames torch compiled during ``warm_up`` (each graph of the steps; most of its time)."""
    warm_up_captures: int = 0
    """Steps captured in device graphs by ``warm_up`` (every row bucket and sampler kind, every flat size)."""


class DeviceRows(Protocol):
    """What the runner does when the scheduler hands out, moves or frees a row (``runner.py``)."""

    def take_row(self, request: EngineRequest) -> None:
        """``request.row`` is now ``request``'s: its table, stop ids and sampling parameters."""

    def move_row(self, source: int, target: int) -> None:
        """Row ``source``'s state moves to row ``target`` (a freed row is filled from the last)."""

    def clear_row(self, row: int) -> None:
        """Row ``row`` is idle."""

    def write_table(self, row: int, start: int, blocks: list[int]) -> None:
        """Row ``row`` holds ``blocks`` from its table's entry ``start`` on."""

    def write_prefilled(self, request: EngineRequest, start: int, end: int) -> None:
        """Write ``request``'s handed prefill keys and values of positions ``start .. end - 1``."""


@dataclass
class Scheduled:
    """A look's plan: prompt chunks to compute (request, tokens) and requests admitted whose whole
    prompt was a handed prefill (their first token comes from its logits)."""

    chunks: list[tuple[EngineRequest, int]]
    handed: list[EngineRequest]


class Scheduler:
    """Queues, rows, admission, chunking and preemption of the engine's requests; see the module.

    ``kv``: the blocks; ``rows``: decoding rows at most; ``token_budget``: tokens a step computes;
    ``device``: the runner's side of the rows; ``stats``/``report``: where counts go."""

    def __init__(self, kv: KVCacheManager, rows: int, token_budget: int, device: DeviceRows, stats: EngineStats,
                 report: GenerationReport) -> None:
        self.kv, self.rows, self.device, self.stats, self.report = kv, rows, device, stats, report
        self.requests: dict[int, EngineRequest] = {}
        self.waiting: deque[EngineRequest] = deque()
        self.running: list[EngineRequest] = []
        """Prefilling and decoding requests, in the order they were admitted (the newest is preempted first)."""
        self.decoding: list[EngineRequest] = []
        """Decoding requests by row: ``decoding[r].row == r``."""
        self.max_token_budget = token_budget
        self.token_budget = token_budget
        self.row_cap = rows
        self._calm = 0

    # -- joining and leaving --------------------------------------------------------------------------
    def add(self, request: EngineRequest) -> None:
        """Queue ``request`` (it joins at the next looks, after those queued before it)."""
        self.requests[request.handle] = request
        self.waiting.append(request)

    def retire(self, handle: int) -> bool:
        """Drop request ``handle`` wherever it is (its client left): blocks and row freed; False when
        it was not in the engine."""
        request = self.requests.pop(handle, None)
        if request is None:
            return False
        if request.status is RequestStatus.WAITING:
            self.waiting.remove(request)
        else:
            self._release(request)
            self.running.remove(request)
        request.status = RequestStatus.FINISHED
        return True

    # -- a look's plan --------------------------------------------------------------------------------
    def ensure_decode_blocks(self, steps: int) -> None:
        """Every decoding row holds the blocks its next ``steps`` steps write (oldest first)."""
        for request in list(self.running):
            if request.status is not RequestStatus.DECODING or request not in self.running:
                continue
            self._grow(request, min(request.computed + steps, request.last_written))

    def schedule(self) -> Scheduled:
        """This look's prompt chunks: prefilling requests first, then waiting ones while blocks and
        rows allow, within the token budget left by the decoding rows."""
        budget = self.token_budget - len(self.decoding)
        chunks: list[tuple[EngineRequest, int]] = []
        handed: list[EngineRequest] = []
        for request in list(self.running):
            if budget <= 0:
                return Scheduled(chunks, handed)
            if request.status is not RequestStatus.PREFILLING or request not in self.running:
                continue
            count = min(len(request.tokens) - request.computed, budget)
            if self._grow(request, request.computed + count):
                chunks.append((request, count))
                budget -= count
        while budget > 0 and self.waiting and len(self.running) < self.row_cap:
            request = self.waiting[0]
            found = self.kv.cached_prefix(request)
            start = len(found) * self.kv.block_size
            # the forward starts after a handed prefill's keys, which are written, not computed
            first = request.prompt_length if request.prefilled is not None and start < request.prompt_length \
                else start
            count = min(len(request.tokens) - first, budget)
            need = self.kv.blocks_for(first + count) - len(found)
            if not self.kv.admits(found, need):
                break  # admission by free blocks: it waits, and so do those behind it
            self.waiting.popleft()
            self.report.prefix_hit_tokens += self.kv.admit(request, found, need)
            request.status = RequestStatus.PREFILLING
            self.running.append(request)
            if first > start:
                self.device.write_prefilled(request, start, first)
                request.computed = first
                self.kv.remember(request)
            if count:
                chunks.append((request, count))
                budget -= count
            else:
                handed.append(request)  # its first token comes from the prefill's logits
        return Scheduled(chunks, handed)

    def _grow(self, request: EngineRequest, tokens: int) -> bool:
        """Give ``request`` the blocks for its first ``tokens`` token slots, preempting the newest
        other running requests when none are free; False when it is itself the newest left (then
        it is preempted too, unless it waits already)."""
        need = self.kv.missing(request, tokens)
        if need <= 0:
            return True
        while self.kv.free < need:
            victim = next((r for r in reversed(self.running) if r is not request), None)
            if victim is None or self.running.index(victim) < self.running.index(request):
                self.preempt(request)
                return False
            self.preempt(victim)
        start = len(request.blocks)
        new = self.kv.extend(request, need)
        if request.row is not None:
            self.device.write_table(request.row, start, new)
        return True

    # -- rows ---------------------------------------------------------------------------------------
    def take_row(self, request: EngineRequest) -> int:
        """The next free row is ``request``'s (its prompt is complete)."""
        row = len(self.decoding)
        self.decoding.append(request)
        request.row, request.status = row, RequestStatus.DECODING
        self.device.take_row(request)
        return row

    def _free_row(self, row: int) -> None:
        """Row ``row`` is free: the last decoding row moves into it, and the last row goes idle."""
        last = len(self.decoding) - 1
        leaving = self.decoding[row]
        if row != last:
            self.device.move_row(last, row)
            moved = self.decoding[last]
            self.decoding[row], moved.row = moved, row
        self.decoding.pop()
        leaving.row = None
        self.device.clear_row(last)

    def _release(self, request: EngineRequest) -> None:
        """Give back ``request``'s blocks (its tail first) and its row."""
        if request.row is not None:
            self._free_row(request.row)
        self.kv.release(request)

    def preempt(self, request: EngineRequest) -> None:
        """Take ``request``'s blocks and row back; it waits first in line, to be recomputed (its
        prompt and the tokens it generated so far prefilled again, from the prefix cache where
        its full blocks are still there)."""
        self._release(request)
        self.running.remove(request)
        request.computed, request.status = 0, RequestStatus.WAITING
        self.waiting.appendleft(request)
        self.stats.preemptions += 1
        self.report.preemptions += 1
        log.info("intelrt engine: request %d preempted (recomputed later): the KV cache is full", request.handle)

    # -- tokens -------------------------------------------------------------------------------------
    def computed(self, request: EngineRequest, count: int) -> bool:
        """``count`` more of ``request``'s tokens had their keys and values computed (a prompt
        chunk); True when its prompt is now complete."""
        request.computed += count
        self.kv.remember(request)
        return request.computed == len(request.tokens)

    def accept(self, request: EngineRequest, sampled: list[SampledToken], ran: int, progress: Progress) -> None:
        """Hand out ``request``'s new tokens (up to its end), update its state; ``ran``: the decode
        steps of this look (0: the token came from its prefill)."""
        params = request.params
        kept: list[SampledToken] = []
        reason: str | None = None
        for token in sampled:
            kept.append(token)
            request.generated += 1
            if params.constraint is not None:
                params.constraint.advance(token.token_id)
                if params.constraint.is_terminated():
                    reason = "stop"
                    break
            if token.token_id in request.stops:
                reason = "stop"
                break
            if request.generated >= params.max_new_tokens:
                reason = "length"
                break
        if ran:
            request.computed += len(kept)  # each accepted token's step wrote its input's key and value
        request.tokens += [t.token_id for t in kept]
        if params.logprobs is None:
            kept = [SampledToken(t.token_id) for t in kept]
        elif params.logprobs < MAX_LOGPROBS:
            kept = [SampledToken(t.token_id, t.logprob, t.top_logprobs[:params.logprobs]) for t in kept]
        progress.outputs.setdefault(request.handle, []).extend(kept)
        if reason is not None:
            progress.finished[request.handle] = reason
            self.finish(request)
        else:
            self.kv.remember(request)

    def finish(self, request: EngineRequest) -> None:
        self.requests.pop(request.handle, None)
        if request in self.running:
            self._release(request)
            self.running.remove(request)
        request.status = RequestStatus.FINISHED

    def fail(self, request: EngineRequest, message: str, progress: Progress) -> None:
        log.error("intelrt engine: request %d failed: %s", request.handle, message)
        progress.failed[request.handle] = message
        self.finish(request)

    # -- out of memory ------------------------------------------------------------------------------
    def prefill_ran_out(self, chunks: Sequence[tuple[EngineRequest, int]], exc: BaseException,
                        progress: Progress) -> None:
        """A step's prompt chunks ran out of device memory: halve the token budget and retry at the
        next look; a chunk of one block that still does not fit fails its request."""
        self._ran_out()
        smallest = min(count for _, count in chunks)
        if len(chunks) > 1 or smallest > self.kv.block_size:
            self.token_budget = max(self.kv.block_size, min(self.token_budget, sum(c for _, c in chunks)) // 2)
            log.warning("intelrt engine: a prefill of %d tokens ran out of device memory; retrying with at most "
                        "%d tokens per step", sum(c for _, c in chunks), self.token_budget)
            return
        message = (f"out of device memory prefilling {smallest} tokens even alone ({type(exc).__name__}: "
                   f"{str(exc)[:200]})")
        self.fail(chunks[0][0], message, progress)

    def decode_ran_out(self, exc: BaseException, progress: Progress) -> None:
        """A decode step ran out of device memory: the newest half of the decoding rows are
        preempted (recomputed later) and fewer rows are let in until the engine has been calm."""
        self._ran_out()
        busy = len(self.decoding)
        if busy <= 1:
            if self.decoding:
                self.fail(self.decoding[0], f"out of device memory decoding even one row ({type(exc).__name__}: "
                                            f"{str(exc)[:200]})", progress)
            return
        keep = busy // 2
        self.row_cap = max(1, keep)
        log.warning("intelrt engine: a decode step of %d rows ran out of device memory; %d rows preempted, at most "
                    "%d decode until the batch is calm", busy, busy - keep, self.row_cap)
        # newest first, as vLLM preempts: each joins the front of the queue, so the oldest rejoins first
        for request in reversed(sorted(self.decoding, key=self.running.index)[keep:]):
            self.preempt(request)

    def _ran_out(self) -> None:
        self.stats.oom_retries += 1
        self.report.oom_retries += 1
        self._calm = 0

    def end_look(self) -> None:
        """A look ended: after :data:`CALM_LOOKS` calm ones, a reduced row cap or budget doubles."""
        self._calm += 1
        if self._calm >= CALM_LOOKS and (self.row_cap < self.rows or self.token_budget < self.max_token_budget):
            self.row_cap = min(self.rows, self.row_cap * 2)
            self.token_budget = min(self.max_token_budget, self.token_budget * 2)
            self._calm = 0

    def check(self) -> None:
        """Raise ``AssertionError`` when the bookkeeping disagrees with itself (tests)."""
        self.kv.check(self.running)
        assert all(r.row == row for row, r in enumerate(self.decoding))
        assert all(r.status is RequestStatus.WAITING for r in self.waiting)
        assert all(r.status in (RequestStatus.PREFILLING, RequestStatus.DECODING) for r in self.running)
