"""The decode thread of a server: completions join the decode engine's in-flight batch, and their
text goes back to the event loop that answers the HTTP requests.

:class:`InflightDecodeThread` drives intelrt's decode engine (``decoding/inflight.py``): it hands
every accepted completion to the engine at once — the engine queues them, lets them in as KV
blocks and rows free up, prefills their prompts in chunks between decode steps, preempts and
recomputes when the cache runs out, and retries a step that runs out of device memory with fewer
rows — so an accepted completion is never failed for capacity (SPEC S1); only the queue limit
(``429`` before acceptance) says no. Models whose step cannot run over the paged cache (the plan
decodes with transformers' ``generate``, or an attention that takes no mask) get
:class:`SequentialDecodeThread`: one completion at a time, streamed through
:meth:`Loaded.generate_ids`. :func:`start_decode_thread` picks one and says why.
"""

from __future__ import annotations

import asyncio
import logging
import threading
import time
from collections import deque
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from ..decoding.inflight import InflightBatch
from ..decoding.runner import InflightUnavailable
from ..decoding.sampling import DecodeRequest, SampledToken
from .metrics import ServerMetrics
from .text import TextAssembler

if TYPE_CHECKING:
    from ..runtime.loaded import Loaded
    from .limits import ServingLimits

log = logging.getLogger(__name__)

IDLE_WAIT_S = 0.5
"""How long the idle decode thread sleeps before looking again (a submission wakes it at once)."""
CPU_HANDOFF_S = 0.001
"""On the CPU, the decode thread pauses this long after handing over a turn's text: its own torch
threads keep the cores busy, and the event loop's thread would otherwise wait for the GIL until the
batch ran dry, then send everything at once (measured on 2 cores: first text after the last token).
On an accelerator the decode thread waits for the device without the GIL, and never pauses."""


@dataclass(frozen=True)
class Piece:
    """New text of completion ``index`` (``tokens``: how many new tokens it came from;
    ``sampled``: those tokens, with their log-probabilities when the request asked for them)."""

    index: int
    text: str
    tokens: int
    sampled: tuple[SampledToken, ...] = ()


@dataclass(frozen=True)
class Ended:
    """Completion ``index`` is done: ``stop`` (end-of-sequence or a stop string) or ``length``."""

    index: int
    reason: str
    tokens: int


@dataclass(frozen=True)
class Failed:
    """The request cannot be finished (``status``: the HTTP status an unstarted answer gets)."""

    message: str
    status: int = 503


Event = Piece | Ended | Failed


class QueueFull(Exception):
    """More completions wait than the queue limit allows."""


class Sink:
    """Where one HTTP request's events go: an asyncio queue on the server's loop, filled from the
    decode thread."""

    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        self.loop = loop
        self.queue: asyncio.Queue[Event] = asyncio.Queue()


@dataclass(eq=False)
class Completion:
    """One completion a request asked for (its ``index`` among the request's choices)."""

    index: int
    request: DecodeRequest
    text: TextAssembler
    sink: Sink
    cancelled: bool = False
    tokens: int = 0
    handle: int | None = None


class DecodeThread:
    """A decode thread and its queue; subclasses say how completions are decoded."""

    engine = "?"

    def __init__(self, loaded: Loaded, limits: ServingLimits, metrics: ServerMetrics, reason: str) -> None:
        self.loaded, self.limits, self.metrics, self.reason = loaded, limits, metrics, reason
        self.ready = threading.Event()
        self.failure: str | None = None
        self._lock = threading.Condition()
        self._incoming: deque[Completion] = deque()
        self._waiting: deque[Completion] = deque()
        self._stopping = False
        self._abort: str | None = None
        self._outbox: list[tuple[Sink, Event]] = []
        self._handoff = CPU_HANDOFF_S if loaded.plan.backend.computes_on_host else 0.0
        self._thread = threading.Thread(target=self._main, name=f"intelrt-serve-{self.engine}", daemon=True)

    # -- called from the event loop ------------------------------------------------------------
    def start(self) -> None:
        self._thread.start()

    def submit(self, completions: Sequence[Completion]) -> None:
        """Queue ``completions`` (all or none); ``QueueFull`` when the queue limit would be passed,
        ``RuntimeError`` when the server is stopping or failed."""
        with self._lock:
            if self._stopping or self.failure is not None:
                raise RuntimeError(self.failure or "the server is shutting down")
            if self.queued() + len(completions) > self.limits.max_queue:
                raise QueueFull()
            self._incoming.extend(completions)
            self.metrics.queue_depth.set(self.queued())
            self._lock.notify()

    def cancel(self, completions: Sequence[Completion]) -> None:
        """The client left: its completions end at the decode thread's next look (their rows freed)."""
        with self._lock:
            for completion in completions:
                completion.cancelled = True
            self._lock.notify()

    def abort(self, message: str) -> None:
        """Fail every unfinished completion with ``message`` (the drain timeout passed)."""
        with self._lock:
            self._abort = message
            self._lock.notify()

    def stop(self, timeout: float | None = None) -> None:
        """Finish what is queued and running, then end the thread (``abort`` first to end sooner)."""
        with self._lock:
            self._stopping = True
            self._lock.notify()
        if self._thread.is_alive():
            self._thread.join(timeout)

    def describe(self) -> list[str]:
        return [f"engine: {self.engine}: {self.reason}"]

    def warmed_up(self) -> str | None:
        """What the warm-up spent its time on, said once it is done (``None``: nothing to say)."""
        return None

    def queued(self) -> int:
        """Completions accepted and not decoding yet (what the queue limit counts)."""
        return len(self._incoming) + len(self._waiting)

    def held(self) -> tuple[int, int, int]:
        """(completions the decode thread still holds, KV blocks they hold, KV blocks in all): all
        but the last 0 once the thread has stopped, or something leaked."""
        return self._busy() + self.queued(), 0, 0

    # -- the decode thread ---------------------------------------------------------------------
    def _main(self) -> None:
        from ..support.progress import step

        try:
            with step(f"warming up the decode loop ({self.engine}) before the first request"):
                self._warm_up()
        except Exception as exc:  # noqa: BLE001 - reported by /ready and to every request
            self.failure = f"the model failed to warm up ({type(exc).__name__}: {str(exc)[:300]})"
            log.error("intelrt serve: %s", self.failure, exc_info=exc)
            self._fail_all(self.failure)
            return
        self.ready.set()
        while True:
            with self._lock:
                while not (self._incoming or self._waiting or self._busy() or self._stopping or self._abort):
                    self._lock.wait(IDLE_WAIT_S)
                self._waiting.extend(self._incoming)
                self._incoming.clear()
                abort, stopping = self._abort, self._stopping
            if abort is not None:
                self._fail_all(abort)
                with self._lock:
                    self._abort = None
            elif not (stopping and not self._waiting and not self._busy()):
                try:
                    self._turn()
                except Exception as exc:  # noqa: BLE001 - the requests in flight learn it; the thread goes on
                    message = f"decoding failed ({type(exc).__name__}: {str(exc)[:300]})"
                    log.error("intelrt serve: %s", message, exc_info=exc)
                    self._fail_all(message)
            self._flush()
            self.metrics.queue_depth.set(self.queued())
            self.metrics.rows_in_flight.set(self._decoding())
            if stopping and not self._waiting and not self._busy():
                return

    def _send(self, completion: Completion, event: Event) -> None:
        self._outbox.append((completion.sink, event))

    def _flush(self) -> None:
        """Hand this turn's events to the event loop in one call (one wake-up, not one per token)."""
        if not self._outbox:
            return
        outbox, self._outbox = self._outbox, []
        loop = outbox[0][0].loop
        try:
            loop.call_soon_threadsafe(_deliver, outbox)
        except RuntimeError:  # the loop is closed: nobody is left to answer
            log.debug("intelrt serve: %d event(s) for a closed event loop dropped", len(outbox))
        if self._handoff:
            time.sleep(self._handoff)

    def _text(self, completion: Completion, tokens: list[int], sampled: tuple[SampledToken, ...] = ()) -> bool:
        """Send the text of ``tokens``; True when a stop string ended the completion."""
        completion.tokens += len(tokens)
        self.metrics.generated_tokens.inc(len(tokens))
        text = completion.text.feed(tokens)
        if text or tokens:
            self._send(completion, Piece(completion.index, text, len(tokens), sampled))
        return completion.text.stopped

    def _end(self, completion: Completion, reason: str) -> None:
        tail = completion.text.flush()
        if tail:
            self._send(completion, Piece(completion.index, tail, 0))
        self._send(completion, Ended(completion.index, reason, completion.tokens))

    def _drop_cancelled_waiting(self) -> None:
        if any(c.cancelled for c in self._waiting):
            self._waiting = deque(c for c in self._waiting if not c.cancelled)

    def _fail_all(self, message: str) -> None:
        with self._lock:
            self._waiting.extend(self._incoming)
            self._incoming.clear()
        failed = {id(c.sink): c for c in [*self._waiting, *self._running()]}
        for completion in failed.values():
            self._send(completion, Failed(message))
        self._waiting.clear()
        self._clear_running()

    def _warm_up(self) -> None:
        raise NotImplementedError

    def _turn(self) -> None:
        raise NotImplementedError

    def _busy(self) -> int:
        raise NotImplementedError

    def _decoding(self) -> int:
        """Completions decoding now (the rows-in-flight gauge)."""
        return self._busy()

    def _running(self) -> list[Completion]:
        raise NotImplementedError

    def _clear_running(self) -> None:
        raise NotImplementedError


def _deliver(outbox: list[tuple[Sink, Event]]) -> None:
    for sink, event in outbox:
        sink.queue.put_nowait(event)


class InflightDecodeThread(DecodeThread):
    """Completions join and leave the decode engine's in-flight batch between its looks."""

    engine = "in-flight batching"

    def __init__(self, loaded: Loaded, limits: ServingLimits, metrics: ServerMetrics, reason: str,
                 batch: InflightBatch) -> None:
        super().__init__(loaded, limits, metrics, reason)
        self.batch = batch
        self._rows: dict[int, Completion] = {}
        """Completions the engine holds (waiting in it or running), by handle."""
        self._counted: tuple[float, ...] = (0,) * 13
        self._engine_lock = threading.Lock()
        """Held by a look and by loading or unloading an adapter (which change the model's modules)."""

    # -- LoRA adapters (called off the event loop: ``serving.adapters.Adapters``) ------------------
    def load_adapter(self, name: str, path: str) -> None:
        """Load a LoRA adapter between looks (after warm-up); ``ValueError`` saying what is wrong."""
        while not self.ready.wait(IDLE_WAIT_S):  # a failed warm-up never sets ready
            if self.failure is not None or not self._thread.is_alive():
                raise RuntimeError(self.failure or "the decode thread has stopped")
        with self._engine_lock:
            self.batch.load_adapter(name, path)

    def unload_adapter(self, name: str) -> None:
        """New requests cannot name it any more; those decoding with it finish with it, then its
        weights leave the model (``InflightBatch.unload_adapter``, as ``vllm serve`` does)."""
        with self._engine_lock:
            users = self.batch.unload_adapter(name)
        if users:
            log.info("intelrt serve: LoRA adapter %r unloaded; its weights leave the model when its %d running "
                     "request(s) end", name, users)

    def describe(self) -> list[str]:
        shape = self.batch.describe()
        lines = [*super().describe(),
                 f"decode step: {shape['step']}" + (f" ({shape['step_reason']})" if shape["step_reason"] else "")
                 + f", compiled: {shape['compiled'] or 'no'}, device graphs: {shape['graphs'] or 'none'}"
                 + (", Triton decode attention" if shape["attention_kernel"] else ""),
                 f"row buckets (one captured step each): {', '.join(map(str, shape['buckets']))}",
                 f"prefix caching: {'on' if shape['prefix_caching'] else 'off'}"]
        return lines + [f"note: {n}" for n in shape["notes"]]

    def _warm_up(self) -> None:
        self.batch.warm_up()
        self.metrics.kv_blocks.set(self.batch.pool.usable)

    def warmed_up(self) -> str | None:
        # a start of minutes on a GPU: where it went (docs/performance.md), without -v
        stats = self.batch.stats
        return (f"warmed up in {stats.warm_up_seconds:.1f} s: {stats.warm_up_compiles} frames compiled, "
                f"{stats.warm_up_captures} steps captured"
                + (" (the steps with prompt chunks compiled)" if self.batch.runner.flat_compiled else ""))

    def _busy(self) -> int:
        return len(self._rows)

    def _decoding(self) -> int:
        return self.batch.busy

    def queued(self) -> int:
        return super().queued() + self.batch.waiting

    def held(self) -> tuple[int, int, int]:
        pool = self.batch.pool
        batch = self.batch
        engine = batch.busy + batch.waiting + batch.prefilling  # 0 with _rows empty, unless the engine leaked one
        return max(len(self._rows), engine) + super().queued(), pool.used, pool.usable

    def _running(self) -> list[Completion]:
        return list(self._rows.values())

    def _clear_running(self) -> None:
        with self._engine_lock:  # retiring may remove an unloaded adapter from the model
            for handle in list(self._rows):
                self.batch.retire(handle)
        self._rows.clear()

    def _turn(self) -> None:
        with self._engine_lock:
            self._look()

    def _look(self) -> None:
        """Free what clients left, hand new completions to the engine, run one of its looks."""
        for handle, completion in list(self._rows.items()):
            if completion.cancelled:
                self.batch.retire(handle)
                del self._rows[handle]
        self._drop_cancelled_waiting()
        if self._waiting:
            joining = list(self._waiting)
            self._waiting.clear()
            joining = self._without_unloaded_adapters(joining)
            handles = self.batch.add([c.request for c in joining])
            for handle, completion in zip(handles, joining, strict=True):
                completion.handle = handle
                self._rows[handle] = completion
        if self.batch.pending:
            progress = self.batch.step()
            for handle, message in progress.failed.items():
                self._send(self._rows.pop(handle), Failed(f"the request could not be decoded: {message}"))
            self._progress(progress.outputs, progress.finished)
        self._count()

    def _without_unloaded_adapters(self, joining: list[Completion]) -> list[Completion]:
        """``joining`` less the completions whose adapter was unloaded after they were accepted (each
        answered 404 by itself, so the others still join)."""
        loaded = set(self.batch.decoder.adapters.names)
        kept = []
        for completion in joining:
            adapter = completion.request.adapter
            if adapter is None or adapter in loaded:
                kept.append(completion)
            else:
                self._send(completion, Failed(f"the LoRA adapter {adapter!r} was unloaded before this request "
                                              "started", status=404))
        return kept

    def _progress(self, outputs: dict[int, list[SampledToken]], finished: dict[int, str]) -> None:
        for handle, sampled in outputs.items():
            completion = self._rows.get(handle)
            if completion is None:
                continue
            if self._text(completion, [t.token_id for t in sampled], tuple(sampled)):
                if handle not in finished:
                    self.batch.retire(handle)
                finished = {**finished, handle: "stop"}
        for handle, reason in finished.items():
            completion = self._rows.pop(handle, None)
            if completion is not None:
                self._end(completion, reason)

    def _count(self) -> None:
        """The engine's own metrics: blocks in use, preemptions, out-of-memory retries, prefix hits."""
        stats, pool, metrics = self.batch.stats, self.batch.pool, self.metrics
        counters = (metrics.preemptions, metrics.oom_retries, metrics.prefix_queried_tokens, metrics.prefix_hit_tokens,
                    metrics.engine_steps, metrics.engine_mixed_steps, metrics.engine_prefill_tokens,
                    metrics.engine_looks, metrics.engine_look_seconds, metrics.engine_wait_seconds,
                    metrics.engine_mixed_device_seconds, metrics.engine_decode_device_seconds,
                    metrics.engine_compiles_after_warmup)
        now = (stats.preemptions, stats.oom_retries, pool.stats.queried_tokens, pool.stats.hit_tokens, stats.steps,
               stats.mixed_steps, stats.prefill_tokens, stats.looks, stats.look_seconds, stats.wait_seconds,
               stats.mixed_device_seconds, stats.decode_device_seconds, stats.compiles_after_warmup)
        for counter, value, before in zip(counters, now, self._counted, strict=True):
            counter.inc(value - before)
        metrics.kv_blocks_used.set(pool.used)
        self._counted = now


class _Halt(Exception):
    """Raised in the streamer to end ``generate`` early (stop string, client gone, abort)."""


class _CompletionStreamer:
    """A transformers streamer (``put`` / ``end``) that turns one completion's tokens into events;
    ``halted`` says why it ended ``generate`` early (``stop``, ``gone``, ``abort``)."""

    def __init__(self, decode_thread: SequentialDecodeThread, completion: Completion) -> None:
        self.decode_thread, self.completion = decode_thread, completion
        self.prompt_seen = False
        self.halted: str | None = None
        self.last: int | None = None

    def put(self, value: Any) -> None:
        if not self.prompt_seen:  # generate hands over the prompt first
            self.prompt_seen = True
            return
        decode_thread, completion = self.decode_thread, self.completion
        if completion.cancelled or decode_thread._abort is not None:
            self.halted = "gone" if completion.cancelled else "abort"
            raise _Halt()
        tokens = [int(t) for t in value.reshape(-1).tolist()]
        if tokens:
            self.last = tokens[-1]
        stopped = decode_thread._text(completion, tokens)
        decode_thread._flush()
        if stopped:
            self.halted = "stop"
            raise _Halt()

    def end(self) -> None:
        """Nothing to do: the decode thread ends the completion when ``generate`` returns."""


class SequentialDecodeThread(DecodeThread):
    """One completion at a time through :meth:`Loaded.generate_ids` with a streamer (whatever path
    the plan gives a single prompt)."""

    engine = "one completion at a time"

    def __init__(self, loaded: Loaded, limits: ServingLimits, metrics: ServerMetrics, reason: str) -> None:
        super().__init__(loaded, limits, metrics, reason)
        self._current: Completion | None = None
        self._eos = set(_eos_ids(loaded))

    def _warm_up(self) -> None:
        self.loaded.generate_ids([0], max_new_tokens=2)

    def _busy(self) -> int:
        return 1 if self._current is not None else 0

    def _running(self) -> list[Completion]:
        return [self._current] if self._current is not None else []

    def _clear_running(self) -> None:
        self._current = None

    def _turn(self) -> None:
        self._drop_cancelled_waiting()
        if not self._waiting:
            return
        completion = self._current = self._waiting.popleft()
        self.metrics.rows_in_flight.set(1)
        self.metrics.queue_depth.set(len(self._waiting))
        request = completion.request
        params = request.params
        streamer = _CompletionStreamer(self, completion)
        settings: dict[str, Any] = {"max_new_tokens": params.max_new_tokens, "do_sample": not params.greedy,
                                    "streamer": streamer}
        if params.stop_token_ids:
            settings["eos_token_id"] = list(params.stop_token_ids)
        if not params.greedy:
            import torch

            settings.update(temperature=params.temperature, top_p=params.top_p, top_k=params.top_k)
            torch.manual_seed(params.seed if params.seed is not None else 0)
        try:
            self.loaded.generate_ids(list(request.prompt), **settings)
        except Exception:
            if streamer.halted is None:
                raise  # the thread's loop fails this completion with the rest
        self._current = None
        if streamer.halted == "abort":
            self._send(completion, Failed(self._abort or "the server is shutting down"))
        elif streamer.halted != "gone":
            length = streamer.halted != "stop" and streamer.last not in self._eos \
                and completion.tokens >= params.max_new_tokens
            self._end(completion, "length" if length else "stop")


def _eos_ids(loaded: Loaded) -> tuple[int, ...]:
    """The end-of-sequence ids of the model's generation config (what ``generate`` stops at)."""
    config = getattr(loaded.model, "generation_config", None)
    value = getattr(config, "eos_token_id", None)
    if value is None:
        return ()
    return (int(value),) if isinstance(value, int) else tuple(int(v) for v in value)


def start_decode_thread(loaded: Loaded, limits: ServingLimits, metrics: ServerMetrics) -> DecodeThread:
    """The decode thread for ``loaded`` (the decode engine's in-flight batch where the plan's fast loop
    runs over the paged cache), started: it warms up on its own thread (``ready`` is set after)."""
    decoder = loaded.fast_decoder()
    decode_thread: DecodeThread
    if decoder is None:
        decode = loaded.plan.decisions.get("decode")
        why = decode.reason if decode is not None else "the plan has no decode decision"
        decode_thread = SequentialDecodeThread(loaded, limits, metrics,
                                        f"the plan decodes with transformers' generate ({why})")
    else:
        try:
            if limits.engine is None:
                raise InflightUnavailable(limits.engine_blocker or "the engine could not be sized for this model")
            batch = InflightBatch(decoder, limits.engine, loaded.model.device, preallocate=True)
        except InflightUnavailable as why:
            decode_thread = SequentialDecodeThread(loaded, limits, metrics, f"the fast decode loop cannot batch in flight: "
                                            f"{why}")
        else:
            decode_thread = InflightDecodeThread(loaded, limits, metrics, "requests join and leave the decode engine's "
                                          "batch between steps (paged KV cache, chunked prefill)", batch)
    decode_thread.start()
    return decode_thread
