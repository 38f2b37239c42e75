"""The compiled decode step, built on a worker thread while the uncompiled one decodes (issue 31).

An ``adaptive`` plan (``workload="auto"``, the Python API's default) used to decode with the
captured, uncompiled step until ``DecodeTuning.compile_after_tokens`` tokens had been decoded, and
then stop for the compile: slower than plain static cache + compile for the first 32K tokens, then
a pause nobody asked for. :class:`BackgroundCompilingDecoder` instead starts, after the first look
of each batch shape (``FastDecoder._shape_key``: rows, blocks per row, block size), the compile of
that shape's compact decode step on a worker thread, while the uncompiled (captured) step serves;
at the first look boundary after the compiled step is built it takes over the batch: the same
paged KV cache, block tables, positions and sampler, so the tokens continue as they were (greedy
output equals ``model.generate``'s before and after the swap), and with device graphs the step is
captured anew. Nothing on the caller's thread waits for a compile.

How it stays out of the caller's way (torch 2.13):

* dynamo compiles on the thread that calls a ``torch.compile`` function and keeps the result with
  the function's code object, for every thread: the worker calls the compiled ``CompactModel.decode``
  (and, with ``DecodeTuning.compiled_record``, the compiled ``inflight.record_step``) once per row
  bucket of the batch, with the arguments the batch's steps will pass — the batch's own KV cache,
  written only at the null block (``blocks.NULL_BLOCK``, where idle rows write anyway, never read by
  a live row), zeroed row state of the buckets' shapes — under ``inference_mode``, as the engine
  runs; the caller's later calls find those entries, and nothing recompiles
  (``tests/integration/test_decode_background.py`` records which thread compiled every graph);
* the worker's device work (one call per bucket, inductor's timing of kernel candidates) runs on a
  stream of its own, started only after the batch's first look (its first steps captured); while
  it runs, new captures are put off (those steps run uncaptured until the swap) — CUDA forbids some
  calls from other threads while a stream captures, and a capture must not record the worker's work;
* compiling is Python that holds the GIL for long stretches: while the worker runs, Python's thread
  switch interval is ``SWITCH_INTERVAL`` (0.5 ms instead of 5 ms), so the decoding thread waits at
  most that long for the GIL between its launches;
* the compile cache is keyed as the plan's compiled step is (``compile_cache.py``): a later process
  finds the artifacts and its worker builds in seconds;
* a worker is a daemon thread: a process that ends while a compile runs does not wait for it.

Only ``FastDecoder.generate`` (``Loaded.generate`` and ``stream``) swaps; a server's batch
(``intelrt serve``) warms its steps up at start as the plan says. Measured on the CPU only (the
tests); on a GPU, ``intelrt bench --shape NAME --default-path`` times the first tokens of a fresh
process and the steady state after the swap. Inductor's autotuning on the worker times kernels while
the decode loop shares the GPU, so it may choose other configurations than a compile on an idle GPU.
"""

from __future__ import annotations

import contextlib
import logging
import sys
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

from ..hooks.payloads import DecodeChoice
from .engine import FastDecoder
from .forwards import CompactForward
from .inflight import MAX_STOPS, InflightBatch, record_step
from .tuning import DecodeTuning

log = logging.getLogger(__name__)
progress = logging.getLogger("intelrt.progress")

SWITCH_INTERVAL = 0.0005
"""Python's thread switch interval (seconds) while a step compiles beside decoding (default 0.005)."""

ShapeKey = tuple[Any, ...]
"""A batch shape as ``FastDecoder._shape_key`` names it (what a compiled step is specialised to)."""


@dataclass(frozen=True)
class Swap:
    """A batch's step replaced by its compiled form: ``shape`` (rows, cache slots per row), the token
    of the call at which it happened (tokens before it came from the uncompiled step; 0: at the
    call's start) and how long the compile took."""

    shape: tuple[int, int]
    token: int
    compile_seconds: float


class BackgroundCompile:
    """``build()`` on a daemon thread (started by ``start``); its outcome read without waiting."""

    def __init__(self, key: ShapeKey, build: Callable[[], None], what: str, name: str) -> None:
        self.key, self._build, self.what = key, build, what
        self._done = threading.Event()
        self.error: BaseException | None = None
        self.seconds = 0.0
        self._thread = threading.Thread(target=self._run, name=name, daemon=True)

    def start(self) -> None:
        self._thread.start()

    def _run(self) -> None:
        from ..support.progress import step

        started = time.perf_counter()
        try:
            with _switching_often(), step(self.what):
                self._build()
        except BaseException as exc:  # noqa: BLE001 - reported to the decoding thread, which goes on without it
            self.error = exc
        finally:
            self.seconds = time.perf_counter() - started
            self._done.set()

    @property
    def done(self) -> bool:
        return self._done.is_set()

    def wait(self, timeout: float | None = None) -> bool:
        """Block until the build ends (or ``timeout`` seconds pass); True when it has ended."""
        return self._done.wait(timeout)


@contextlib.contextmanager
def _switching_often() -> Iterator[None]:
    """Python's switch interval at ``SWITCH_INTERVAL`` while the block runs (one compile at a time)."""
    before = sys.getswitchinterval()
    sys.setswitchinterval(min(before, SWITCH_INTERVAL))
    try:
        yield
    finally:
        sys.setswitchinterval(before)


class BackgroundCompilingDecoder(FastDecoder):
    """The fast decoder of an ``adaptive`` plan whose step is the compact step: each batch shape
    starts uncompiled (captured where the plan has graphs) and its compiled step, built on a worker
    thread (one at a time), replaces it at a look boundary once built. Other plans, and a compact
    step that falls back to the model's own forward, behave as :class:`FastDecoder`."""

    def __init__(self, model: Any, choice: DecodeChoice, capturer: Callable[..., Callable[[], object]] | None,
                 tuning: DecodeTuning | None = None) -> None:
        super().__init__(model, choice, capturer, tuning)
        self.background_backend: str | None = self._deferred
        """The backend the worker compiles with (``FastDecoder._deferred`` stays set: the compile
        cache's key is the plan's compiled step)."""
        self._built: set[ShapeKey] = set()
        self._seconds: dict[ShapeKey, float] = {}
        """How long each built shape's compile took."""
        self._decode_fn: Callable[..., Any] | None = None
        self._record_fn: Callable[..., Any] | None = None
        self._job: BackgroundCompile | None = None
        self._job_compact: Any = None
        self._failed: str | None = None
        self._running_compiled = False
        """Whether ``compile_backend`` is set now: the current batch runs its shape's compiled step."""
        self.swaps: list[Swap] = []
        """Every swap so far, in order."""

    @property
    def background(self) -> bool:
        """Compiles run on the worker: an adaptive plan, the compact step, no failed compile."""
        return self.background_backend is not None and self.step == "compact" and self._failed is None

    @property
    def compiling(self) -> BackgroundCompile | None:
        """The compile running on the worker, if any."""
        return self._job if self._job is not None and not self._job.done else None

    def wait_for_compile(self, timeout: float | None = None) -> bool:
        """Block until the running background compile, if any, ends; True when none runs any more."""
        job = self._job
        return job is None or job.wait(timeout)

    # -- FastDecoder's hooks ---------------------------------------------------------------------------
    def _compile_from_now(self, why: str) -> None:
        if self.background:
            return  # the worker compiles; the caller's thread never switches to a compile of its own
        super()._compile_from_now(why)

    def _forget_compact(self) -> None:
        super()._forget_compact()
        # Compiled from the old compact step (a running job's result is dropped when it ends).
        self._built.clear()
        self._decode_fn = self._record_fn = None
        if self._running_compiled:
            self._run_compiled(False)

    def disable(self, what: str, exc: BaseException) -> None:
        super().disable(what, exc)
        if not what.startswith("graph") and self.background:  # the swapped-in step failed: not tried again
            self._failed = f"{type(exc).__name__}: {str(exc)[:300]}"
            self._deferred = None
            self._running_compiled = False

    def capture(self, fn: Callable[[], object], warmup: int, report: Any) -> Callable[[], object]:
        if self.compiling is not None:  # no capture beside the worker's device work: uncaptured until the swap
            return fn
        return super().capture(fn, warmup, report)

    def _before_call(self, batch: InflightBatch, key: ShapeKey) -> None:
        """The call runs its shape's compiled step when the worker has built it, else the uncompiled one."""
        if not self.background:
            return
        self._take_finished(batch)
        if self.background:
            self._switch(batch, key, 0)

    def _after_look(self, batch: InflightBatch, key: ShapeKey, produced: int) -> None:
        """At a look boundary: a finished compile swapped in, or the shape's compile started."""
        if not self.background:
            return
        self._take_finished(batch)
        if not self.background:
            return
        self._switch(batch, key, produced)
        if self._job is None and key not in self._built:
            self._start(batch, key)

    # -- the swap ------------------------------------------------------------------------------------
    def _run_compiled(self, compiled: bool) -> None:
        """Point the decoder's compile settings at the worker's compiled step, or at none."""
        self._running_compiled = compiled
        if compiled:
            self.compile_backend, self.attention_kernel = self.background_backend, self._planned_kernel
            self._compiled_decode, self._compiled_record = self._decode_fn, self._record_fn
        else:
            self.compile_backend, self.attention_kernel = None, False

    def _switch(self, batch: InflightBatch, key: ShapeKey, produced: int) -> None:
        """``batch`` steps compiled when its shape is built, uncompiled when not (its forwards,
        steps and captures made anew when that changes; the KV cache and row state stay)."""
        compiled = key in self._built
        if compiled == self._running_compiled:
            return
        self._run_compiled(compiled)
        batch._reset_compiled()
        batch.report.attention_kernel = bool(getattr(batch._forward(batch.buckets[-1]), "fused_attention", False))
        if compiled:
            self._compiled_keys.add(key)
            job_seconds = self._seconds.get(key, 0.0)
            swap = Swap((batch.rows, batch.width * batch.block_size), produced, job_seconds)
            self.swaps.append(swap)
            progress.info("the compiled decode step (%s) took over %d row(s) x %d cache slots at token %d, after "
                          "%.1f s of compiling in the background", self.background_backend, *swap.shape, produced,
                          job_seconds)

    def _take_finished(self, batch: InflightBatch) -> None:
        """A finished job's outcome: its shape built, or the background compile off (a note)."""
        job = self._job
        if job is None or not job.done:
            return
        self._job = None
        if job.error is not None:
            self._failed = f"{type(job.error).__name__}: {str(job.error)[:300]}"
            self._deferred = None  # not tried again, on this thread either
            message = (f"the background compile ({self.background_backend}) failed ({self._failed}); decoding "
                       "without it from now on")
            log.warning("intelrt fast decode: %s", message)
            log.debug("intelrt background compile failure", exc_info=job.error)
            self.notes.append(message)
            batch.report.notes.append(message)
            if self._running_compiled:  # an earlier shape's compiled step: off too, so nothing compiles here
                self._run_compiled(False)
            batch._reset_compiled()  # the steps put off while it ran are captured now
            return
        if self._job_compact is self._compact:
            self._built.add(job.key)
            self._seconds[job.key] = job.seconds

    # -- the background compile ------------------------------------------------------------------------
    def _start(self, batch: InflightBatch, key: ShapeKey) -> None:
        """Start compiling ``batch``'s shape on the worker."""
        import torch

        compact = self._compact
        backend = self.background_backend
        if compact is None or backend is None:
            return
        if self._decode_fn is None:  # one compiled function for every shape: dynamo keeps an entry per shape
            self._decode_fn = torch.compile(compact.decode, backend=backend)
            self._record_fn = (torch.compile(record_step, backend=backend) if self.tuning.compiled_record
                               else None)
        self._job_compact = compact
        what = (f"compiling the decode step for {batch.rows} row(s) x {batch.width} cache blocks with {backend} in "
                "the background (the uncompiled step decodes meanwhile)")
        self._job = BackgroundCompile(key, lambda: self._build(compact, batch, key), what,
                                      f"intelrt-compile-{batch.rows}x{batch.width}")
        self._job.start()

    def _build(self, compact: Any, batch: InflightBatch, key: ShapeKey) -> None:
        """On the worker: every row bucket of ``batch``'s compiled step called once, with the
        arguments its steps will pass (so that the caller's calls find it compiled)."""
        import torch

        decode, record, device = self._decode_fn, self._record_fn, batch.device
        assert decode is not None
        persisted = self.background_backend == "inductor" and self.tuning.persist_compiled
        if persisted:
            self._cache(device).load(key)
        long = {"dtype": torch.long, "device": device}
        with torch.inference_mode(), self.compiler_settings(self.background_backend), _own_stream(device):
            for bucket in batch.buckets:
                forward = CompactForward(compact, batch.cache, decode, gemv=bucket <= self.tuning.gemv_max_rows,
                                         fused_attention=self._planned_kernel)
                zeros = torch.zeros((bucket,), **long)
                # Written at slot 0 of the null block, as an idle row writes: no live row reads it.
                logits = forward.decode(zeros[:, None], zeros[:, None], zeros, torch.zeros((bucket, batch.width), **long))
                if record is not None:
                    record(logits.argmax(-1), torch.zeros((bucket, 1), **long), torch.zeros((bucket, 1), **long),
                           torch.zeros((bucket,), **long), torch.zeros((bucket, batch.width), **long),
                           torch.ones((bucket,), dtype=torch.bool, device=device), torch.zeros((bucket,), **long),
                           torch.full((bucket, MAX_STOPS), -1, **long), torch.zeros((bucket, batch.max_steps), **long),
                           torch.zeros((1,), **long), batch.block_size, batch.width)
            if device.type != "cpu":
                torch.accelerator.synchronize(device)
        if persisted:
            self._cache(device).save(key)


@contextlib.contextmanager
def _own_stream(device: Any) -> Iterator[None]:
    """The worker's device work on a stream of its own (none on the CPU)."""
    import torch

    if device.type == "cpu":
        yield
        return
    module = torch.get_device_module(device.type)
    module.set_device(device)
    with module.stream(module.Stream(device)):
        yield
