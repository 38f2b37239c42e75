"""In-flight batching on the fast decode engine: requests join a running batch between steps and
leave it when they are done.

The batch is ``rows`` rows over one KV cache of ``length`` slots per row, shared in time: every
step writes each row's token at the same cache slot, as the engine's sessions do (the compact
step's cache and transformers' ``StaticCache`` both work this way). A request joins at the
current slot ``S``: its prompt goes through the engine's own prompt pass on a scratch session
(compiled and captured like an offline call's), then its keys and values are copied into a free
row at the slots just before ``S``, which the row's key mask opens from its first prompt token on.
Its positions are its own (``0 ..``), so the row computes what a lone ``generate`` computes, and
greedy output per request equals :meth:`Loaded.generate`'s.

Busy rows are always the first ones: a row that finishes is freed and the last busy row moves
into its place. A step therefore runs only the smallest *row bucket* (a power of two) that holds
the busy rows — for the compact step each bucket is the step over the first rows of the same
buffers, compiled once for every row count and captured in a device graph per bucket at warm-up
(the model's own forward keeps one bucket of all rows: transformers' cache has no row views). When
the shared slot nears the end of the cache, or every busy row began well after slot 0, the cache
moves back by the start of the earliest busy row (a *rebase*), so the step's attention covers only
what busy rows need.

Sampling is per row (temperature, top-p, a seed): the noise of each token comes from a hash of the
row's seed and position, so a seeded request samples the same tokens whatever else is in the batch.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from .engine import (
    CaptureFailed,
    DecodeReport,
    FastDecoder,
    StepForward,
    _collector_paused,
    _Session,
    outside_top_p_dropped,
)
from .keywords import DecodeOptions
from .tuning import DecodeTuning

log = logging.getLogger(__name__)

_SCRATCH_OPTIONS = DecodeOptions(1, False, 1.0, 0, 1.0, (), 0)
"""The scratch sessions only run prompt passes: their own sampling settings are never used."""
REBASE_MIN_SLOTS = 128
"""An early rebase (before the cache is full) moves at least this many slots: each costs a copy of
the busy rows' caches, worth it only when it shortens every later step's attention by as much."""
_MASK32 = 0xFFFFFFFF


class InflightUnavailable(Exception):
    """This model's decode step cannot take rows that join and leave (the reason is the message)."""


@dataclass(frozen=True)
class RowRequest:
    """What one row decodes: a prompt, at most ``max_new_tokens`` new tokens (ending early at an
    id of ``eos_token_ids``), greedy (``temperature`` 0) or sampled with ``temperature``,
    ``top_p`` and ``seed``."""

    prompt: tuple[int, ...]
    max_new_tokens: int
    eos_token_ids: tuple[int, ...] = ()
    temperature: float = 0.0
    top_p: float = 1.0
    seed: int = 0

    def __post_init__(self) -> None:
        if not self.prompt:
            raise ValueError("RowRequest.prompt is empty")
        if self.max_new_tokens < 1:
            raise ValueError(f"RowRequest.max_new_tokens must be >= 1, got {self.max_new_tokens}")
        if self.temperature < 0 or not 0 < self.top_p <= 1:
            raise ValueError(f"RowRequest: temperature {self.temperature} must be >= 0 and top_p {self.top_p} in (0, 1]")

    @property
    def greedy(self) -> bool:
        return self.temperature == 0


@dataclass
class Progress:
    """What one ``admit`` or ``step`` produced: new tokens per row handle, and the rows that ended
    (``stop``: an end-of-sequence token, which is included; ``length``: ``max_new_tokens``) — those
    rows are already freed."""

    tokens: dict[int, list[int]] = field(default_factory=dict)
    finished: dict[int, str] = field(default_factory=dict)


@dataclass
class _Row:
    handle: int
    request: RowRequest
    start: int
    """The cache slot of its first prompt token."""
    produced: int = 0

    def end(self) -> int:
        """One past the last cache slot this row may write (prompt, then every new token but the last)."""
        return self.start + len(self.request.prompt) + self.request.max_new_tokens - 1


class InflightBatch:
    """Rows that join and leave a running decode batch; see the module's docstring.

    ``decoder``: the model's :class:`FastDecoder` (its plan decision, tuning, compiled functions
    and capturer). ``rows``: the most requests decoding at once; ``length``: cache slots per row,
    the longest prompt plus new tokens one request may have. Not thread-safe: one thread drives it
    (``admit``, ``step``, ``retire``)."""

    def __init__(self, decoder: FastDecoder, rows: int, length: int, device: Any) -> None:
        import torch

        if rows < 1 or length < 2:
            raise ValueError(f"an in-flight batch needs rows >= 1 and length >= 2, got {rows} and {length}")
        self.decoder, self.rows, self.length, self.device = decoder, rows, length, device
        self.tuning = decoder.tuning
        decoder.prepare()  # the compact step built (or the reason it is not)
        long = {"dtype": torch.long, "device": device}
        self.token = torch.zeros((rows, 1), **long)
        self.position = torch.zeros((rows, 1), **long)
        self.slot = torch.zeros((1,), **long)
        self.index = torch.zeros((1,), **long)
        self.mask = torch.ones((rows, length), **long)
        self.out = torch.zeros((rows, self.tuning.inflight_steps), **long)
        self.temperature = torch.ones((rows, 1), dtype=torch.float32, device=device)
        self.top_p = torch.ones((rows, 1), dtype=torch.float32, device=device)
        self.greedy = torch.ones((rows,), dtype=torch.bool, device=device)
        self.seed = torch.zeros((rows, 1), **long)
        self.report = DecodeReport(decoder.graphs, decoder.compile_backend, decoder.step,
                                   step_reason=decoder.step_reason, warmup=decoder.warmup)
        self._build_forwards()
        self._rows: list[_Row] = []
        self._slot = 0
        self._handles = 0
        self._scratch: dict[int, _Session] = {}
        self._warm = False
        self.rebases = 0

    # -- set-up ---------------------------------------------------------------------------
    def _build_forwards(self) -> None:
        """One forward per row bucket over shared cache tensors (the compact step), or one forward
        of every row (the model's own); their captured graphs are dropped."""
        decoder, rows, length, device = self.decoder, self.rows, self.length, self.device
        self._replays: dict[tuple[int, bool], Callable[[], object]] = {}
        if decoder.step == "compact" and decoder.compact is not None:
            keys, values = decoder.compact.new_cache(rows, length, device)
            self.buckets = _buckets(rows)
            self._forwards: dict[int, StepForward] = {
                b: decoder.new_forward(b, length, device, cache=([k[:b] for k in keys], [v[:b] for v in values]),
                                       any_rows=True) for b in self.buckets}
        else:
            forward = decoder.new_forward(rows, length, device)
            blocker = forward.inflight_blocker()
            if blocker is not None:
                raise InflightUnavailable(blocker)
            self.buckets = [rows]
            self._forwards = {rows: forward}
        self.report.attention_kernel = bool(getattr(self._forwards[self.buckets[0]], "fused_attention", False))

    def warm_up(self) -> None:
        """Compile and capture the step of every row bucket, greedy and sampling, and one prompt
        pass, so that no request waits for a compiler. A capture that fails turns device graphs
        off, a compilation that fails turns compiling off (as in ``FastDecoder.decode``)."""
        import torch

        for _ in range(3):
            try:
                with torch.inference_mode():
                    self._warm_up()
                return
            except CaptureFailed as failed:
                self.decoder.disable(f"graph capture ({self.decoder.graphs})", failed.__cause__ or failed)
            except Exception as exc:
                if not self.decoder.compile_backend:
                    raise
                self.decoder.disable(f"compile ({self.decoder.compile_backend})", exc)
            self._scratch.clear()
            self._build_forwards()
        with torch.inference_mode():
            self._warm_up()

    def _warm_up(self) -> None:
        if self._rows:
            raise RuntimeError("warm_up() runs before any request joins")
        with self.decoder.compiler_settings():
            for bucket in self.buckets:
                for sampling in (False, True):
                    self._set_slot(0)
                    self.index.zero_()
                    step = self._step_fn(bucket, sampling)
                    if self.decoder.graphs:
                        self._replays[bucket, sampling] = self.decoder.capture(step, self.tuning.warmup_steps,
                                                                               self.report)
                    else:
                        step()
        self._prefill([(0,)], 1, self._widths(1, 1)[0])
        if admission_rows(self.rows, self.tuning) > 1:
            # A second shape: a compiled prompt pass recompiles for any shape here, not at a request.
            longer = self.tuning.prompt_bucket + 1
            self._prefill([(0,) * longer, (0,)], 2, self._widths(longer, 2)[0])
        for tensor in self._forwards[self.buckets[-1]].kv():
            tensor.zero_()  # what warm-up wrote is never read, but zeros cannot turn into NaN
        self._set_slot(0)
        self.report.notes = list(self.decoder.notes)
        self._warm = True

    # -- the device work ---------------------------------------------------------------------
    def _step_fn(self, bucket: int, sampling: bool) -> Callable[[], None]:
        """One decode step of the first ``bucket`` rows (device work only: what a graph records)."""
        forward = self._forwards[bucket]
        token, position, mask = self.token[:bucket], self.position[:bucket], self.mask[:bucket]
        out, slot, index = self.out[:bucket], self.slot, self.index
        params = self._params(0, bucket)

        def step() -> None:
            logits = forward.logits(token, mask, position, slot)
            chosen = choose(logits, *params, position, sampling)
            out.index_copy_(1, index, chosen[:, None])
            token.copy_(chosen[:, None])
            position.add_(1)
            slot.add_(1)
            index.add_(1)

        return step

    def _params(self, first: int, end: int) -> tuple[Any, Any, Any, Any]:
        return (self.greedy[first:end], self.temperature[first:end], self.top_p[first:end],
                self.seed[first:end])

    def _set_slot(self, slot: int) -> None:
        self._slot = slot
        self.slot.fill_(slot)
        self._forwards[self.buckets[-1]].set_slot(slot)

    def _kv(self) -> list[Any]:
        return self._forwards[self.buckets[-1]].kv()

    def _scratch_session(self, rows: int) -> _Session:
        session = self._scratch.get(rows)
        if session is None:
            forward = self.decoder.new_forward(rows, self.length, self.device)
            session = self._scratch[rows] = _Session(rows, self.length, _SCRATCH_OPTIONS, self.device, forward)
        return session

    def _prefill(self, prompts: Sequence[Sequence[int]], rows: int, width: int) -> tuple[Any, _Session]:
        """The prompt pass of ``prompts``, left-padded to ``width``, on a scratch session of
        ``rows`` rows (extra rows repeat the first prompt); returns the real rows' logits and the
        session."""
        import torch

        from .generation import left_pad

        captured = width % self.tuning.prompt_bucket == 0 and self.decoder.captures_prompt(rows, width)
        padded = [list(p) for p in prompts] + [list(prompts[0])] * (rows - len(prompts))
        ids, mask = left_pad(padded, 0, self.device)
        if width > ids.shape[1]:
            ids = torch.nn.functional.pad(ids, (width - ids.shape[1], 0), value=0)
            mask = torch.nn.functional.pad(mask, (width - mask.shape[1], 0), value=0)
        session = self._scratch_session(rows)
        logits = self.decoder.prompt_pass(session, ids, mask, captured, self.report)
        return logits[:len(prompts)], session

    def _widths(self, longest: int, rows: int) -> list[int]:
        """Widths to pad prompts of at most ``longest`` tokens to, best first: a multiple of the
        prompt bucket where that pass is captured, else none."""
        bucketed = -(-longest // self.tuning.prompt_bucket) * self.tuning.prompt_bucket
        if bucketed != longest and self.decoder.captures_prompt(rows, bucketed):
            return [bucketed, longest]
        return [longest]

    # -- the host's view -----------------------------------------------------------------------
    @property
    def busy(self) -> int:
        """Rows decoding now."""
        return len(self._rows)

    def admissible(self, waiting: Sequence[RowRequest]) -> int:
        """How many of the ``waiting`` requests (in order) can join now, together."""
        count = 0
        while (count < min(len(waiting), self.tuning.inflight_admit_rows)
               and self.can_admit(waiting[:count + 1])):
            count += 1
        return count

    def fits_alone(self, prompt_tokens: int, max_new_tokens: int) -> bool:
        """Whether such a request fits this batch's cache at all (in an empty batch)."""
        return prompt_tokens + max_new_tokens - 1 <= self.length and prompt_tokens < self.length

    def can_admit(self, requests: Sequence[RowRequest]) -> bool:
        """Whether these requests can join the batch now (free rows and cache room)."""
        return self._placement(requests) is not None

    def _placement(self, requests: Sequence[RowRequest]) -> tuple[int, int] | None:
        """(how far to move the cache back — negative: forward — before they join, the width their
        prompts are padded to), or ``None`` when they do not fit now."""
        if not requests or self.busy + len(requests) > self.rows:
            return None
        for width in self._widths(max(len(r.prompt) for r in requests), _bucket_of(len(requests), self.rows)):
            # The padded prompts are copied to the slots just before the shared one: those must exist.
            first = min([r.start for r in self._rows] + [self._slot - width])
            last = max([r.end() for r in self._rows] + [self._slot + r.max_new_tokens - 1 for r in requests])
            if last - first <= self.length:
                return (first if first < 0 or self._rebase_pays(first, last) else 0), width
        return None

    def _rebase_pays(self, first: int, last: int) -> bool:
        return last > self.length or (first >= REBASE_MIN_SLOTS and first * 2 >= self._slot)

    def _move(self, by: int) -> None:
        """Move every busy row's cache ``by`` slots back (negative: forward), with its mask."""
        import torch

        if by == 0:
            return
        busy, slot = self.busy, self._slot
        low = min((r.start for r in self._rows), default=slot)
        source, target = (slice(low, slot), slice(low - by, slot - by))
        if busy:
            tensors = self._kv()
            moved = [t[:busy, :, source].clone() for t in tensors]
            torch._foreach_copy_([t[:busy, :, target] for t in tensors], moved)
            mask = self.mask[:busy, source].clone()
            self.mask[:busy].fill_(1)
            self.mask[:busy, target].copy_(mask)
            self.mask[:busy, :max(0, low - by)].zero_()
        for row in self._rows:
            row.start -= by
        self._set_slot(slot - by)
        self.rebases += 1

    def admit(self, requests: Sequence[RowRequest]) -> tuple[list[int], Progress]:
        """Let ``requests`` join (check ``can_admit`` first): their prompt pass, their first tokens.
        Returns their row handles and what they produced."""
        import torch

        if not self._warm:
            self.warm_up()  # also allocates the model forward's cache, which transformers does lazily
        placement = self._placement(requests)
        if placement is None:
            raise ValueError(f"{len(requests)} request(s) do not fit the batch now (check can_admit first)")
        by, width = placement
        with torch.inference_mode():
            self._move(by)
            count, first = len(requests), self.busy
            logits, session = self._prefill([r.prompt for r in requests], _bucket_of(count, self.rows), width)
            slot, end = self._slot, first + count
            # Keys and values of the padded prompts go to the slots just before the shared slot.
            scratch = session.forward.kv()
            torch._foreach_copy_([t[first:end, :, slot - width:slot] for t in self._kv()],
                                 [t[:count, :, :width] for t in scratch])
            lengths = torch.tensor([len(r.prompt) for r in requests], dtype=torch.long)
            self.position[first:end].copy_(lengths[:, None])
            starts = (slot - lengths).to(self.device)
            self.mask[first:end].copy_(torch.arange(self.length, device=self.device)[None, :] >= starts[:, None])
            self.greedy[first:end].copy_(torch.tensor([r.greedy for r in requests]))
            self.temperature[first:end, 0].copy_(torch.tensor([r.temperature or 1.0 for r in requests]))
            self.top_p[first:end, 0].copy_(torch.tensor([r.top_p for r in requests]))
            self.seed[first:end, 0].copy_(torch.tensor([r.seed & (2**63 - 1) for r in requests]))
            sampling = not all(r.greedy for r in requests)
            chosen = choose(logits, *self._params(first, end), self.position[first:end] - 1, sampling)
            self.token[first:end, 0].copy_(chosen)
            handles = []
            for request in requests:
                self._handles += 1
                handles.append(self._handles)
                self._rows.append(_Row(self._handles, request, slot - len(request.prompt)))
            progress = self._record(chosen[:, None].cpu().tolist(), first)
        return handles, progress

    def step(self) -> Progress:
        """Up to ``tuning.inflight_steps`` decode steps of every busy row; each row's new tokens."""
        import torch

        if not self._rows:
            return Progress()
        with torch.inference_mode():
            first = min(r.start for r in self._rows)
            last = max(r.end() for r in self._rows)
            if self._rebase_pays(first, last) or self._slot >= self.length:
                self._move(first)
            left = max(r.request.max_new_tokens - r.produced for r in self._rows)
            count = max(1, min(self.tuning.inflight_steps, left, self.length - self._slot))
            bucket = _bucket_of(self.busy, self.rows, self.buckets)
            sampling = not all(r.request.greedy for r in self._rows)
            run = self._replays.get((bucket, sampling))
            self.index.zero_()
            # Free rows in the bucket step too (their output is ignored): from position 0, so a
            # model with learned absolute positions never indexes past its table, however long
            # the server runs.
            self.position[self.busy:bucket].zero_()
            with self.decoder.compiler_settings(), _collector_paused(run is not None):
                step = run or self._step_fn(bucket, sampling)
                for _ in range(count):
                    step()
            self._slot += count
            # .cpu() waits for the device without the GIL (the server's event loop runs meanwhile).
            return self._record(self.out[:self.busy, :count].cpu().tolist(), 0)

    def _record(self, tokens: list[list[int]], first: int) -> Progress:
        """Hand out rows ``first ..``'s new ``tokens``; free the rows that ended."""
        progress = Progress()
        for row, new in zip(self._rows[first:], tokens, strict=False):
            request = row.request
            kept = new[:request.max_new_tokens - row.produced]
            stop = next((i + 1 for i, t in enumerate(kept) if t in request.eos_token_ids), None)
            if stop is not None:
                kept = kept[:stop]
            row.produced += len(kept)
            progress.tokens[row.handle] = kept
            if stop is not None:
                progress.finished[row.handle] = "stop"
            elif row.produced >= request.max_new_tokens:
                progress.finished[row.handle] = "length"
        for handle in progress.finished:
            self.retire(handle)
        return progress

    def retire(self, handle: int) -> None:
        """Free the row of ``handle`` (ended, or its client left); the last busy row takes its place."""
        import torch

        index = next((i for i, r in enumerate(self._rows) if r.handle == handle), None)
        if index is None:
            return
        last = self.busy - 1
        if index != last:
            with torch.inference_mode():
                tensors = [*self._kv(), self.mask, self.token, self.position, self.greedy, self.temperature,
                           self.top_p, self.seed]
                torch._foreach_copy_([t[index] for t in tensors], [t[last] for t in tensors])
            self._rows[index] = self._rows[last]
        self._rows.pop()
        if not self._rows:
            self._set_slot(0)

    def describe(self) -> dict[str, Any]:
        """The batch's shape and engine, as shown when a server starts."""
        return {"rows": self.rows, "length": self.length, "buckets": list(self.buckets),
                "step": self.decoder.step, "graphs": self.decoder.graphs, "compiled": self.decoder.compile_backend,
                "attention_kernel": self.report.attention_kernel, "step_reason": self.decoder.step_reason,
                "notes": list(self.decoder.notes)}


def admission_rows(rows: int, tuning: DecodeTuning) -> int:
    """Rows of the scratch sessions that pass joining prompts (one per row bucket up to
    ``tuning.inflight_admit_rows``): their KV cache comes on top of the batch's."""
    return sum(_buckets(min(rows, tuning.inflight_admit_rows)))


def _buckets(rows: int) -> list[int]:
    """Powers of two below ``rows``, then ``rows``."""
    sizes = []
    size = 1
    while size < rows:
        sizes.append(size)
        size *= 2
    return [*sizes, rows]


def _bucket_of(count: int, rows: int, buckets: Sequence[int] | None = None) -> int:
    """The smallest bucket holding ``count`` rows."""
    return next(b for b in (buckets or _buckets(rows)) if b >= count)


def choose(logits: Any, greedy: Any, temperature: Any, top_p: Any, seed: Any, position: Any, sampling: bool) -> Any:
    """Each row's next token: argmax where ``greedy``; otherwise sampled at the row's
    ``temperature`` among its ``top_p`` share, with noise from its ``seed`` and ``position``
    (``sampling``: whether any row samples at all)."""
    import torch

    best = logits.argmax(-1)
    if not sampling:
        return best
    scores = outside_top_p_dropped(logits.float() / temperature, top_p)
    probs = scores.softmax(-1)
    # Exponential race (Gumbel-max) with seeded noise: like multinomial, graph-safe, reproducible.
    sampled = (probs / exponential_noise(seed, position, probs.shape[-1])).argmax(-1)
    return torch.where(greedy, best, sampled)


def _mix32(x: Any) -> Any:
    """A 32-bit integer hash (xor-shift-multiply) of every element of ``x`` (int64, values < 2**32);
    the multipliers stay below 2**31, so no product overflows int64."""
    x = x ^ (x >> 16)
    x = (x * 0x7FEB352D) & _MASK32
    x = x ^ (x >> 15)
    x = (x * 0x5BD1E995) & _MASK32
    return x ^ (x >> 16)


def exponential_noise(seed: Any, position: Any, vocabulary: int) -> Any:
    """Standard exponential noise, (rows, vocabulary), a function of each row's ``seed`` and
    ``position`` ((rows, 1) int64 tensors) only."""
    import torch

    key = _mix32((seed & _MASK32) ^ _mix32(((seed >> 32) & _MASK32) ^ _mix32(position & _MASK32)))
    ids = (torch.arange(vocabulary, device=seed.device) * 0x61C88647) & _MASK32
    bits = _mix32(key ^ ids[None, :])
    uniform = ((bits >> 8).float() + 0.5) / float(1 << 24)
    return -torch.log(uniform)
