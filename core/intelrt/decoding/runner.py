"""How the decode engine's steps run on the device: vLLM v1's model runner
(``vllm/v1/worker/gpu_model_runner.py``) for intelrt's engine.

The runner holds the device side of the engine — the paged KV cache, each row's state (newest
token, position, write slot, block table, stop ids, tokens left, its sampling buffers), the output
buffers — and runs what the scheduler (``scheduler.py``) decided:

* **a step with prompt chunks** (:meth:`ModelRunner.mixed`): one forward over every decoding row's
  newest token and the chunks' tokens end to end (the rows first, each a segment of one token);
  the rows get their next token as a decode step would give it (the same sampler and bookkeeping,
  :func:`record_step`), the chunks the logits of their last token. Where the plan has device
  graphs and the step's forward serves padded token counts (``CompactForward.flat_fits``), the step
  is a graph recorded once per size of :data:`FLAT_SIZES` (inputs written into fixed buffers,
  padded with tokens that write the null block) and replayed — at a server's warm-up, every size;
* **decode-only steps** (:meth:`ModelRunner.decode`): the smallest *row bucket* (a power of two)
  holding the decoding rows, several steps per look with no host sync — each reads each row's last
  token, writes its key and value at the slot its block table gives, samples, records and advances
  the row on the device — captured in a device graph per (bucket, sampler kind) where the plan has
  graphs, and compiled where it compiles. A row that ends on the device (a stop token, its last
  token) stops advancing and writes only to the null block until the host frees it.

It never asks torch which device it is on for a decision: the plan's decode decision (graphs,
compiler, step attention, through ``FastDecoder``) says what runs. Nothing here decides what runs
next or where keys live.
"""

from __future__ import annotations

import contextlib
import gc
import logging
import time
from collections.abc import Callable, Iterable, Iterator, Sequence
from typing import TYPE_CHECKING, Any, Protocol

from .compact import Segment
from .lora import BASE
from .memory import EngineSize, PeakMemory
from .report import GenerationReport
from .sampler import GREEDY, SAMPLING, Sampler, SamplerKind
from .sampling import MAX_LOGPROBS, SampledToken, TokenLogprob
from .scheduler import EngineRequest, EngineStats

if TYPE_CHECKING:
    from ..hooks.backend import Backend
    from ..hooks.payloads import Buckets
    from .forwards import ModelForward, StepForward
    from .lora import EngineAdapters
    from .paged import PagedCache
    from .tuning import DecodeTuning

log = logging.getLogger(__name__)

MAX_STOPS = 16
"""Stop token ids a row's step checks on the device (more are checked by the host, at its look)."""
FLAT_SIZES = (16, 32, 64, 128, 256, 320, 384, 448, 512, 640, 768, 896, 1024, 1280, 1536, 1792, 2048, 2560, 3072,
              3584, 4096, 5120, 6144, 7168, 8192, 10240, 12288, 14336, 16384)
"""Token counts a captured step with prompt chunks pads to (up to the step's budget, which is one of
them too): powers of two to 256, then about eight sizes per doubling — a step pads by at most an
eighth above 256 tokens (vLLM captures sizes the same way, ``cudagraph_capture_sizes``)."""


class InflightUnavailable(Exception):
    """This model's decode step cannot run over the paged cache (the reason is the message)."""


class CaptureFailed(Exception):
    """Raised (from the capturer's error) so the engine can go on without graphs."""


class StepSource(Protocol):
    """What the runner needs of the model's decode engine (``engine.FastDecoder``): the plan's
    decisions for the step, its forwards and compiled parts, the capturer, and the backend that
    answers for the device."""

    backend: Backend
    tuning: DecodeTuning
    shape_buckets: Buckets | None
    graphs: str | None
    compile_backend: str | None
    step: str
    step_reason: str | None
    notes: list[str]
    adapters: EngineAdapters
    flat_compile_failed: str | None

    @property
    def warmup(self) -> str: ...

    def prepare(self) -> None: ...

    def vocab_size(self) -> int: ...

    def new_cache(self, blocks: int, block_size: int, device: Any) -> PagedCache: ...

    def row_buckets(self, rows: int) -> list[int]: ...

    def new_forward(self, cache: PagedCache, rows: int) -> StepForward: ...

    def adapter_forward(self, cache: PagedCache) -> ModelForward: ...

    def recorder(self) -> Callable[..., None]: ...

    def compiler_settings(self, backend: str | None = None) -> contextlib.AbstractContextManager[Any]: ...

    def capture(self, fn: Callable[[], object], warmup: int, report: GenerationReport) -> Callable[[], object]: ...

    def disable(self, what: str, exc: BaseException) -> None: ...


def flat_buckets(budget: int) -> list[int]:
    """The sizes of :data:`FLAT_SIZES` below ``budget`` (the step's token budget), and ``budget``."""
    return sorted({size for size in FLAT_SIZES if size < budget} | {budget})


class ModelRunner:
    """The device side of an engine of ``size`` (rows, blocks, budgets: ``memory.size_engine``) for
    ``decoder``'s step on ``device``; see the module's docstring. ``stats``: where its counts go;
    ``preallocate``: every sampling buffer made now (a server: counted in the memory at start)."""

    def __init__(self, decoder: StepSource, size: EngineSize, device: Any, stats: EngineStats, *,
                 preallocate: bool = False) -> None:
        import torch

        self.decoder, self.size, self.device, self.stats = decoder, size, device, stats
        self.tuning = decoder.tuning
        decoder.prepare()  # the compact step built (or the reason it is not)
        self.rows, self.block_size, self.width = size.rows, size.block_size, size.max_blocks_per_row
        self.cache = decoder.new_cache(size.blocks, size.block_size, device)
        self.max_steps = self.tuning.max_steps
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
        if preallocate:
            self.sampler.prepare(SamplerKind(sample=True, penalty=True, bias=True, mask=True))
        self.buckets = decoder.row_buckets(rows)
        self.report = GenerationReport("fast", "", 0, graphs=decoder.graphs, compiled=decoder.compile_backend,
                                       step=decoder.step, step_reason=decoder.step_reason, warmup=decoder.warmup)
        self.flat_buckets = flat_buckets(size.max_batch_tokens)
        """Token counts a captured step with prompt chunks pads to (one device graph each)."""
        self._flat: FlatInputs | None = None
        self._flat_replays: dict[int, Callable[[], object]] = {}
        self._flat_failed: str | None = None
        self.flat_compiled = False
        """The captured steps with prompt chunks are the compiled step's (``DecodeTuning.compiled_flat``)."""
        """Why captured steps with prompt chunks were turned off (``None``: they were not)."""
        self._forwards: dict[int, StepForward] = {}
        self._adapter_forward: ModelForward | None = None
        self._steps: dict[tuple[int, SamplerKind, int], Callable[[], None]] = {}
        self._replays: dict[tuple[int, SamplerKind, int], Callable[[], object]] = {}
        self.shapes_warmed: set[tuple[str, int, int]] = set()
        """With shape buckets: the (kind, rows or tokens, blocks per row) of every step the warm-up ran."""
        self.shapes_run: set[tuple[str, int, int]] = set()
        """With shape buckets: the same of every step run since."""
        self.warm_frames: int | None = None
        """Frames torch had compiled when the warm-up ended (``None``: no warm-up ran)."""
        blocker = self.forward(self.buckets[-1]).blocker()
        if blocker is not None:
            raise InflightUnavailable(blocker)
        self.report.attention_kernel = self.attention_kernel

    @property
    def bucketed(self) -> bool:
        """Steps are padded to the plan's shape buckets (a device that compiles a graph per shape)."""
        return self.decoder.shape_buckets is not None

    # -- forwards -----------------------------------------------------------------------------------
    def forward(self, bucket: int) -> StepForward:
        """The step's forward for ``bucket`` rows (made once)."""
        forward = self._forwards.get(bucket)
        if forward is None:
            forward = self._forwards[bucket] = self.decoder.new_forward(self.cache, bucket)
        return forward

    def lora_forward(self) -> ModelForward:
        """The forward of steps holding LoRA adapter rows (``FastDecoder.adapter_forward``)."""
        if self._adapter_forward is None:
            self._adapter_forward = self.decoder.adapter_forward(self.cache)
        return self._adapter_forward

    @property
    def attention_kernel(self) -> bool:
        """Decode steps run the one-kernel attention."""
        return bool(getattr(self.forward(self.buckets[-1]), "fused_attention", False))

    def captured(self) -> list[tuple[int, SamplerKind, int]]:
        """The (bucket, sampler kind, width) of every captured decode step."""
        return list(self._replays)

    def reset_compiled(self) -> None:
        """After the decoder turned graphs or compiling off (or on): forwards, steps and row buckets
        built anew."""
        self.buckets = self.decoder.row_buckets(self.rows)
        self._forwards.clear()
        self._steps.clear()
        self._replays.clear()
        self._flat_replays.clear()
        self.flat_compiled = False
        self.report.graphs, self.report.compiled = self.decoder.graphs, self.decoder.compile_backend
        self.report.warmup = self.decoder.warmup
        self.report.attention_kernel = self.attention_kernel

    # -- rows (``scheduler.DeviceRows``) --------------------------------------------------------------
    def take_row(self, request: EngineRequest) -> None:
        """``request.row`` is ``request``'s: its table, stop ids and sampling parameters."""
        import torch

        row = request.row
        assert row is not None
        self.table[row].zero_()
        self.write_table(row, 0, request.blocks)
        stops = list(request.params.stop_token_ids)[:MAX_STOPS]
        self.stops[row].fill_(-1)
        if stops:
            self.stops[row, :len(stops)].copy_(torch.tensor(stops, dtype=torch.long), non_blocking=True)
        generated = request.tokens[request.prompt_length:]
        self.sampler.set_row(row, request.params, request.seed, request.tokens[:request.prompt_length], generated)

    def arm_row(self, request: EngineRequest) -> None:
        """Row state for the step: the last token at its position, the tokens left (device)."""
        row = request.row
        assert row is not None
        self.token[row, 0] = request.tokens[-1]
        self.position[row, 0] = len(request.tokens) - 1
        self.remaining[row] = request.params.max_new_tokens - request.generated
        self.done[row] = False

    def move_row(self, source: int, target: int) -> None:
        import torch

        tensors = [self.token, self.position, self.write_slot, self.table, self.done, self.remaining, self.stops,
                   *self.sampler.buffers()]
        torch._foreach_copy_([t[target] for t in tensors], [t[source] for t in tensors])

    def clear_row(self, row: int) -> None:
        self.done[row] = True
        self.table[row].zero_()
        self.position[row] = 0
        self.write_slot[row] = 0
        self.sampler.clear_row(row)

    def write_table(self, row: int, start: int, blocks: list[int]) -> None:
        import torch

        self.table[row, start:start + len(blocks)].copy_(torch.tensor(blocks, dtype=torch.long), non_blocking=True)

    def _slots(self, request: EngineRequest, positions: Iterable[int]) -> list[int]:
        """The cache slot of each of ``request``'s ``positions``: its block table's block, the offset in it."""
        block = self.block_size
        return [request.blocks[p // block] * block + p % block for p in positions]

    def _set_masks(self, requests: Iterable[EngineRequest]) -> None:
        """Each constrained request's allowed next tokens, in its sampler row."""
        for request in requests:
            constraint = request.params.constraint
            if constraint is not None and request.row is not None:
                self.sampler.set_allowed(request.row, constraint.allowed_tokens_mask(self.vocab))

    def write_prefilled(self, request: EngineRequest, start: int, end: int) -> None:
        """Write ``request``'s handed prefill keys and values of positions ``start .. end - 1``."""
        import torch

        assert request.prefilled is not None
        slots = torch.tensor(self._slots(request, range(start, end)), dtype=torch.long).to(self.device,
                                                                                          non_blocking=True)
        request.prefilled.write(self.cache, slots, start, end)

    # -- warm-up and memory -----------------------------------------------------------------------------
    def warm_up(self, kinds: Sequence[SamplerKind] = (GREEDY, SAMPLING)) -> None:
        """Compile and capture the decode step of every row bucket for each sampler kind, run one
        prefill and capture every flat step size, so that no request waits for a compiler. A capture
        that fails turns device graphs off, a compilation that fails turns compiling off (as
        ``FastDecoder.decode`` does). What it took is counted in ``stats`` (``warm_up_*``)."""
        import time

        import torch

        began, frames = time.perf_counter(), compiled_frames()
        try:
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
                self.reset_compiled()
            with torch.inference_mode():
                self._warm_up(kinds)
        finally:
            self.stats.warm_up_seconds += time.perf_counter() - began
            self.stats.warm_up_compiles += compiled_frames() - frames
            self.stats.warm_up_captures = len(self._replays) + len(self._flat_replays)

    def _warm_up(self, kinds: Sequence[SamplerKind]) -> None:
        with self.decoder.compiler_settings():
            for bucket in self.buckets:
                widths = self._bucket_widths(bucket) if self.bucketed else [self.width_for(bucket, [])]
                for width in widths:
                    for kind in kinds:
                        self.sampler.prepare(kind)
                        self.index.zero_()
                        step = self._step_fn(bucket, kind, width)
                        key = (bucket, kind, width)
                        if self.decoder.graphs:
                            self._replays[key] = self.decoder.capture(step, self.tuning.warmup_steps, self.report)
                        else:
                            step()
                    if self.bucketed:
                        self.shapes_warmed.add(("decode", bucket, width))
        if self.bucketed:
            self._warm_buckets()
        else:
            self._tune_attention()
            self.dummy_prefill(min(self.size.max_batch_tokens, self.size.context))
        if self.flat_capturable():
            self._warm_flat()
        self.idle_all()
        for tensor in self.cache.tensors():
            tensor.zero_()  # what warm-up wrote is never read, but zeros cannot turn into NaN
        self.report.notes = list(self.decoder.notes)
        self.warm_frames = compiled_frames()

    def _tune_attention(self) -> None:
        """Tune the step attention kernel on a busy step's shape (``StepForward.tune_attention``: once
        per kind of layer in a process, so the memory profile's call serves the warm-up's); out of
        memory, it is left to the first steps, with a warning."""
        try:
            self.forward(1).tune_attention(self.size.max_batch_tokens, self.rows, self.size.context)
        except Exception as exc:
            if not is_out_of_memory(exc):
                raise
            self.decoder.backend.empty_cache(self.device)
            log.warning("intelrt engine: tuning the step attention kernel ran out of memory (%s); the "
                        "first steps choose its configuration instead", str(exc)[:200])

    def dummy_prefill(self, tokens: int, context: int | None = None) -> None:
        """One prefill of ``tokens`` tokens writing only to the null block (warm-up, profiling);
        ``context``: the tokens they attend, their own last (default: just themselves)."""
        import torch

        tokens = max(1, tokens)
        context = max(tokens, context or tokens)
        ids = torch.zeros((1, tokens), dtype=torch.long, device=self.device)
        positions = torch.arange(context - tokens, context, device=self.device)[None, :]
        slots = positions[0] % self.block_size
        table = torch.zeros((1, self.width), dtype=torch.long, device=self.device)
        self.forward(1).prefill(ids, positions, slots, [Segment(0, tokens, table, context)])

    def profile(self, kinds: Sequence[SamplerKind] = (GREEDY, SAMPLING)) -> tuple[int, int, list[int]]:
        """Device memory (bytes above what is held now) of the largest prefill, of the largest
        decode step with the costliest sampler kind, and of the largest decode step of each of
        ``kinds`` (what their captured steps hold): what a budget sets aside for activations and
        graphs (zeros on a device that keeps no peak, e.g. the CPU). Run on an idle engine."""
        import torch

        costliest = SamplerKind(sample=True, filter="sort", penalty=True, bias=True, mask=True, logprobs=True)
        bucket = self.buckets[-1]
        peaks = []
        with torch.inference_mode():
            self._tune_attention()  # before the dummy prefill below would choose, and outside the peaks
        with torch.inference_mode(), self.decoder.compiler_settings():
            with PeakMemory(self.decoder.backend, self.device) as prefill:  # the last chunk of the longest prompt: the widest prefill
                self.dummy_prefill(min(self.size.max_batch_tokens, self.size.context), self.size.context)
            prefill_bytes = prefill.bytes
            if self.flat_capturable() and getattr(self.forward(1), "compiles_flat", False):
                # a server's steps with prompt chunks run the compiled flat step: compiled here, over
                # this small cache (the warm-up's captures find it), its widest step's peak counted
                try:
                    with PeakMemory(self.decoder.backend, self.device) as flat:
                        bucket = self.flat_buckets[-1]
                        self._flat_inputs().dummy(bucket, self.block_size)
                        self._flat_step(bucket, compiled=True)
                    prefill_bytes = max(prefill_bytes, flat.bytes)
                except Exception as exc:  # noqa: BLE001 - any compiler failure: the step runs uncompiled
                    self._flat_uncompiled(exc)
            for kind in (costliest, *kinds):
                self.sampler.prepare(kind)
                self.index.zero_()
                with PeakMemory(self.decoder.backend, self.device) as decode:  # the widest step: every row at its longest
                    self._step_fn(bucket, kind, self.width)()
                peaks.append(decode.bytes)
        self.idle_all()
        return prefill_bytes, peaks[0], peaks[1:]

    def buffer_bytes(self) -> int:
        """Device bytes held besides the KV cache (row state, outputs, the sampler's, flat buffers)."""
        tensors = [self.token, self.position, self.write_slot, self.table, self.done, self.remaining, self.stops,
                   self.out, self.out_logprob, self.out_top_ids, self.out_top_values, self.index,
                   *self.sampler.buffers(), *(self._flat.tensors() if self._flat is not None else [])]
        return sum(t.numel() * t.element_size() for t in tensors)

    def flat_buffer_bytes(self) -> int:
        """Device bytes the buffers of captured steps with prompt chunks take once made
        (:class:`FlatInputs`): zero where such steps are not captured, or made already."""
        if not self.flat_capturable() or self._flat is not None:
            return 0
        return FlatInputs.bytes_for(self.flat_buckets[-1], self.rows, self.width, self.vocab)

    def idle_all(self) -> None:
        self.done.fill_(True)
        self.position.zero_()
        self.write_slot.zero_()
        self.table.zero_()
        self.token.zero_()
        self.index.zero_()

    # -- decode-only steps ------------------------------------------------------------------------------
    def width_for(self, bucket: int, decoding: Sequence[EngineRequest]) -> int:
        """Blocks of the table a step of ``bucket`` rows reads: all of them for the one-kernel
        attention (which stops at each row's own length) and for a compiled step (one shape, one
        compilation), else the smallest power of two holding the ``decoding`` rows' blocks (the
        torch attention gathers that many blocks per row; at warm-up, one)."""
        if self.decoder.compile_backend or getattr(self.forward(bucket), "fused_attention", False):
            return self.width
        longest = max((len(r.blocks) for r in decoding), default=1)
        if self.decoder.shape_buckets is not None:
            return self._bucket_width(bucket, longest)
        width = 1
        while width < longest:
            width *= 2
        return min(width, self.width)

    def _bucket_width(self, rows: int, blocks: int) -> int:
        """Blocks per row of a step of ``rows`` rows whose longest holds ``blocks``, padded so that the
        step's blocks in all are a decode bucket of the plan (``Buckets.decode_blocks``; at most a
        whole row's)."""
        buckets = self.decoder.shape_buckets
        assert buckets is not None
        fitting = [total // rows for total in buckets.decode_blocks if total >= rows * blocks]
        return min(min(fitting, default=self.width), self.width)

    def _bucket_widths(self, rows: int) -> list[int]:
        """Every width :meth:`_bucket_width` gives a step of ``rows`` rows (what a warm-up runs)."""
        buckets = self.decoder.shape_buckets
        assert buckets is not None
        return sorted({min(total // rows, self.width) for total in buckets.decode_blocks if total >= rows}
                      | {self.width})

    def _prompt_bucket(self, tokens: int) -> int:
        """The tokens a chunk of ``tokens`` is padded to: the plan's next prompt length (past the longest,
        the chunk runs at its own length, and that shape compiles when first met)."""
        buckets = self.decoder.shape_buckets
        assert buckets is not None
        return next((n for n in buckets.prompt_lengths if n >= tokens), tokens)

    def _step_fn(self, bucket: int, kind: SamplerKind, width: int,
                 adapter_keys: Sequence[str] | None = None) -> Callable[[], None]:
        """One decode step of the first ``bucket`` rows (device work only: what a graph records);
        ``adapter_keys``: each row's LoRA adapter (the model's own forward, a step made for this look)."""
        key = (bucket, kind, width)
        cached = self._steps.get(key) if adapter_keys is None else None
        if cached is not None:
            return cached

        forward: Any = self.forward(bucket)
        if adapter_keys is not None:
            forward = _WithAdapters(self.lora_forward(), list(adapter_keys))
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

    def decode(self, decoding: Sequence[EngineRequest], steps: int
               ) -> tuple[list[list[SampledToken]], BaseException | None]:
        """Up to ``steps`` decode steps of every decoding row (``decoding``, by row): each row's new
        tokens, and the out-of-memory error that stopped them early (``None``: none did)."""
        busy = len(decoding)
        params = [r.params for r in decoding]
        if any(p.constraint is not None for p in params):
            steps = 1  # each mask depends on the token before: the host looks after every step
            self._set_masks(decoding)
        steps = max(1, min(steps, max(r.params.max_new_tokens - r.generated for r in decoding)))
        bucket = next(b for b in self.buckets if b >= busy)
        keys = [r.adapter_key for r in decoding]
        adapter_keys = [k or BASE for k in keys] + [BASE] * (bucket - busy) if any(k is not None for k in keys) \
            else None
        kind = SamplerKind.of(params)
        self.sampler.prepare(kind)
        width = self.width_for(bucket, decoding)
        if self.bucketed:
            self.shapes_run.add(("decode", bucket, width))
        self._refresh_slots(busy)
        self.index.zero_()
        failure: BaseException | None = None
        timer = DeviceTimer(self.decoder.backend, self.device)
        try:
            self._run_steps(bucket, kind, width, steps, adapter_keys)
        except CaptureFailed as failed:
            self.decoder.disable(f"graph capture ({self.decoder.graphs})", failed.__cause__ or failed)
            self.reset_compiled()
        except Exception as exc:
            if not is_out_of_memory(exc):
                raise
            failure = exc
        timer.stop()
        with self.waiting_for_device():
            ran = int(self.index.item())
        self.stats.decode_device_seconds += timer.seconds()
        self.stats.steps += ran
        self.report.steps += ran
        if not ran:
            return [[] for _ in decoding], failure
        logprobs: tuple[Any, Any, Any] = (self.out_logprob, self.out_top_ids, self.out_top_values
                                          ) if kind.logprobs else (None, None, None)
        return _sampled(self.out[:busy, :ran], *logprobs, busy, ran), failure

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

    # -- steps with prompt chunks -------------------------------------------------------------------
    def prefill(self, chunks: Sequence[tuple[EngineRequest, int]]) -> Any:
        """Prompt chunks alone (no decoding row), uncaptured: the logits of each chunk's last token."""
        import torch

        if self.bucketed:
            return torch.cat([self._padded_prefill(request, count) for request, count in chunks])

        tokens: list[int] = []
        positions: list[int] = []
        slots: list[int] = []
        segments = []
        for request, count in chunks:
            start = request.computed
            span = range(start, start + count)
            tokens += request.tokens[start:start + count]
            positions += span
            slots += self._slots(request, span)
            table = torch.zeros((1, self.width), dtype=torch.long)
            table[0, :len(request.blocks)] = torch.tensor(request.blocks, dtype=torch.long)
            segments.append(Segment(len(tokens) - count, len(tokens), table.to(self.device, non_blocking=True),
                                    start + count))
        device = self.device
        ids = torch.tensor([tokens], dtype=torch.long).to(device, non_blocking=True)
        where = torch.tensor([positions], dtype=torch.long).to(device, non_blocking=True)
        flat_slots = torch.tensor(slots, dtype=torch.long).to(device, non_blocking=True)
        keys = [r.adapter_key for r, _ in chunks]
        if any(k is not None for k in keys):
            logits = self.lora_forward().prefill(ids, where, flat_slots, segments, [k or BASE for k in keys])
        else:
            logits = self.forward(1).prefill(ids, where, flat_slots, segments)
        self.stats.prefill_tokens += len(tokens)
        self.stats.chunk_steps += 1
        return logits

    def _padded_prefill(self, request: EngineRequest, count: int) -> Any:
        """One chunk padded to the plan's buckets — its tokens to the next prompt length (the padding
        writes only the null block, and no real token sees it), the blocks it reads to the next decode
        bucket of one row — and the logits of its last real token."""
        import torch

        block, device = self.block_size, self.device
        start = request.computed
        tokens = self._prompt_bucket(count)
        width = self._bucket_width(1, -(-(start + count) // block))
        self.shapes_run.add(("prefill", tokens, width))
        span = range(start, start + count)
        ids = request.tokens[start:start + count] + [0] * (tokens - count)
        positions = [*span, *range(start + count, start + tokens)]
        slots = self._slots(request, span) + [0] * (tokens - count)
        table = torch.zeros((1, self.width), dtype=torch.long)
        table[0, :len(request.blocks)] = torch.tensor(request.blocks, dtype=torch.long)
        segment = Segment(0, tokens, table.to(device, non_blocking=True), start + count, width)
        forward: Any = self.lora_forward() if request.adapter_key is not None else self.forward(1)
        keys = {"adapter_keys": [request.adapter_key]} if request.adapter_key is not None else {}
        return forward.prefill(torch.tensor([ids], dtype=torch.long).to(device, non_blocking=True),
                               torch.tensor([positions], dtype=torch.long).to(device, non_blocking=True),
                               torch.tensor(slots, dtype=torch.long).to(device, non_blocking=True), [segment],
                               last=[count - 1], **keys)

    def _warm_buckets(self) -> None:
        """Run every shape the plan's buckets give a step — each decode row bucket at each width, each
        prompt length at each width of one row — writing only the null block, and record them."""
        import torch

        buckets = self.decoder.shape_buckets
        assert buckets is not None
        device = self.device
        budget = self.size.max_batch_tokens  # a chunk is never longer than a step's budget
        lengths = {self._prompt_bucket(min(n, budget)) for n in buckets.prompt_lengths}
        for tokens in sorted(lengths, reverse=True):
            for width in reversed(self._bucket_widths(1)):
                ids = torch.zeros((1, tokens), dtype=torch.long, device=device)
                positions = torch.arange(tokens, device=device)[None, :]
                table = torch.zeros((1, self.width), dtype=torch.long, device=device)
                segment = Segment(0, tokens, table, min(tokens, width * self.block_size), width)
                self.forward(1).prefill(ids, positions, positions[0] % self.block_size, [segment],
                                        last=[min(tokens, width * self.block_size) - 1])
                self.shapes_warmed.add(("prefill", tokens, width))

    def mixed(self, decoding: Sequence[EngineRequest], chunks: Sequence[tuple[EngineRequest, int]]
              ) -> tuple[list[list[SampledToken]], Any]:
        """One step over every decoding row's newest token and the prompt chunks (see the module):
        each decoding row's new token (empty without rows) and the logits of every request's last
        token in the step (rows first)."""
        import torch

        busy = len(decoding)
        params = [r.params for r in decoding]
        self._set_masks(decoding)
        kind = SamplerKind.of(params)
        self.sampler.prepare(kind)
        block, device = self.block_size, self.device
        tokens: list[int] = []
        positions: list[int] = []
        slots: list[int] = []
        contexts: list[int] = []
        for request in decoding:
            position = len(request.tokens) - 1
            tokens.append(request.tokens[-1])
            positions.append(position)
            slots += self._slots(request, [position])
            contexts.append(position + 1)
        chunk_tables = torch.zeros((len(chunks), self.width), dtype=torch.long)
        for i, (request, count) in enumerate(chunks):
            start = request.computed
            span = range(start, start + count)
            tokens += request.tokens[start:start + count]
            positions += span
            slots += self._slots(request, span)
            contexts.append(start + count)
            chunk_tables[i, :len(request.blocks)] = torch.tensor(request.blocks, dtype=torch.long)
        ends = [*range(1, busy + 1)]
        for _, count in chunks:
            ends.append(ends[-1] + count if ends else count)
        keys = [r.adapter_key for r in decoding] + [r.adapter_key for r, _ in chunks]
        adapters = any(k is not None for k in keys)
        timer = DeviceTimer(self.decoder.backend, device)
        logits = None
        if not adapters and self.flat_capturable():
            try:
                logits = self._run_flat(tokens, positions, slots, contexts, ends, chunk_tables, busy)
            except CaptureFailed as failed:
                self._flat_off(failed)
        if logits is None:
            tables = torch.cat([self.table[:busy], chunk_tables.to(device, non_blocking=True)])
            bounds = [0, *ends]
            segments = [Segment(bounds[i], bounds[i + 1], tables[i:i + 1], contexts[i]) for i in range(len(contexts))]
            ids = torch.tensor([tokens], dtype=torch.long).to(device, non_blocking=True)
            where = torch.tensor([positions], dtype=torch.long).to(device, non_blocking=True)
            flat_slots = torch.tensor(slots, dtype=torch.long).to(device, non_blocking=True)
            if adapters:
                logits = self.lora_forward().prefill(ids, where, flat_slots, segments, [k or BASE for k in keys])
            else:
                logits = self.forward(1).prefill(ids, where, flat_slots, segments, tables=tables)
        if busy:
            self.index.zero_()
            chosen, logprob, top_ids, top_values = self.sampler.choose(logits[:busy], 0, busy, self.position[:busy],
                                                                        kind)
            if logprob is not None:
                self.out_logprob[:busy].index_copy_(1, self.index, logprob[:, None])
                self.out_top_ids[:busy].index_copy_(1, self.index, top_ids[:, None])
                self.out_top_values[:busy].index_copy_(1, self.index, top_values[:, None])
            self.decoder.recorder()(chosen, self.token[:busy], self.position[:busy], self.write_slot[:busy],
                                    self.table[:busy], self.done[:busy], self.remaining[:busy], self.stops[:busy],
                                    self.out[:busy], self.index, block, self.width)
        timer.stop()
        self.stats.prefill_tokens += len(tokens) - busy
        self.stats.chunk_steps += 1
        if not busy:  # not timed: reading the device timer here would wait for the device
            return [], logits
        self.stats.steps += 1
        self.stats.mixed_steps += 1
        self.report.steps += 1
        logprobs: tuple[Any, Any, Any] = (self.out_logprob, self.out_top_ids, self.out_top_values
                                          ) if kind.logprobs else (None, None, None)
        with self.waiting_for_device():
            sampled = _sampled(self.out[:busy, :1], *logprobs, busy, 1)
        self.stats.mixed_device_seconds += timer.seconds()
        return sampled, logits

    def first_tokens(self, requests: Sequence[EngineRequest], logits: Any) -> list[list[SampledToken]]:
        """The first token of each of ``requests`` (prompts complete, rows taken) from ``logits``."""
        import torch

        first = requests[0].row
        assert first is not None
        count = len(requests)
        positions = torch.tensor([[len(r.tokens) - 1] for r in requests], dtype=torch.long, device=self.device)
        kind = SamplerKind.of([r.params for r in requests])
        self._set_masks(requests)
        chosen, logprob, top_ids, top_values = self.sampler.choose(logits, first, count, positions, kind)
        with self.waiting_for_device():
            return _sampled(chosen[:, None], None if logprob is None else logprob[:, None],
                            None if top_ids is None else top_ids[:, None],
                            None if top_values is None else top_values[:, None], count, 1)

    @contextlib.contextmanager
    def waiting_for_device(self) -> Iterator[None]:
        """Time the host spends waiting for the device (``EngineStats.wait_seconds``)."""
        began = time.perf_counter()
        try:
            yield
        finally:
            self.stats.wait_seconds += time.perf_counter() - began

    # -- captured flat steps --------------------------------------------------------------------------
    def flat_capturable(self) -> bool:
        """Steps with prompt chunks run as device graphs here: the plan has graphs, the step's forward
        serves padded token counts (``CompactForward.flat_fits``), and no capture of one failed."""
        return (bool(self.decoder.graphs) and self._flat_failed is None
                and bool(getattr(self.forward(1), "flat_fits", False)))

    def flat_captured(self) -> list[int]:
        """The token counts whose flat step is captured."""
        return sorted(self._flat_replays)

    def _flat_off(self, exc: BaseException) -> None:
        """A captured step with prompt chunks failed: such steps run eagerly from now on (decode
        steps keep their graphs), with a note."""
        cause = exc.__cause__ or exc
        self._flat_failed = f"{type(cause).__name__}: {str(cause)[:300]}"
        self._flat_replays.clear()
        self.flat_compiled = False
        note = f"capturing steps with prompt chunks failed ({self._flat_failed}); they run uncaptured from now on"
        log.warning("intelrt engine: %s", note)
        log.debug("intelrt engine: flat step capture failed", exc_info=exc)
        self.decoder.notes.append(note)

    def _flat_inputs(self) -> FlatInputs:
        if self._flat is None:
            self._flat = FlatInputs(self.flat_buckets[-1], self.rows, self.width, self.vocab, self.device)
        return self._flat

    def _run_flat(self, tokens: list[int], positions: list[int], slots: list[int], contexts: list[int],
                  ends: list[int], chunk_tables: Any, busy: int) -> Any:
        """The step's logits (one row per request) from the graph of the next bucket up of its tokens:
        its inputs written into the graph's buffers, padded with tokens that write the null block and
        requests of no token."""
        import torch

        flat = self._flat_inputs()
        count, requests = len(tokens), len(contexts)
        bucket = next(b for b in self.flat_buckets if b >= count)
        padding, spare = [0] * (bucket - count), [0] * (self.rows - requests)
        long = torch.long
        flat.ids[:bucket].copy_(torch.tensor(tokens + padding, dtype=long), non_blocking=True)
        flat.positions[:bucket].copy_(torch.tensor(positions + padding, dtype=long), non_blocking=True)
        flat.slots[:bucket].copy_(torch.tensor(slots + padding, dtype=long), non_blocking=True)
        flat.cu_q.copy_(torch.tensor([0, *ends] + [count] * len(spare), dtype=torch.int32), non_blocking=True)
        flat.lengths.copy_(torch.tensor(contexts + spare, dtype=torch.int32), non_blocking=True)
        flat.last.copy_(torch.tensor([end - 1 for end in ends] + spare, dtype=long), non_blocking=True)
        flat.table[:busy].copy_(self.table[:busy])
        flat.table[busy:requests].copy_(chunk_tables, non_blocking=True)
        replay = self._flat_replays.get(bucket)
        if replay is None:  # an offline call's first step of this size (a server captured them all at warm-up)
            replay = self._flat_replays[bucket] = self._capture_flat(bucket)
        replay()
        return flat.logits[:requests]

    def _capture_flat(self, bucket: int, compiled: bool = False) -> Callable[[], object]:
        """The device graph of a step of ``bucket`` tokens over the flat buffers (``compiled``: of the
        step's compiled form, where it has one)."""
        return self.decoder.capture(lambda: self._flat_step(bucket, compiled), self.tuning.warmup_steps, self.report)

    def _flat_step(self, bucket: int, compiled: bool = False) -> None:
        """One step of ``bucket`` tokens over the flat buffers, its logits written to theirs."""
        flat = self._flat_inputs()
        forward: Any = self.forward(1)
        # sliced, then given the batch dimension: its stride is the token count, as in every size's call
        flat.logits.copy_(forward.flat(flat.ids[:bucket][None], flat.positions[:bucket][None], flat.slots[:bucket],
                                       flat.cu_q, flat.lengths, flat.table, flat.last, compiled))

    def _warm_flat(self) -> None:
        """Capture every flat bucket's graph (largest first) over a dummy step that writes the null
        block only: one request of ``bucket`` tokens. Where the step compiles (``DecodeTuning.compiled_flat``)
        its one graph was built by the memory profile (else the first, largest size builds it here), so
        that only a server's start ever waits
        for the compiler: an offline call's steps, captured when first met, stay uncompiled. A compile
        that fails leaves the captures uncompiled (``_flat_uncompiled``); a capture that fails turns such
        captures off (``_flat_off``); decode steps keep theirs."""
        flat = self._flat_inputs()
        compiled = bool(getattr(self.forward(1), "compiles_flat", False)) and not self.decoder.flat_compile_failed
        try:
            for bucket in reversed(self.flat_buckets):
                flat.dummy(bucket, self.block_size)
                try:
                    self._flat_replays[bucket] = self._capture_flat(bucket, compiled)
                except CaptureFailed as failed:
                    if not compiled:
                        raise
                    self._flat_uncompiled(failed)
                    compiled = False
                    self._flat_replays[bucket] = self._capture_flat(bucket)
        except CaptureFailed as failed:
            self._flat_off(failed)
        self.flat_compiled = compiled and self._flat_failed is None

    def _flat_uncompiled(self, exc: BaseException) -> None:
        """Compiling the step with prompt chunks failed: its sizes are captured uncompiled instead
        (those captured compiled so far are captured again), with a warning and a note."""
        cause = exc.__cause__ or exc
        note = (f"compiling the step with prompt chunks failed ({type(cause).__name__}: {str(cause)[:300]}); "
                "it is captured uncompiled")
        log.warning("intelrt engine: %s", note)
        log.debug("intelrt engine: flat step compile failed", exc_info=exc)
        self.decoder.notes.append(note)
        self.decoder.flat_compile_failed = note
        for bucket in list(self._flat_replays):
            self._flat_inputs().dummy(bucket, self.block_size)
            self._flat_replays[bucket] = self._capture_flat(bucket)


class FlatInputs:
    """The device buffers a captured step with prompt chunks reads and writes: ``tokens`` token ids,
    positions and cache slots; per request (``requests``, every row) where its tokens start, its
    context, its block table and its last token; the logits of each request's last token."""

    def __init__(self, tokens: int, requests: int, width: int, vocab: int, device: Any) -> None:
        import torch

        long = {"dtype": torch.long, "device": device}
        self.ids = torch.zeros((tokens,), **long)
        self.positions = torch.zeros((tokens,), **long)
        self.slots = torch.zeros((tokens,), **long)
        self.cu_q = torch.zeros((requests + 1,), dtype=torch.int32, device=device)
        self.lengths = torch.zeros((requests,), dtype=torch.int32, device=device)
        self.table = torch.zeros((requests, width), **long)
        self.last = torch.zeros((requests,), **long)
        self.logits = torch.zeros((requests, vocab), dtype=torch.float32, device=device)

    @staticmethod
    def bytes_for(tokens: int, requests: int, width: int, vocab: int) -> int:
        """What the buffers of these sizes take on the device."""
        return tokens * 3 * 8 + (requests + 1) * 4 + requests * 4 + requests * width * 8 + requests * 8 \
            + requests * vocab * 4

    def tensors(self) -> list[Any]:
        return [self.ids, self.positions, self.slots, self.cu_q, self.lengths, self.table, self.last, self.logits]

    def dummy(self, bucket: int, block_size: int) -> None:
        """One request of ``bucket`` tokens that writes and reads the null block only."""
        import torch

        self.ids.zero_()
        self.positions[:bucket].copy_(torch.arange(bucket, device=self.ids.device) % block_size)
        self.slots[:bucket].copy_(self.positions[:bucket])
        self.cu_q.fill_(bucket)
        self.cu_q[0] = 0
        self.lengths.zero_()
        self.lengths[0] = block_size
        self.table.zero_()
        self.last.zero_()
        self.last[0] = bucket - 1


class DeviceTimer:
    """Device time between two points of the stream (the backend's timing events), read once the host
    has waited for the device anyway; nothing where the backend has no such events (the CPU)."""

    def __init__(self, backend: Backend, device: Any) -> None:
        self.events = None
        try:
            self.events = backend.timing_events(device)
            if self.events is not None:
                self.events[0].record()
        except Exception:  # noqa: BLE001 - a runtime without timed events: the step is not timed
            self.events = None

    def stop(self) -> None:
        if self.events is not None:
            self.events[1].record()

    def seconds(self) -> float:
        """The time between start and :meth:`stop` (call after the host waited for the device)."""
        if self.events is None:
            return 0.0
        return float(self.events[0].elapsed_time(self.events[1])) / 1000


class _WithAdapters:
    """A :class:`ModelForward` whose decode applies one LoRA adapter per row (``names``)."""

    def __init__(self, forward: ModelForward, names: list[str]) -> None:
        self.forward, self.names = forward, names

    def decode(self, input_ids: Any, positions: Any, write_slots: Any, table: Any) -> Any:
        return self.forward.decode(input_ids, positions, write_slots, table, self.names)


def compiled_frames() -> int:
    """Frames torch's compiler has compiled in this process (``torch._dynamo``'s own counter)."""
    from torch._dynamo.utils import counters

    return int(counters["frames"]["ok"])


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


def collector_paused(paused: bool) -> Any:
    """Python's cyclic garbage collector off while the block runs (when ``paused``), then back as
    it was: a collection in a process holding compiled graphs stalls the device for milliseconds."""

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
