"""The decode engine: requests join a running batch, are prefilled in chunks, decode together and
leave — for a server's stream of requests and for ``Loaded.generate``'s list alike (a list is a
batch whose requests all join at once).

:class:`InflightBatch` is the engine's loop (vLLM v1's ``EngineCore.step``): each *look* asks the
scheduler what runs (``scheduler.py``: queues, token budget, admission, chunked prefill,
preemption; the KV blocks through ``kv_manager.py``), has the runner run it on the device
(``runner.py``: buffers, the step with prompt chunks as one forward over every decoding row's next
token and the chunks, decode-only steps several at a time, device graphs), and hands the tokens
back to the scheduler, which says which requests ended.

* **KV cache** — paged (``paged.py``, ``blocks.py``): a request holds blocks of
  ``DecodeTuning.block_size`` token slots, listed in its block table; blocks are taken as its
  tokens need them and given back when it ends. Full blocks of known tokens are remembered by the
  digest of the prefix they end, and a later request starting with the same tokens reuses them
  (automatic prefix caching).
* **A look** — the decoding rows' blocks for their next steps, then this look's prompt chunks
  within the step's token budget; if there are chunks, one step carries them and every decoding
  row's next token (a *mixed* step: the weights are read once for both, and no row waits for a
  prefill pass); if there are none, up to ``steps`` decode-only steps run with no host sync.
* **Faults** — an out-of-memory error inside a look never fails the requests in flight: the tokens
  of the steps that completed are kept, the prompt tokens per step are halved (or the newest
  decoding rows preempted) and the look is retried; ``stats.oom_retries`` counts it. Only a
  request that cannot run even alone fails, with the reason.

Greedy output per request equals ``model.generate``'s for that prompt alone (tests prove it on the
CPU), whatever else is in the batch, however often it is preempted or its prompt chunked.
"""

from __future__ import annotations

import logging
import random
import time
from collections.abc import Iterable, Sequence
from typing import TYPE_CHECKING, Any

from .blocks import NULL_BLOCK, OutOfBlocks
from .kv_manager import KVCacheManager
from .memory import EngineSize
from .report import GenerationReport
from .runner import CaptureFailed, InflightUnavailable, ModelRunner, StepSource, is_out_of_memory
from .sampler import GREEDY, SAMPLING, SamplerKind
from .sampling import DecodeRequest
from .scheduler import EngineRequest, EngineStats, Progress, RequestStatus, Scheduler

if TYPE_CHECKING:
    from .lora import EngineAdapter

log = logging.getLogger(__name__)

__all__ = ["NULL_BLOCK", "CaptureFailed", "EngineStats", "InflightBatch", "InflightUnavailable", "OutOfBlocks",
           "Progress"]


class InflightBatch:
    """Requests that join and leave a running decode batch; see the module's docstring.

    ``decoder``: the model's decode engine (``engine.FastDecoder``: its plan decision, tuning,
    compiled functions and capturer). ``size``: rows, blocks and budgets (``memory.size_engine``).
    Not thread-safe: one thread drives it (``add``, ``step``, ``retire``)."""

    def __init__(self, decoder: StepSource, size: EngineSize, device: Any, *, preallocate: bool = False) -> None:
        if size.rows < 1 or size.blocks < 2:
            raise ValueError(f"an in-flight batch needs rows >= 1 and blocks >= 2, got {size.rows} and {size.blocks}")
        self.decoder, self.size, self.device = decoder, size, device
        self.tuning = decoder.tuning
        self.stats = EngineStats()
        self.runner = ModelRunner(decoder, size, device, self.stats, preallocate=preallocate)
        self.kv = KVCacheManager(self.runner.cache.pool)
        self.scheduler = Scheduler(self.kv, size.rows, size.max_batch_tokens, self.runner, self.stats,
                                   self.runner.report)
        self._handles = 0

    # -- what the engine is -------------------------------------------------------------------------
    @property
    def report(self) -> GenerationReport:
        """The report of the current ``generate`` call (or of the server's run)."""
        return self.runner.report

    @report.setter
    def report(self, report: GenerationReport) -> None:
        self.runner.report = self.scheduler.report = report

    @property
    def pool(self) -> Any:
        return self.kv.pool

    @property
    def cache(self) -> Any:
        return self.runner.cache

    @property
    def rows(self) -> int:
        return self.size.rows

    @property
    def width(self) -> int:
        return self.size.max_blocks_per_row

    @property
    def block_size(self) -> int:
        return self.size.block_size

    @property
    def vocab(self) -> int:
        return self.runner.vocab

    @property
    def buckets(self) -> list[int]:
        """The row counts decode-only steps run (one captured step each)."""
        return self.runner.buckets

    @property
    def token_budget(self) -> int:
        return self.scheduler.token_budget

    @property
    def busy(self) -> int:
        """Rows decoding now."""
        return len(self.scheduler.decoding)

    @property
    def waiting(self) -> int:
        """Requests waiting to be let in (or to be recomputed after a preemption)."""
        return len(self.scheduler.waiting)

    @property
    def prefilling(self) -> int:
        return len(self.scheduler.running) - len(self.scheduler.decoding)

    @property
    def pending(self) -> bool:
        """Any request in the batch (waiting, prefilling or decoding)."""
        return bool(self.scheduler.requests)

    def handles(self) -> list[int]:
        """The handles of every request in the batch (waiting, prefilling or decoding)."""
        return list(self.scheduler.requests)

    def decoding_handles(self) -> list[int]:
        """The handles of the decoding requests, by row."""
        return [r.handle for r in self.scheduler.decoding]

    def describe(self) -> dict[str, Any]:
        """The batch's shape and engine, as shown when a server starts."""
        decoder = self.decoder
        return {"rows": self.rows, "context": self.size.context, "buckets": list(self.buckets),
                "blocks": self.pool.usable, "block_size": self.block_size, "max_batch_tokens": self.token_budget,
                "prefix_caching": self.pool.prefix_caching, "kv_bytes": self.cache.bytes,
                "step": decoder.step, "graphs": decoder.graphs, "compiled": decoder.compile_backend,
                "attention_kernel": self.report.attention_kernel, "step_reason": decoder.step_reason,
                "flat_steps": self.runner.flat_buckets if self.runner.flat_capturable() else [],
                "flat_compiled": self.runner.flat_compiled,
                "notes": list(decoder.notes)}

    # -- set-up -------------------------------------------------------------------------------------
    def warm_up(self, kinds: Sequence[SamplerKind] = (GREEDY, SAMPLING)) -> None:
        """Compile and capture every step the engine will run, before any request joins (a server)."""
        if self.scheduler.requests:
            raise RuntimeError("warm_up() runs before any request joins")
        self.runner.warm_up(kinds)

    def profile(self, kinds: Sequence[SamplerKind] = (GREEDY, SAMPLING)) -> tuple[int, int, list[int]]:
        """``ModelRunner.profile`` (an idle batch's activation peaks, for a memory budget)."""
        return self.runner.profile(kinds)

    def buffer_bytes(self) -> int:
        """Device bytes the batch holds besides its KV cache."""
        return self.runner.buffer_bytes()

    def reset_compiled(self) -> None:
        """Forwards and steps built anew (the decoder turned graphs or compiling off or on)."""
        self.runner.reset_compiled()

    # -- LoRA adapters ------------------------------------------------------------------------------
    def load_adapter(self, name: str, path: str) -> None:
        """Load the PEFT LoRA adapter in ``path``: requests naming ``name`` (``DecodeRequest.adapter``)
        decode with it, in one batch with the base model's and other adapters' rows. ``ValueError``
        saying what is wrong (a missing file, an adapter that does not fit, a model whose own forward
        cannot run over the paged cache). Between looks only (the thread that steps the batch)."""
        from .lora import check_adapter_directory

        check_adapter_directory(path)
        blocker = self.runner.lora_forward().blocker()
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
        users = sum(1 for r in self.scheduler.requests.values() if r.adapter_key == adapter.key)
        self._collect_adapters()
        return users

    def _collect_adapters(self) -> None:
        """Remove from the model the unloaded adapters no request decodes with any more."""
        adapters = self.decoder.adapters
        if not adapters.holds_unloaded:
            return
        in_use = {r.adapter_key for r in self.scheduler.requests.values() if r.adapter_key is not None}
        for key in adapters.retired(in_use):
            adapters.delete(key)

    # -- joining and leaving --------------------------------------------------------------------------
    def fits(self, prompt_tokens: int, max_new_tokens: int) -> str | None:
        """Why a request of this size can never run in this batch, or ``None`` when it can."""
        total = prompt_tokens + max_new_tokens
        if prompt_tokens < 1 or max_new_tokens < 1:
            return "a request needs at least one prompt token and one new token"
        if total > self.size.context:
            return (f"{prompt_tokens} prompt tokens + {max_new_tokens} new tokens = {total} is more than the "
                    f"{self.size.context} tokens a request may have here")
        if self.kv.blocks_for(total - 1) > self.kv.usable:
            return f"{total} tokens need {self.kv.blocks_for(total - 1)} KV blocks; the cache holds {self.kv.usable}"
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
            self.scheduler.add(EngineRequest(self._handles, request, seed, adapters[i]))
            handles.append(self._handles)
        return handles

    def retire(self, handle: int) -> None:
        """Drop request ``handle`` wherever it is (ended, or its client left): blocks and row freed."""
        if self.scheduler.retire(handle):
            self._collect_adapters()

    def forget_prefixes(self) -> None:
        """Empty the prefix cache (the weights may have changed since its blocks were computed)."""
        self.kv.forget_prefixes()

    # -- a look -------------------------------------------------------------------------------------
    def step(self, steps: int | None = None) -> Progress:
        """One look: schedule, run a step with this look's prompt chunks (and every decoding row's next
        token) or up to ``steps`` (default ``DecodeTuning.inflight_steps``) decode-only steps; what
        they produced."""
        import torch

        progress = Progress()
        if not self.scheduler.requests:
            return progress
        began = time.perf_counter()
        steps = min(self.runner.max_steps, steps or self.tuning.inflight_steps)
        self.stats.looks += 1
        scheduler, runner = self.scheduler, self.runner
        with torch.inference_mode():
            scheduler.ensure_decode_blocks(steps)
            scheduled = scheduler.schedule()
            chunks = scheduled.chunks
            # A backend that compiles a graph per shape (buckets) runs the chunks apart, each padded.
            if chunks and not runner.bucketed and (scheduler.decoding or runner.flat_capturable()):
                rows_stepped = bool(scheduler.decoding)
                self._mixed(chunks, progress)
                steps = 0 if rows_stepped else steps
            elif chunks:
                self._prefill(chunks, progress)
            if scheduled.handed:
                logits = torch.stack([r.prefilled.logits for r in scheduled.handed if r.prefilled is not None])
                self._first_tokens(scheduled.handed, logits, progress)
            if steps and (chunks or scheduled.handed):
                scheduler.ensure_decode_blocks(steps)  # rows that just got their first token
            if steps and scheduler.decoding:
                self._decode(steps, progress)
        self._collect_adapters()
        self.stats.look_seconds += time.perf_counter() - began
        self._count_compiles()
        scheduler.end_look()
        return progress

    def _count_compiles(self) -> None:
        """Frames compiled since the warm-up ended (``EngineStats.compiles_after_warmup``), with a
        warning the first time: a shape the warm-up missed made a request wait for a compiler."""
        from .runner import compiled_frames

        warm = self.runner.warm_frames
        if warm is None:
            return
        compiles = compiled_frames() - warm
        if compiles > self.stats.compiles_after_warmup:
            if not self.stats.compiles_after_warmup:
                log.warning("intelrt engine: a step compiled after the warm-up (%d frame(s)): a shape the warm-up did "
                            "not run", compiles)
            self.stats.compiles_after_warmup = compiles

    def _mixed(self, chunks: list[tuple[EngineRequest, int]], progress: Progress) -> None:
        decoding = list(self.scheduler.decoding)
        try:
            sampled, logits = self.runner.mixed(decoding, chunks)
        except Exception as exc:
            if not is_out_of_memory(exc):
                raise
            self.decoder.backend.empty_cache(self.device)
            # Fewer prompt tokens first (the step's widest part); once they are down to a block,
            # fewer decoding rows.
            if sum(count for _, count in chunks) > self.block_size or len(decoding) <= 1:
                self.scheduler.prefill_ran_out(chunks, exc, progress)
            else:
                self.scheduler.decode_ran_out(exc, progress)
            return
        for request, tokens in zip(decoding, sampled, strict=True):
            self.scheduler.accept(request, tokens, 1, progress)
        self._chunks_done(chunks, logits, len(decoding), progress)

    def _prefill(self, chunks: list[tuple[EngineRequest, int]], progress: Progress) -> None:
        try:
            logits = self.runner.prefill(chunks)
        except Exception as exc:
            if not is_out_of_memory(exc):
                raise
            self.decoder.backend.empty_cache(self.device)
            self.scheduler.prefill_ran_out(chunks, exc, progress)
            return
        self._chunks_done(chunks, logits, 0, progress)

    def _chunks_done(self, chunks: list[tuple[EngineRequest, int]], logits: Any, first: int,
                     progress: Progress) -> None:
        """The chunks' keys and values are computed; the requests whose prompt is then complete get a
        row and their first token from their row of ``logits`` (the chunks' rows start at ``first``)."""
        complete = [(first + i, request) for i, (request, count) in enumerate(chunks)
                    if self.scheduler.computed(request, count)]
        if complete:
            self._first_tokens([r for _, r in complete], logits[[i for i, _ in complete]], progress)

    def _first_tokens(self, requests: list[EngineRequest], logits: Any, progress: Progress) -> None:
        """Rows for ``requests`` (prompts complete), their first tokens sampled from ``logits``."""
        for request in requests:
            self.scheduler.take_row(request)
        for request, tokens in zip(list(requests), self.runner.first_tokens(requests, logits), strict=True):
            self.scheduler.accept(request, tokens, 0, progress)
            if request.status is RequestStatus.DECODING:
                self.runner.arm_row(request)

    def _decode(self, steps: int, progress: Progress) -> None:
        decoding = list(self.scheduler.decoding)
        sampled, failure = self.runner.decode(decoding, steps)
        ran = len(sampled[0]) if sampled else 0
        if ran:
            for request, tokens in zip(decoding, sampled, strict=True):
                self.scheduler.accept(request, tokens, ran, progress)
        if failure is not None:
            self.decoder.backend.empty_cache(self.device)
            self.scheduler.decode_ran_out(failure, progress)

    def check(self) -> None:
        """Raise ``AssertionError`` when the host's bookkeeping disagrees with itself (tests)."""
        self.scheduler.check()
