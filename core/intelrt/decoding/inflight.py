"""The decode engine: requests join a running batch, are prefilled in chunks, decode together and
leave — for a server's stream of requests and for ``Loaded.generate``'s list alike (a list is a
batch whose requests all join at once).

One step state, one sampler, one KV cache:

* **KV cache** — paged (``paged.py``, ``blocks.py``): a request holds blocks of
  ``DecodeTuning.block_size`` token slots, listed in its block table; blocks are taken as its
  tokens need them and given back when it ends. Full blocks of known tokens are remembered by the
  digest of the prefix they end, and a later request starting with the same tokens reuses them
  (automatic prefix caching).
* **Scheduling** — vLLM's (``vllm/v1/core/sched/scheduler.py``, ``Scheduler.schedule``), on one
  thread: each *look* (the host's turn between device work) first gives every decoding row the
  blocks its next steps write (taking them back from the newest requests — *preempted*, to be
  recomputed later — when none are free: vLLM's RECOMPUTE preemption), then spends what is left of
  ``max_batch_tokens`` on prompt chunks: requests already prefilling first, then waiting ones in
  order while their blocks are free and a row is left (admission by free blocks; the rest wait).
  A prompt longer than the budget is prefilled in chunks over several looks, between which the
  decoding rows keep stepping (chunked prefill): one long prompt never stalls the others.
* **Steps** — the rows decoding are the batch's first rows; a step runs the smallest *row bucket*
  (a power of two) that holds them, over one forward (``forwards.py``: the compact step or the
  model's own) and the one sampler (``sampler.py``); the step reads each row's last token, writes
  its key and value at the slot its block table gives, samples, records, and advances the row on
  the device — so several steps run per look with no host sync, captured in a device graph per
  (bucket, sampler kind) where the plan has graphs, and compiled where it compiles. A row that
  ends on the device (a stop token, its last token) stops advancing and writes only to the null
  block until the host frees it.
* **Faults** — an out-of-memory error inside a look never fails the requests in flight: the tokens
  of the steps that completed are kept, the newest decoding rows are preempted (or the prefill
  budget halved) and the look is retried; ``stats.oom_retries`` counts it. Only a request that
  cannot run even alone fails, with the reason.

Greedy output per request equals ``model.generate``'s for that prompt alone (tests prove it on the
CPU), whatever else is in the batch, however often it is preempted or its prompt chunked.
"""

from __future__ import annotations

import logging
import random
from collections import deque
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from .blocks import NULL_BLOCK, OutOfBlocks, block_digests
from .compact import Segment
from .lora import BASE
from .memory import EngineSize, PeakMemory, release_cached_memory
from .report import GenerationReport
from .sampler import GREEDY, SAMPLING, Sampler, SamplerKind
from .sampling import MAX_LOGPROBS, DecodeRequest, SampledToken, TokenLogprob

if TYPE_CHECKING:
    from .engine import FastDecoder
    from .forwards import ModelForward, StepForward
    from .lora import EngineAdapter

log = logging.getLogger(__name__)

MAX_STOPS = 16
"""Stop token ids a row's step checks on the device (more are checked by the host, at its look)."""
CALM_LOOKS = 64
"""Looks without an out-of-memory error after which a reduced row cap or token budget is raised again."""


class InflightUnavailable(Exception):
    """This model's decode step cannot run over the paged cache (the reason is the message)."""


@dataclass
class Progress:
    """What one ``step`` produced: new tokens per request handle, the requests that ended
    (``stop``: a stop token, which is included, or the constraint's end; ``length``:
    ``max_new_tokens``) and those that cannot be served (``failed``: the reason) — ended and failed
    requests are already gone from the batch."""

    outputs: dict[int, list[SampledToken]] = field(default_factory=dict)
    finished: dict[int, str] = field(default_factory=dict)
    failed: dict[int, str] = field(default_factory=dict)

    @property
    def tokens(self) -> dict[int, list[int]]:
        return {handle: [t.token_id for t in sampled] for handle, sampled in self.outputs.items()}


@dataclass
class EngineStats:
    """Counts since the batch was made (a server's metrics read them)."""

    preemptions: int = 0
    oom_retries: int = 0
    steps: int = 0
    prefill_tokens: int = 0
    looks: int = 0


class _Sequence:
    """The host's view of one request."""

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
        self.state = "waiting"
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


class InflightBatch:
    """Requests that join and leave a running decode batch; see the module's docstring.

    ``decoder``: the model's :class:`FastDecoder` (its plan decision, tuning, compiled functions
    and capturer). ``size``: rows, blocks and budgets (``memory.size_engine``). Not thread-safe:
    one thread drives it (``add``, ``step``, ``retire``)."""

    def __init__(self, decoder: FastDecoder, size: EngineSize, device: Any, *, preallocate: bool = False) -> None:
        import torch

        if size.rows < 1 or size.blocks < 2:
            raise ValueError(f"an in-flight batch needs rows >= 1 and blocks >= 2, got {size.rows} and {size.blocks}")
        self.decoder, self.size, self.device = decoder, size, device
        self.tuning = decoder.tuning
        decoder.prepare()  # the compact step built (or the reason it is not)
        self.rows, self.block_size, self.width = size.rows, size.block_size, size.max_blocks_per_row
        self.cache = decoder.new_cache(size.blocks, size.block_size, device)
        self.pool = self.cache.pool
        self.max_steps = max(self.tuning.eos_check_every, self.tuning.stream_every, self.tuning.inflight_steps)
        rows, long = self.rows, {"dtype": torch.long, "device": device}
        self.token = torch.zeros((rows, 1), **long)
        self.position = torch.zeros((rows, 1), **long)
        self.write_slot = torch.zeros((rows,), **long)
        self.table = torch.zeros((rows, self.width), **long)
        self.done = torch.ones((rows,), dtype=torch.bool, device=device)
        self.remaining = torch.zeros((rows,), **long)
        self.stops = torch.full((rows, MAX_STOPS), -1, **long)
        self.out = torch.zeros((rows, self.max_steps), **long)
        self.out_logprob = torch.zeros((rows, self.max_steps), dtype=torch.float32, device=device)
        self.out_top_ids = torch.zeros((rows, self.max_steps, MAX_LOGPROBS), **long)
        self.out_top_values = torch.zeros((rows, self.max_steps, MAX_LOGPROBS), dtype=torch.float32, device=device)
        self.index = torch.zeros((1,), **long)
        self.vocab = decoder.vocab_size()
        self.sampler = Sampler(rows, self.vocab, device)
        if preallocate:  # a server: every sampling buffer counted in the memory at start
            self.sampler.prepare(SamplerKind(sample=True, penalty=True, bias=True, mask=True))
        self.buckets = decoder.row_buckets(rows)
        self.report = GenerationReport("fast", "", 0, graphs=decoder.graphs, compiled=decoder.compile_backend,
                                       step=decoder.step, step_reason=decoder.step_reason, warmup=decoder.warmup)
        self._forwards: dict[int, StepForward] = {}
        self._adapter_forward: ModelForward | None = None
        self._steps: dict[tuple[int, SamplerKind, int], Callable[[], None]] = {}
        self._replays: dict[tuple[int, SamplerKind, int], Callable[[], object]] = {}
        blocker = self._forward(self.buckets[-1]).blocker()
        if blocker is not None:
            raise InflightUnavailable(blocker)
        self.report.attention_kernel = bool(getattr(self._forward(self.buckets[-1]), "fused_attention", False))
        self._sequences: dict[int, _Sequence] = {}
        self._waiting: deque[_Sequence] = deque()
        self._running: list[_Sequence] = []
        """Prefilling and decoding requests, in the order they were admitted (the newest is preempted first)."""
        self._decoding: list[_Sequence] = []
        """Decoding requests by row: ``_decoding[r].row == r``."""
        self._handed: list[_Sequence] = []
        """Requests admitted this look whose whole prompt was a handed prefill (``prefilled.py``)."""
        self._handles = 0
        self.stats = EngineStats()
        self.row_cap = rows
        self.token_budget = size.max_batch_tokens
        self._calm = 0

    # -- set-up -----------------------------------------------------------------------------------
    def _forward(self, bucket: int) -> StepForward:
        forward = self._forwards.get(bucket)
        if forward is None:
            forward = self._forwards[bucket] = self.decoder.new_forward(self.cache, bucket)
        return forward

    def _lora_forward(self) -> ModelForward:
        """The forward of looks holding LoRA adapter rows (``FastDecoder.adapter_forward``)."""
        if self._adapter_forward is None:
            self._adapter_forward = self.decoder.adapter_forward(self.cache)
        return self._adapter_forward

    # -- LoRA adapters ------------------------------------------------------------------------------
    def load_adapter(self, name: str, path: str) -> None:
        """Load the PEFT LoRA adapter in ``path``: requests naming ``name`` (``DecodeRequest.adapter``)
        decode with it, in one batch with the base model's and other adapters' rows. ``ValueError``
        saying what is wrong (a missing file, an adapter that does not fit, a model whose own forward
        cannot run over the paged cache). Between looks only (the thread that steps the batch)."""
        from .lora import check_adapter_directory

        check_adapter_directory(path)
        blocker = self._lora_forward().blocker()
        if blocker is not None:
            raise ValueError(f"LoRA adapter rows run the model's own forward, which cannot run over the paged cache "
                             f"here: {blocker}")
        self.decoder.adapters.load(name, path)

    def unload_adapter(self, name: str) -> int:
        """Refuse ``name`` to new requests (``ValueError`` when it is not loaded); its weights leave
        the model once the requests decoding with it end — their count, returned (as ``vllm serve``:
        ``OpenAIServingModels.unload_lora_adapter`` drops the name, and requests already running
        finish with their adapter)."""
        adapter = self.decoder.adapters.unload(name)
        users = sum(1 for s in self._sequences.values() if s.adapter_key == adapter.key)
        self._collect_adapters()
        return users

    def _collect_adapters(self) -> None:
        """Remove from the model the unloaded adapters no request decodes with any more."""
        adapters = self.decoder.adapters
        if not adapters.holds_unloaded:
            return
        in_use = {s.adapter_key for s in self._sequences.values() if s.adapter_key is not None}
        for key in adapters.retired(in_use):
            adapters.delete(key)

    def _reset_compiled(self) -> None:
        """After the decoder turned graphs or compiling off: forwards and steps built anew."""
        self._forwards.clear()
        self._steps.clear()
        self._replays.clear()
        self.report.graphs, self.report.compiled = self.decoder.graphs, self.decoder.compile_backend
        self.report.warmup = self.decoder.warmup

    def warm_up(self, kinds: Sequence[SamplerKind] = (GREEDY, SAMPLING)) -> None:
        """Compile and capture the decode step of every row bucket for each sampler kind, and run one
        prefill, so that no request waits for a compiler. A capture that fails turns device graphs
        off, a compilation that fails turns compiling off (as ``FastDecoder.decode`` does)."""
        import torch

        if self._sequences:
            raise RuntimeError("warm_up() runs before any request joins")
        for _ in range(3):
            try:
                with torch.inference_mode():
                    self._warm_up(kinds)
                return
            except CaptureFailed as failed:
                self.decoder.disable(f"graph capture ({self.decoder.graphs})", failed.__cause__ or failed)
            except Exception as exc:
                if not self.decoder.compile_backend:
                    raise
                self.decoder.disable(f"compile ({self.decoder.compile_backend})", exc)
            self._reset_compiled()
        with torch.inference_mode():
            self._warm_up(kinds)

    def _warm_up(self, kinds: Sequence[SamplerKind]) -> None:
        with self.decoder.compiler_settings():
            for bucket in self.buckets:
                width = self._width(bucket, warm=True)
                for kind in kinds:
                    self.sampler.prepare(kind)
                    self.index.zero_()
                    step = self._step_fn(bucket, kind, width)
                    key = (bucket, kind, width)
                    if self.decoder.graphs:
                        self._replays[key] = self.decoder.capture(step, self.tuning.warmup_steps, self.report)
                    else:
                        step()
        self._dummy_prefill(min(self.token_budget, self.size.context))
        self._idle_all()
        for tensor in self.cache.tensors():
            tensor.zero_()  # what warm-up wrote is never read, but zeros cannot turn into NaN
        self.report.notes = list(self.decoder.notes)

    def _dummy_prefill(self, tokens: int, context: int | None = None) -> None:
        """One prefill of ``tokens`` tokens writing only to the null block (warm-up, profiling);
        ``context``: the tokens they attend, their own last (default: just themselves)."""
        import torch

        tokens = max(1, tokens)
        context = max(tokens, context or tokens)
        ids = torch.zeros((1, tokens), dtype=torch.long, device=self.device)
        positions = torch.arange(context - tokens, context, device=self.device)[None, :]
        slots = positions[0] % self.block_size
        table = torch.zeros((1, self.width), dtype=torch.long, device=self.device)
        self._forward(1).prefill(ids, positions, slots, [Segment(0, tokens, table, context)])

    def profile(self, kinds: Sequence[SamplerKind] = (GREEDY, SAMPLING)) -> tuple[int, int, list[int]]:
        """Device memory (bytes above what is held now) of the largest prefill, of the largest
        decode step with the costliest sampler kind, and of the largest decode step of each of
        ``kinds`` (what their captured steps hold): what a budget sets aside for activations and
        graphs (zeros on a device that keeps no peak, e.g. the CPU). Run on an idle batch."""
        import torch

        costliest = SamplerKind(sample=True, filter="sort", penalty=True, bias=True, mask=True, logprobs=True)
        bucket = self.buckets[-1]
        peaks = []
        with torch.inference_mode(), self.decoder.compiler_settings():
            with PeakMemory(self.device) as prefill:  # the last chunk of the longest prompt: the widest prefill
                self._dummy_prefill(min(self.token_budget, self.size.context), self.size.context)
            for kind in (costliest, *kinds):
                self.sampler.prepare(kind)
                self.index.zero_()
                with PeakMemory(self.device) as decode:  # the widest step: every row at its longest
                    self._step_fn(bucket, kind, self.width)()
                peaks.append(decode.bytes)
        self._idle_all()
        return prefill.bytes, peaks[0], peaks[1:]

    def buffer_bytes(self) -> int:
        """Device bytes the batch holds besides its KV cache (row state, outputs, the sampler's)."""
        tensors = [self.token, self.position, self.write_slot, self.table, self.done, self.remaining, self.stops,
                   self.out, self.out_logprob, self.out_top_ids, self.out_top_values, self.index,
                   *self.sampler.buffers()]
        return sum(t.numel() * t.element_size() for t in tensors)

    def _idle_all(self) -> None:
        self.done.fill_(True)
        self.position.zero_()
        self.write_slot.zero_()
        self.table.zero_()
        self.token.zero_()
        self.index.zero_()

    # -- the device work ---------------------------------------------------------------------------
    def _width(self, bucket: int, warm: bool = False) -> int:
        """Blocks of the table a step of ``bucket`` rows reads: all of them for the one-kernel
        attention (which stops at each row's own length) and for a compiled step (one shape, one
        compilation), else the smallest power of two holding the busy rows' blocks (the torch
        attention gathers that many blocks per row; ``warm``: one, at warm-up, before any row holds
        blocks)."""
        if self.decoder.compile_backend or getattr(self._forward(bucket), "fused_attention", False):
            return self.width
        longest = 1 if warm else max((len(s.blocks) for s in self._decoding), default=1)
        width = 1
        while width < longest:
            width *= 2
        return min(width, self.width)

    def _step_fn(self, bucket: int, kind: SamplerKind, width: int,
                 adapter_keys: Sequence[str] | None = None) -> Callable[[], None]:
        """One decode step of the first ``bucket`` rows (device work only: what a graph records);
        ``adapter_keys``: each row's LoRA adapter (the model's own forward, a step made for this look)."""
        key = (bucket, kind, width)
        cached = self._steps.get(key) if adapter_keys is None else None
        if cached is not None:
            return cached

        forward: Any = self._forward(bucket)
        if adapter_keys is not None:
            lora, names = self._lora_forward(), list(adapter_keys)
            forward = _WithAdapters(lora, names)
        sampler, block = self.sampler, self.block_size
        token, position, slot = self.token[:bucket], self.position[:bucket], self.write_slot[:bucket]
        table, done, remaining = self.table[:bucket, :width], self.done[:bucket], self.remaining[:bucket]
        stops, out, index = self.stops[:bucket], self.out[:bucket], self.index
        logprob, top_ids, top_values = (self.out_logprob[:bucket], self.out_top_ids[:bucket],
                                        self.out_top_values[:bucket])

        record = self.decoder.recorder()

        def step() -> None:
            logits = forward.decode(token, position, slot, table)
            chosen, chosen_logprob, ids, values = sampler.choose(logits, 0, bucket, position, kind)
            if chosen_logprob is not None:
                logprob.index_copy_(1, index, chosen_logprob[:, None])
                top_ids.index_copy_(1, index, ids[:, None])
                top_values.index_copy_(1, index, values[:, None])
            record(chosen, token, position, slot, table, done, remaining, stops, out, index, block, width)

        if adapter_keys is None:
            self._steps[key] = step
        return step

    def _refresh_slots(self, busy: int) -> None:
        """Each busy row's write slot from its table (blocks given since the device computed it)."""
        import torch

        position = self.position[:busy, 0]
        column = position // self.block_size
        blocks = self.table[:busy].gather(1, column.clamp(max=self.width - 1)[:, None])[:, 0]
        inside = (column < self.width) & ~self.done[:busy]
        self.write_slot[:busy].copy_(torch.where(inside, blocks * self.block_size, 0) + position % self.block_size)

    # -- the host's view ---------------------------------------------------------------------------
    @property
    def busy(self) -> int:
        """Rows decoding now."""
        return len(self._decoding)

    @property
    def waiting(self) -> int:
        """Requests waiting to be let in (or to be recomputed after a preemption)."""
        return len(self._waiting)

    @property
    def prefilling(self) -> int:
        return len(self._running) - len(self._decoding)

    @property
    def pending(self) -> bool:
        """Any request in the batch (waiting, prefilling or decoding)."""
        return bool(self._sequences)

    def fits(self, prompt_tokens: int, max_new_tokens: int) -> str | None:
        """Why a request of this size can never run in this batch, or ``None`` when it can."""
        total = prompt_tokens + max_new_tokens
        if prompt_tokens < 1 or max_new_tokens < 1:
            return "a request needs at least one prompt token and one new token"
        if total > self.size.context:
            return (f"{prompt_tokens} prompt tokens + {max_new_tokens} new tokens = {total} is more than the "
                    f"{self.size.context} tokens a request may have here")
        if self.pool.blocks_for(total - 1) > self.pool.usable:
            return (f"{total} tokens need {self.pool.blocks_for(total - 1)} KV blocks; the cache holds "
                    f"{self.pool.usable}")
        return None

    def add(self, requests: Iterable[DecodeRequest], seeds: Sequence[int] | None = None) -> list[int]:
        """Queue ``requests`` (they join at the next looks, in order); their handles. ``seeds``:
        each request's sampling seed when its ``params.seed`` is ``None`` (default: random).
        ``ValueError`` (nothing queued) for a request that can never fit, naming why."""
        requests = list(requests)
        adapters: list[EngineAdapter | None] = []
        for request in requests:
            adapters.append(None if request.adapter is None else self.decoder.adapters.resolve(request.adapter))
            why = self.fits(len(request.prompt), request.params.max_new_tokens)
            if why is not None:
                raise ValueError(why)
            request.params.check_vocabulary(self.vocab)
            if any(t >= self.vocab for t in request.prompt):
                raise ValueError(f"the prompt holds a token id outside the model's vocabulary of {self.vocab}")
            if request.prefilled is not None:
                why = request.prefilled.mismatch(self.cache, len(request.prompt))
                if why is not None:
                    raise ValueError(why)
        handles = []
        for i, request in enumerate(requests):
            seed = request.params.seed
            if seed is None:
                seed = seeds[i] if seeds is not None else random.getrandbits(63)
            self._handles += 1
            sequence = _Sequence(self._handles, request, seed, adapters[i])
            self._sequences[sequence.handle] = sequence
            self._waiting.append(sequence)
            handles.append(sequence.handle)
        return handles

    def retire(self, handle: int) -> None:
        """Drop request ``handle`` wherever it is (ended, or its client left): blocks and row freed."""
        sequence = self._sequences.pop(handle, None)
        if sequence is None:
            return
        if sequence.state == "waiting":
            self._waiting.remove(sequence)
        else:
            self._release(sequence)
            self._running.remove(sequence)
        sequence.state = "gone"
        self._collect_adapters()

    def forget_prefixes(self) -> None:
        """Empty the prefix cache (the weights may have changed since its blocks were computed)."""
        self.pool.forget_prefixes()

    def describe(self) -> dict[str, Any]:
        """The batch's shape and engine, as shown when a server starts."""
        return {"rows": self.rows, "context": self.size.context, "buckets": list(self.buckets),
                "blocks": self.pool.usable, "block_size": self.block_size, "max_batch_tokens": self.token_budget,
                "prefix_caching": self.pool.prefix_caching, "kv_bytes": self.cache.bytes,
                "step": self.decoder.step, "graphs": self.decoder.graphs, "compiled": self.decoder.compile_backend,
                "attention_kernel": self.report.attention_kernel, "step_reason": self.decoder.step_reason,
                "notes": list(self.decoder.notes)}

    # -- a look ------------------------------------------------------------------------------------
    def step(self, steps: int | None = None) -> Progress:
        """One look: schedule, prefill what the token budget allows, then up to ``steps`` (default
        ``DecodeTuning.inflight_steps``) decode steps of every decoding row; what they produced."""
        import torch

        progress = Progress()
        if not self._sequences:
            return progress
        steps = min(self.max_steps, steps or self.tuning.inflight_steps)
        self.stats.looks += 1
        with torch.inference_mode():
            self._ensure_decode_blocks(steps)
            chunks = self._schedule_prefill()
            if chunks:
                self._prefill(chunks, progress)
            handed, self._handed = self._handed, []
            if handed:
                logits = torch.stack([s.prefilled.logits for s in handed if s.prefilled is not None])
                self._first_tokens(handed, logits, progress)
            if chunks or handed:
                self._ensure_decode_blocks(steps)  # rows that just got their first token
            if self._decoding:
                self._decode(steps, progress)
        self._collect_adapters()
        self._calm += 1
        if self._calm >= CALM_LOOKS and (self.row_cap < self.rows or self.token_budget < self.size.max_batch_tokens):
            self.row_cap = min(self.rows, self.row_cap * 2)
            self.token_budget = min(self.size.max_batch_tokens, self.token_budget * 2)
            self._calm = 0
        return progress

    # -- blocks and preemption ----------------------------------------------------------------------
    def _grow(self, sequence: _Sequence, tokens: int) -> bool:
        """Give ``sequence`` the blocks for its first ``tokens`` token slots, preempting the newest
        other running requests when none are free; False when it is itself the newest left (then
        it is preempted too, unless it waits already)."""
        need = self.pool.blocks_for(tokens) - len(sequence.blocks)
        if need <= 0:
            return True
        while self.pool.free < need:
            victim = next((s for s in reversed(self._running) if s is not sequence), None)
            if victim is None or self._running.index(victim) < self._running.index(sequence):
                self._preempt(sequence)
                return False
            self._preempt(victim)
        new = self.pool.allocate(need)
        start = len(sequence.blocks)
        sequence.blocks += new
        if sequence.row is not None:
            self._write_table(sequence.row, start, new)
        return True

    def _write_table(self, row: int, start: int, blocks: list[int]) -> None:
        import torch

        self.table[row, start:start + len(blocks)].copy_(torch.tensor(blocks, dtype=torch.long), non_blocking=True)

    def _release(self, sequence: _Sequence) -> None:
        """Give back ``sequence``'s blocks (its tail first) and its row."""
        if sequence.row is not None:
            self._free_row(sequence.row)
        self.pool.release(reversed(sequence.blocks))
        sequence.blocks, sequence.remembered = [], 0

    def _preempt(self, sequence: _Sequence) -> None:
        """Take ``sequence``'s blocks and row back; it waits first in line, to be recomputed (its
        prompt and the tokens it generated so far prefilled again, from the prefix cache where
        its full blocks are still there)."""
        self._release(sequence)
        self._running.remove(sequence)
        sequence.computed, sequence.state = 0, "waiting"
        self._waiting.appendleft(sequence)
        self.stats.preemptions += 1
        self.report.preemptions += 1
        log.info("intelrt engine: request %d preempted (recomputed later): the KV cache is full", sequence.handle)

    def _ensure_decode_blocks(self, steps: int) -> None:
        """Every decoding row holds the blocks its next ``steps`` steps write (oldest first)."""
        for sequence in list(self._running):
            if sequence.state != "decode" or sequence not in self._running:
                continue
            self._grow(sequence, min(sequence.computed + steps, sequence.last_written))

    def _remember(self, sequence: _Sequence) -> None:
        """Give the prefix cache ``sequence``'s blocks that are full of computed keys."""
        full = min(sequence.computed // self.block_size, len(sequence.blocks))
        if full <= sequence.remembered or not self.pool.prefix_caching:
            sequence.remembered = max(sequence.remembered, full)
            return
        digests = sequence.full_digests(full, self.block_size)
        for i in range(sequence.remembered, full):
            self.pool.remember(sequence.blocks[i], digests[i])
        sequence.remembered = full

    # -- prefill ------------------------------------------------------------------------------------
    def _schedule_prefill(self) -> list[tuple[_Sequence, int]]:
        """(request, tokens) of this look's prompt chunks: prefilling requests first, then waiting
        ones while blocks and rows allow, within the token budget left by the decoding rows."""
        budget = self.token_budget - len(self._decoding)
        chunks: list[tuple[_Sequence, int]] = []
        for sequence in list(self._running):
            if budget <= 0:
                return chunks
            if sequence.state != "prefill" or sequence not in self._running:
                continue
            count = min(len(sequence.tokens) - sequence.computed, budget)
            if self._grow(sequence, sequence.computed + count):
                chunks.append((sequence, count))
                budget -= count
        while budget > 0 and self._waiting and len(self._running) < self.row_cap:
            sequence = self._waiting[0]
            # Looked up at every try: a cached block found at an earlier look may have been evicted since.
            usable = (len(sequence.tokens) - 1) // self.block_size
            found = self.pool.lookup(sequence.full_digests(usable, self.block_size))
            start = len(found) * self.block_size
            # the forward starts after a handed prefill's keys, which are written, not computed
            handed = sequence.prompt_length if sequence.prefilled is not None and start < sequence.prompt_length \
                else start
            count = min(len(sequence.tokens) - handed, budget)
            evictable = sum(1 for b in found if self.pool.refs(b) == 0)
            need = self.pool.blocks_for(handed + count) - len(found)
            if need > self.pool.free - evictable:
                break  # admission by free blocks: it waits, and so do those behind it
            self._waiting.popleft()
            self.pool.share(found)
            self.pool.stats.queried_tokens += len(sequence.tokens)
            self.pool.stats.hit_tokens += start
            self.report.prefix_hit_tokens += start
            sequence.blocks = list(found) + self.pool.allocate(need)
            sequence.computed = sequence.remembered = start
            sequence.state = "prefill"
            self._running.append(sequence)
            if handed > start:
                self._write_prefilled(sequence, start, handed)
            if count:
                chunks.append((sequence, count))
                budget -= count
            else:
                self._handed.append(sequence)  # its first token comes from the prefill's logits
        return chunks

    def _write_prefilled(self, sequence: _Sequence, start: int, end: int) -> None:
        """Write ``sequence``'s handed prefill keys and values of positions ``start .. end - 1``."""
        import torch

        assert sequence.prefilled is not None
        block = self.block_size
        slots = torch.tensor([sequence.blocks[p // block] * block + p % block for p in range(start, end)],
                             dtype=torch.long).to(self.device, non_blocking=True)
        sequence.prefilled.write(self.cache, slots, start, end)
        sequence.computed = end
        self._remember(sequence)

    def _prefill(self, chunks: list[tuple[_Sequence, int]], progress: Progress) -> None:
        """Run this look's prompt chunks in one pass; requests whose prompt is then complete get
        their first token and a decoding row."""
        import torch

        tokens: list[int] = []
        positions: list[int] = []
        slots: list[int] = []
        segments = []
        block = self.block_size
        for sequence, count in chunks:
            start = sequence.computed
            span = range(start, start + count)
            tokens += sequence.tokens[start:start + count]
            positions += span
            slots += [sequence.blocks[p // block] * block + p % block for p in span]
            table = torch.zeros((1, self.width), dtype=torch.long)
            table[0, :len(sequence.blocks)] = torch.tensor(sequence.blocks, dtype=torch.long)
            segments.append(Segment(len(tokens) - count, len(tokens), table.to(self.device, non_blocking=True),
                                    start + count))
        device = self.device
        ids = torch.tensor([tokens], dtype=torch.long).to(device, non_blocking=True)
        where = torch.tensor([positions], dtype=torch.long).to(device, non_blocking=True)
        flat_slots = torch.tensor(slots, dtype=torch.long).to(device, non_blocking=True)
        keys = [s.adapter_key for s, _ in chunks]
        try:
            if any(k is not None for k in keys):
                logits = self._lora_forward().prefill(ids, where, flat_slots, segments, [k or BASE for k in keys])
            else:
                logits = self._forward(1).prefill(ids, where, flat_slots, segments)
        except Exception as exc:
            if not is_out_of_memory(exc):
                raise
            self._prefill_ran_out(chunks, exc, progress)
            return
        self.stats.prefill_tokens += len(tokens)
        complete = []
        for i, (sequence, count) in enumerate(chunks):
            sequence.computed += count
            self._remember(sequence)
            if sequence.computed == len(sequence.tokens):
                complete.append((i, sequence))
        if complete:
            self._first_tokens([s for _, s in complete], logits[[i for i, _ in complete]], progress)

    def _prefill_ran_out(self, chunks: list[tuple[_Sequence, int]], exc: BaseException, progress: Progress) -> None:
        """A prefill ran out of device memory: halve the token budget and retry at the next look;
        a chunk of one block that still does not fit fails its request."""
        release_cached_memory(self.device)
        self.stats.oom_retries += 1
        self.report.oom_retries += 1
        self._calm = 0
        smallest = min(count for _, count in chunks)
        if len(chunks) > 1 or smallest > self.block_size:
            self.token_budget = max(self.block_size, min(self.token_budget, sum(c for _, c in chunks)) // 2)
            log.warning("intelrt engine: a prefill of %d tokens ran out of device memory; retrying with at most "
                        "%d tokens per step", sum(c for _, c in chunks), self.token_budget)
            return
        sequence = chunks[0][0]
        message = (f"out of device memory prefilling {smallest} tokens even alone ({type(exc).__name__}: "
                   f"{str(exc)[:200]})")
        self._fail(sequence, message, progress)

    def _first_tokens(self, sequences: list[_Sequence], logits: Any, progress: Progress) -> None:
        """Rows for ``sequences`` (prompts complete), their first tokens sampled from ``logits``."""
        import torch

        first = len(self._decoding)
        for sequence in sequences:
            self._take_row(sequence)
        count = len(sequences)
        positions = torch.tensor([[len(s.tokens) - 1] for s in sequences], dtype=torch.long, device=self.device)
        params = [s.params for s in sequences]
        kind = SamplerKind.of(params)
        for sequence in sequences:
            if sequence.params.constraint is not None and sequence.row is not None:
                self.sampler.set_allowed(sequence.row, sequence.params.constraint.allowed_tokens_mask(self.vocab))
        chosen, logprob, top_ids, top_values = self.sampler.choose(logits, first, count, positions, kind)
        sampled = _sampled(chosen[:, None], None if logprob is None else logprob[:, None],
                           None if top_ids is None else top_ids[:, None],
                           None if top_values is None else top_values[:, None], count, 1)
        for sequence, row_tokens in zip(list(sequences), sampled, strict=True):
            self._accept(sequence, row_tokens, 0, progress)
            if sequence.state == "decode":
                self._arm_row(sequence)

    def _take_row(self, sequence: _Sequence) -> None:
        """The next free row is ``sequence``'s: its table, stop ids and sampling parameters."""
        import torch

        row = len(self._decoding)
        self._decoding.append(sequence)
        sequence.row, sequence.state = row, "decode"
        self.table[row].zero_()
        self._write_table(row, 0, sequence.blocks)
        stops = list(sequence.params.stop_token_ids)[:MAX_STOPS]
        self.stops[row].fill_(-1)
        if stops:
            self.stops[row, :len(stops)].copy_(torch.tensor(stops, dtype=torch.long), non_blocking=True)
        generated = sequence.tokens[sequence.prompt_length:]
        self.sampler.set_row(row, sequence.params, sequence.seed, sequence.tokens[:sequence.prompt_length], generated)

    def _arm_row(self, sequence: _Sequence) -> None:
        """Row state for the step: the last token at its position, the tokens left (device)."""
        row = sequence.row
        assert row is not None
        self.token[row, 0] = sequence.tokens[-1]
        self.position[row, 0] = len(sequence.tokens) - 1
        self.remaining[row] = sequence.params.max_new_tokens - sequence.generated
        self.done[row] = False

    def _free_row(self, row: int) -> None:
        """Row ``row`` is free: the last decoding row moves into it, and the last row goes idle."""
        import torch

        last = len(self._decoding) - 1
        leaving = self._decoding[row]
        if row != last:
            tensors = [self.token, self.position, self.write_slot, self.table, self.done, self.remaining, self.stops,
                       *self.sampler.buffers()]
            torch._foreach_copy_([t[row] for t in tensors], [t[last] for t in tensors])
            moved = self._decoding[last]
            self._decoding[row], moved.row = moved, row
        self._decoding.pop()
        leaving.row = None
        self.done[last] = True
        self.table[last].zero_()
        self.position[last] = 0
        self.write_slot[last] = 0
        self.sampler.clear_row(last)

    # -- decode -------------------------------------------------------------------------------------
    def _decode(self, steps: int, progress: Progress) -> None:
        """Up to ``steps`` decode steps of every decoding row, then their tokens handed out."""
        busy = len(self._decoding)
        params = [s.params for s in self._decoding]
        if any(p.constraint is not None for p in params):
            steps = 1  # each mask depends on the token before: the host looks after every step
            for sequence in self._decoding:
                constraint = sequence.params.constraint
                if constraint is not None and sequence.row is not None:
                    self.sampler.set_allowed(sequence.row, constraint.allowed_tokens_mask(self.vocab))
        steps = max(1, min(steps, max(s.params.max_new_tokens - s.generated for s in self._decoding)))
        bucket = next(b for b in self.buckets if b >= busy)
        keys = [s.adapter_key for s in self._decoding]
        adapter_keys = [k or BASE for k in keys] + [BASE] * (bucket - busy) if any(k is not None for k in keys) \
            else None
        kind = SamplerKind.of(params)
        self.sampler.prepare(kind)
        width = self._width(bucket)
        self._refresh_slots(busy)
        self.index.zero_()
        failure: BaseException | None = None
        try:
            self._run_steps(bucket, kind, width, steps, adapter_keys)
        except CaptureFailed as failed:
            self.decoder.disable(f"graph capture ({self.decoder.graphs})", failed.__cause__ or failed)
            self._reset_compiled()
        except Exception as exc:
            if not is_out_of_memory(exc):
                raise
            failure = exc
        ran = int(self.index.item())
        self.stats.steps += ran
        self.report.steps += ran
        if ran:
            tokens = self.out[:busy, :ran]
            logprobs: tuple[Any, Any, Any] = (self.out_logprob, self.out_top_ids, self.out_top_values
                                              ) if kind.logprobs else (None, None, None)
            sampled = _sampled(tokens, *logprobs, busy, ran)
            for sequence, row_tokens in zip(list(self._decoding), sampled, strict=True):
                self._accept(sequence, row_tokens, ran, progress)
        if failure is not None:
            self._decode_ran_out(failure, progress)

    def _run_steps(self, bucket: int, kind: SamplerKind, width: int, steps: int,
                   adapter_keys: Sequence[str] | None = None) -> None:
        if adapter_keys is not None:  # LoRA rows: eager, never captured (PEFT picks each row's adapter in Python)
            step = self._step_fn(bucket, kind, width, adapter_keys)
            for _ in range(steps):
                step()
            return
        key = (bucket, kind, width)
        run = self._replays.get(key)
        with self.decoder.compiler_settings(), collector_paused(run is not None):
            done = 0
            if run is None and self.decoder.graphs and steps > self.tuning.warmup_steps:
                for stale in [k for k in self._replays if k[:2] == (bucket, kind)]:  # narrower: its graph memory back
                    del self._replays[stale]
                    self._steps.pop(stale, None)
                self._replays[key] = run = self.decoder.capture(self._step_fn(bucket, kind, width),
                                                                self.tuning.warmup_steps, self.report)
                done = int(self.index.item())  # the capture's warm-up steps ran for real
            run = run or self._step_fn(bucket, kind, width)
            for _ in range(steps - done):
                run()

    def _decode_ran_out(self, exc: BaseException, progress: Progress) -> None:
        """A decode step ran out of device memory: the newest half of the decoding rows are
        preempted (recomputed later) and fewer rows are let in until the batch has been calm."""
        release_cached_memory(self.device)
        self.stats.oom_retries += 1
        self.report.oom_retries += 1
        self._calm = 0
        busy = len(self._decoding)
        if busy <= 1:
            if self._decoding:
                self._fail(self._decoding[0], f"out of device memory decoding even one row ({type(exc).__name__}: "
                                              f"{str(exc)[:200]})", progress)
            return
        keep = busy // 2
        self.row_cap = max(1, keep)
        log.warning("intelrt engine: a decode step of %d rows ran out of device memory; %d rows preempted, at most "
                    "%d decode until the batch is calm", busy, busy - keep, self.row_cap)
        for sequence in sorted(self._decoding, key=self._running.index)[keep:]:
            self._preempt(sequence)

    def _accept(self, sequence: _Sequence, sampled: list[SampledToken], ran: int, progress: Progress) -> None:
        """Hand out ``sequence``'s new tokens (up to its end), update its state; ``ran``: the decode
        steps of this look (0: the token came from its prefill)."""
        params = sequence.params
        kept: list[SampledToken] = []
        reason: str | None = None
        for token in sampled:
            kept.append(token)
            sequence.generated += 1
            if params.constraint is not None:
                params.constraint.advance(token.token_id)
                if params.constraint.is_terminated():
                    reason = "stop"
                    break
            if token.token_id in sequence.stops:
                reason = "stop"
                break
            if sequence.generated >= params.max_new_tokens:
                reason = "length"
                break
        if ran:
            sequence.computed += len(kept)  # each accepted token's step wrote its input's key and value
        sequence.tokens += [t.token_id for t in kept]
        if params.logprobs is None:
            kept = [SampledToken(t.token_id) for t in kept]
        elif params.logprobs < MAX_LOGPROBS:
            kept = [SampledToken(t.token_id, t.logprob, t.top_logprobs[:params.logprobs]) for t in kept]
        progress.outputs.setdefault(sequence.handle, []).extend(kept)
        if reason is not None:
            progress.finished[sequence.handle] = reason
            self._finish(sequence)
        else:
            self._remember(sequence)

    def _finish(self, sequence: _Sequence) -> None:
        self._sequences.pop(sequence.handle, None)
        if sequence in self._running:
            self._release(sequence)
            self._running.remove(sequence)
        sequence.state = "gone"

    def _fail(self, sequence: _Sequence, message: str, progress: Progress) -> None:
        log.error("intelrt engine: request %d failed: %s", sequence.handle, message)
        progress.failed[sequence.handle] = message
        self._finish(sequence)

    def check(self) -> None:
        """Raise ``AssertionError`` when the host's bookkeeping disagrees with itself (tests)."""
        self.pool.check()
        held: dict[int, int] = {}
        for sequence in self._running:
            for b in sequence.blocks:
                held[b] = held.get(b, 0) + 1
        for b in range(1, self.pool.blocks):
            assert self.pool.refs(b) == held.get(b, 0), f"block {b}: pool says {self.pool.refs(b)}, holders {held.get(b, 0)}"
        assert all(s.row == r for r, s in enumerate(self._decoding))
        assert all(s.state == "waiting" for s in self._waiting)


class _WithAdapters:
    """A :class:`ModelForward` whose decode applies one LoRA adapter per row (``names``)."""

    def __init__(self, forward: ModelForward, names: list[str]) -> None:
        self.forward, self.names = forward, names

    def decode(self, input_ids: Any, positions: Any, write_slots: Any, table: Any) -> Any:
        return self.forward.decode(input_ids, positions, write_slots, table, self.names)


def record_step(chosen: Any, token: Any, position: Any, slot: Any, table: Any, done: Any, remaining: Any,
                stops: Any, out: Any, index: Any, block: int, width: int) -> None:
    """A decode step's bookkeeping after each row's token is chosen (device work only): the token
    recorded at ``out[:, index]`` (0 for a row already done), rows that reach a stop token or their
    last token marked done, live rows advanced one position, and each row's next write slot taken
    from its block table (the null block for a done row, or a position past its blocks)."""
    import torch

    chosen = chosen.masked_fill(done, 0)
    out.index_copy_(1, index, chosen[:, None])
    ended = done | (chosen[:, None] == stops).any(-1) | (remaining <= 1)
    done.copy_(ended)
    remaining.sub_(1)
    position.add_((~ended).long()[:, None])
    token.copy_(chosen[:, None])
    column = position[:, 0] // block
    inside = (column < width) & ~ended
    blocks = table.gather(1, column.clamp(max=width - 1)[:, None])[:, 0]
    slot.copy_(torch.where(inside, blocks * block, 0) + position[:, 0] % block)
    index.add_(1)


def _sampled(tokens: Any, logprob: Any, top_ids: Any, top_values: Any, rows: int, steps: int
             ) -> list[list[SampledToken]]:
    """Per row, the steps' tokens (with their log-probabilities when computed), on the host."""
    ids = tokens[:rows, :steps].cpu().tolist()  # .cpu() waits for the device without the GIL
    if logprob is None:
        return [[SampledToken(t) for t in row] for row in ids]
    chosen = logprob[:rows, :steps].cpu().tolist()
    top_i = top_ids[:rows, :steps].cpu().tolist()
    top_v = top_values[:rows, :steps].cpu().tolist()
    return [[SampledToken(t, lp, tuple(TokenLogprob(i, v) for i, v in zip(ti, tv, strict=True)))
             for t, lp, ti, tv in zip(row, row_lp, row_ti, row_tv, strict=True)]
            for row, row_lp, row_ti, row_tv in zip(ids, chosen, top_i, top_v, strict=True)]


def is_out_of_memory(exc: BaseException) -> bool:
    """``exc`` is a device allocation failing (``torch.OutOfMemoryError``, or a vendor runtime's
    error saying it ran out of memory)."""
    import torch

    if isinstance(exc, torch.OutOfMemoryError):
        return True
    return isinstance(exc, RuntimeError) and "out of memory" in str(exc).lower()


class CaptureFailed(Exception):
    """Raised (from the capturer's error) so the engine can go on without graphs."""


def collector_paused(paused: bool) -> Any:
    """Python's cyclic garbage collector off while the block runs (when ``paused``), then back as
    it was: a collection in a process holding compiled graphs stalls the device for milliseconds."""
    import contextlib
    import gc

    @contextlib.contextmanager
    def paused_collector() -> Any:
        was_enabled = gc.isenabled()
        if paused:
            gc.disable()
        try:
            yield
        finally:
            if paused and was_enabled:
                gc.enable()

    return paused_collector()


__all__ = ["NULL_BLOCK", "CaptureFailed", "EngineStats", "InflightBatch", "InflightUnavailable", "OutOfBlocks",
           "Progress"]
