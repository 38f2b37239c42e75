"""The compiled decode step built where the decode loop does not wait for it, and swapped in at a
step boundary (issues 31 and 39).

An ``adaptive`` plan (``workload="auto"``, the Python API's default) decodes from the first call with
the uncompiled step (captured where the plan has device graphs) and never waits for a compile:

1. the first call of a batch whose compiled graphs (``compiled_step.step_graphs``: one per row class
   of the compact step with symbolic shapes, else one per row bucket of the batch's shape) are not
   built yet starts a compile worker (``compile_worker.py``): another process, which compiles them
   with nothing cached and keeps what it made in inductor's caches and intelrt's compile cache. It
   holds none of the decoding process's interpreter lock, so the decode loop goes on at its own
   speed, and device graphs are captured as usual;
2. at each look (every ``eos_check_every`` steps) the loop asks, without waiting, whether the worker
   is done. Then a thread of this process makes the same calls (``compiled_step.build``): dynamo
   traces each graph again (seconds: its bytecode is not kept across processes) and inductor finds
   the rest — code, kernels, tuned configurations — in its caches. While that thread runs, Python's
   switch interval is ``SWITCH_INTERVAL`` (so the decode loop waits at most that long for the GIL)
   and new device-graph captures are put off (a capture must not record the thread's device work,
   which runs on a stream of its own);
3. at the next look boundary the batch's step becomes the compiled one — the same paged KV cache,
   block tables, positions and sampler, so the tokens go on exactly as they were (greedy output
   equals ``model.generate``'s across the swap) — and is captured anew.

A process whose compile cache already holds every graph of its first call (an earlier process
compiled them) builds them at that call, on the caller's thread, before the first token: dynamo's
trace and cache hits, seconds, after which the first call runs compiled.

A worker that fails or runs past ``DecodeTuning.compile_timeout`` is stopped and said (a warning, a
note in ``Loaded.last_generation``); the uncompiled step goes on and no compile is tried again. A
batch whose worker cannot run — a model that its config does not rebuild (quantized in memory,
adapted), or too little free device memory for the worker's copy of the weights (``worker_blocker``)
— keeps the engine's own rule (``FastDecoder``: compiled at once from the compile cache, else once
``DecodeTuning.compile_after_tokens`` tokens have been decoded), and a note says so.

Only ``FastDecoder.generate`` (``Loaded.generate`` and ``stream``) swaps; a server's batch
(``intelrt serve``) warms its steps up at start as its plan says.
"""

from __future__ import annotations

import contextlib
import logging
import sys
import threading
import time
import weakref
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any

from ..hooks.backend import Backend
from ..hooks.payloads import DecodeChoice
from .compile_worker import CompileJob, CompileWorker
from .compiled_step import StepGraph, build, step_graphs
from .engine import FastDecoder, dynamic_rows
from .inflight import InflightBatch
from .tuning import DecodeTuning

log = logging.getLogger(__name__)
progress = logging.getLogger("intelrt.progress")

SWITCH_INTERVAL = 0.0005
"""Python's thread switch interval (seconds) while a thread builds the step beside decoding (default 0.005)."""
WORKER_MEMORY_MARGIN = 1.25
"""The free device memory a compile worker needs, as a multiple of the model's weights (its own copy,
its activations and its runtime's context)."""

GraphKey = tuple[Any, ...]


@dataclass(frozen=True)
class Swap:
    """A batch's step replaced by its compiled form: ``shape`` (rows, cache slots per row), the token
    of the call at which it happened (tokens before it came from the uncompiled step; 0: at the
    call's start) and how long building it took (the worker and this process's thread)."""

    shape: tuple[int, int]
    token: int
    compile_seconds: float


class BackgroundCompile:
    """``build()`` on a thread of its own (started by ``start``; the interpreter's exit waits for it);
    its outcome read without waiting."""

    def __init__(self, build: Callable[[], None], what: str, name: str) -> None:
        self._build, self.what = build, what
        self._done = threading.Event()
        self.error: BaseException | None = None
        self.seconds = 0.0
        self._name = name

    def start(self) -> None:
        from ..support.torch_threads import start_torch_thread

        start_torch_thread(self._run, name=self._name, what=self.what)  # an exit mid-build waits for it

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
    """Python's switch interval at ``SWITCH_INTERVAL`` while the block runs (one build at a time)."""
    before = sys.getswitchinterval()
    sys.setswitchinterval(min(before, SWITCH_INTERVAL))
    try:
        yield
    finally:
        sys.setswitchinterval(before)


def worker_blocker(model: Any, backend: Backend, device: Any) -> str | None:
    """Why no compile worker can build ``model``'s step on ``device`` (``None``: one can): its weights
    are quantized in memory or carry adapters (a model built from its config would not have them),
    or the device reports less free memory than the worker's copy of the weights needs."""
    if getattr(model, "hf_quantizer", None) is not None or getattr(model, "peft_config", None):
        return ("its weights are quantized or carry adapters, which the worker's model (built from the config, "
                "no checkpoint read) would not have")
    memory = backend.memory_info(device)
    if memory is not None:
        weights = sum(p.numel() * p.element_size() for p in model.parameters())
        needed = int(weights * WORKER_MEMORY_MARGIN)
        if memory[0] < needed:
            return (f"the device has {memory[0] / 2**30:.1f} GiB free and the worker's copy of the weights needs "
                    f"about {needed / 2**30:.1f} GiB")
    return None


class BackgroundCompilingDecoder(FastDecoder):
    """The fast decoder of an ``adaptive`` plan whose compile runs in a worker process: each batch
    starts uncompiled and its compiled step, built by a compile worker (one at a time) and loaded by
    a thread of this process, replaces it at a look boundary (see the module). Other plans behave as
    :class:`FastDecoder`."""

    def __init__(self, model: Any, choice: DecodeChoice, capturer: Callable[..., Callable[[], object]] | None,
                 tuning: DecodeTuning | None = None, *, backend: Backend) -> None:
        super().__init__(model, choice, capturer, tuning, backend=backend)
        self.background_backend: str | None = self._deferred
        """The compiler the worker compiles with (``FastDecoder._deferred`` stays set: the compile
        cache's key is the plan's compiled step)."""
        self._twin: FastDecoder | None = None
        """The decoder whose compiled functions the swapped-in step runs (built by the thread)."""
        self._built: set[GraphKey] = set()
        self._worker: CompileWorker | None = None
        self._loading: list[StepGraph] = []
        """The graphs the running worker builds."""
        self._loading_cache: Callable[[], Any] = lambda: None
        """The KV cache of the batch the worker builds for (a weak reference: graphs of its exact
        sizes are loaded over it)."""
        self._loader: BackgroundCompile | None = None
        self._loader_twin: FastDecoder | None = None
        self._loader_graphs: list[StepGraph] = []
        self._worker_seconds = 0.0
        self._seconds = 0.0
        """How long building the graphs of the last swap took (the worker and the loading thread)."""
        self._failed: str | None = None
        self._blocked: str | None = None
        """Why no worker can build this model's step (``worker_blocker``), once asked."""
        self._running_compiled = False
        """Whether ``compile_backend`` is set now: the current batch runs its compiled step."""
        self.swaps: list[Swap] = []
        """Every swap so far, in order."""

    @property
    def background(self) -> bool:
        """Compiles run in a worker: an adaptive plan, no failed compile, a model the worker can build."""
        return self.background_backend is not None and self._failed is None and self._blocked is None

    @property
    def compiling(self) -> CompileWorker | BackgroundCompile | None:
        """The worker or loading thread running now, if any."""
        if self._worker is not None and self._worker.poll() == "running":
            return self._worker
        return self._loader if self._loader is not None and not self._loader.done else None

    def wait_for_compile(self, timeout: float | None = None) -> bool:
        """Block until the worker and the thread that loads its graphs have ended (the swap follows at
        the next look); True when nothing runs any more."""
        ends = None if timeout is None else time.perf_counter() + timeout

        def left() -> float | None:
            return None if ends is None else max(0.0, ends - time.perf_counter())

        if self._worker is not None:
            self._worker.wait(left())
        self._take_worker()
        if self._loader is not None and not self._loader.wait(left()):
            return False
        return self.compiling is None

    # -- FastDecoder's hooks ---------------------------------------------------------------------------
    def _compile_from_now(self, why: str) -> None:
        if self.background:
            return  # the worker compiles; the caller's thread never switches to a compile of its own
        super()._compile_from_now(why)

    def _forget_compact(self) -> None:
        super()._forget_compact()
        # Compiled from the old compact step (a running build's result is dropped when it ends).
        self._built.clear()
        self._twin = None
        if self._running_compiled:
            self._run_compiled(False)

    def disable(self, what: str, exc: BaseException) -> None:
        super().disable(what, exc)
        if not what.startswith("graph") and self.background:  # the swapped-in step failed: not tried again
            self._fail(f"{type(exc).__name__}: {str(exc)[:300]}", None)

    def capture(self, fn: Callable[[], object], warmup: int, report: Any) -> Callable[[], object]:
        if self._loader is not None and not self._loader.done:  # no capture beside the thread's device work
            return fn
        return super().capture(fn, warmup, report)

    def _before_call(self, batch: InflightBatch, key: GraphKey) -> None:
        """The call runs its batch's compiled step when built; else, with the compile cache holding
        it, builds it now (warm caches: seconds); else starts the worker for it."""
        if self.background_backend is None or self._failed is not None:
            return
        self._poll(batch)
        graphs = self._graphs(batch)
        missing = [g for g in graphs if g.key not in self._built]
        if missing and self.background and self.compiling is None:
            cache = self._cache(batch.device) if self._persisted_step() else None
            if cache is not None and all(cache.holds(g.key) for g in missing):
                self._build_now(batch, missing)
            else:
                self._start_worker(batch, missing)
        if self.background:
            self._switch(batch, graphs, 0)

    def _after_look(self, batch: InflightBatch, key: GraphKey, produced: int) -> None:
        """At a look boundary: a finished build swapped in, the next step of a running one taken."""
        if not self.background:
            return
        self._poll(batch)
        if self.background:
            self._switch(batch, self._graphs(batch), produced)

    # -- which graphs --------------------------------------------------------------------------------
    def _persisted_step(self) -> bool:
        return self.background_backend == "inductor" and self.tuning.persist_compiled

    def twin(self) -> FastDecoder:
        """The decoder of this model's step compiled with the plan's compiler (made once per compact step)."""
        if self._twin is None:
            assert self.background_backend is not None
            self._twin = self.compiled_twin(self.background_backend)
        return self._twin

    def _graphs(self, batch: InflightBatch) -> list[StepGraph]:
        """The compiled graphs ``batch``'s decode steps run."""
        symbolic = self.step == "compact" and bool(dynamic_rows(self.background_backend))
        return step_graphs(symbolic, self.twin().row_buckets(batch.rows), batch.width, batch.size.blocks,
                           batch.block_size, self.tuning.gemv_max_rows)

    # -- the worker and the thread ------------------------------------------------------------------------
    def _start_worker(self, batch: InflightBatch, graphs: list[StepGraph]) -> None:
        """Start the compile worker for ``graphs`` (or, when none can run, keep the engine's own rule)."""
        self._blocked = worker_blocker(self.model, self.backend, batch.device)
        if self._blocked is not None:
            message = (f"no compile worker for this model ({self._blocked}); the step compiles on this thread once "
                       f"that pays (after {self.tuning.compile_after_tokens:,} tokens, or at once when the compile "
                       "cache holds it)")
            log.info("intelrt fast decode: %s", message)
            self.notes.append(message)
            return
        assert self.background_backend is not None
        cache = self._cache(batch.device) if self._persisted_step() else None
        job = CompileJob.of(self.model, self.backend.name, self.compiled_choice(self.background_backend), self.tuning,
                            graphs, cache)
        self._worker = CompileWorker(job, self.tuning.compile_timeout)
        self._worker.start()
        self._loading, self._loading_cache = graphs, weakref.ref(batch.cache)
        progress.info("compiling the decode step (%s, %d graph(s)) in a worker process (pid %s); the uncompiled step "
                      "decodes meanwhile", self.background_backend, len(graphs), self._worker.pid)

    def _poll(self, batch: InflightBatch) -> None:
        """Take what ended since the last look: the worker (its graphs then loaded by a thread) or the thread."""
        self._take_worker()
        loader = self._loader
        if loader is None or not loader.done:
            return
        self._loader = None
        if loader.error is not None:
            self._fail(f"{type(loader.error).__name__}: {str(loader.error)[:300]}", batch, loader.error)
            return
        if self._loader_twin is self._twin:  # else the compact step was rebuilt since: built for the old one
            self._built.update(g.key for g in self._loader_graphs)
            self._seconds = self._worker_seconds + loader.seconds
        batch.reset_compiled()  # the steps put off while it ran are captured now

    def _take_worker(self) -> None:
        """A finished worker's outcome: its graphs loaded by a thread of this process, or a failure."""
        worker = self._worker
        if worker is None or worker.poll() == "running":
            return
        self._worker = None
        if worker.state != "done":
            if worker.output:
                log.warning("intelrt compile worker (pid %s) output:\n%s", worker.pid, worker.output)
            self._fail(f"{worker.state}: {worker.error}", None)
            return
        self._worker_seconds = worker.seconds
        counters = worker.result.get("counters", {}).get("inductor", {})
        progress.info("the compile worker built %d graph(s) in %.1f s (inductor: %s FX graph(s) compiled, %s found "
                      "cached); loading them", len(self._loading), worker.seconds,
                      counters.get("fxgraph_cache_miss", 0), counters.get("fxgraph_cache_hit", 0))
        self._load(self._loading, self._loading_cache())

    def _load(self, graphs: list[StepGraph], kv_cache: Any) -> None:
        """Build ``graphs`` from the warm caches on a thread of this process (over ``kv_cache``, the
        batch's own, where their sizes are its)."""
        twin, device = self.twin(), self.model.device
        cache = self._cache(device) if self._persisted_step() else None

        def load() -> None:
            if cache is not None:
                for graph in graphs:
                    cache.load(graph.key)
            with self.backend.side_stream(device):
                build(twin, graphs, device, kv_cache)

        what = (f"loading the compiled decode step ({self.background_backend}, {len(graphs)} graph(s)) the worker "
                "built (the uncompiled step decodes meanwhile)")
        self._loader_twin, self._loader_graphs = twin, graphs
        self._loader = BackgroundCompile(load, what, "intelrt-compile-load")
        self._loader.start()

    def _build_now(self, batch: InflightBatch, graphs: list[StepGraph]) -> None:
        """Build ``graphs`` from the compile cache on the caller's thread (a later process's first call)."""
        from ..support.progress import step

        cache = self._cache(batch.device)
        twin = self.twin()
        began = time.perf_counter()
        try:
            with step(f"loading the compiled decode step ({self.background_backend}, {len(graphs)} graph(s)) from the "
                      "compile cache"):
                for graph in graphs:
                    cache.load(graph.key)
                build(twin, graphs, batch.device, batch.cache)
        except Exception as exc:  # noqa: BLE001 - the uncompiled step goes on, with a note
            self._fail(f"{type(exc).__name__}: {str(exc)[:300]}", batch, exc)
            return
        self._built.update(g.key for g in graphs)
        self._seconds = time.perf_counter() - began

    def _fail(self, why: str, batch: InflightBatch | None, exc: BaseException | None = None) -> None:
        """The compiled step is off from now on (a note, a warning); the uncompiled step goes on."""
        self._failed = why
        self._deferred = None  # not tried again, on this thread either
        message = (f"the background compile ({self.background_backend}) failed ({why}); decoding without it from "
                   "now on")
        log.warning("intelrt fast decode: %s", message)
        if exc is not None:
            log.debug("intelrt background compile failure", exc_info=exc)
        self.notes.append(message)
        if batch is not None:
            batch.report.notes.append(message)
        if self._running_compiled:
            self._run_compiled(False)
        if batch is not None:
            batch.reset_compiled()

    # -- the swap ------------------------------------------------------------------------------------
    def _run_compiled(self, compiled: bool) -> None:
        """Point the decoder's compile settings at the built compiled step, or at none."""
        self._running_compiled = compiled
        if compiled:
            self.compile_backend, self.attention_kernel = self.background_backend, self._planned_kernel
            self.adopt_compiled(self._twin)
        else:
            self.compile_backend, self.attention_kernel = None, False

    def _switch(self, batch: InflightBatch, graphs: Sequence[StepGraph], produced: int) -> None:
        """``batch`` steps compiled when all its graphs are built, uncompiled when not (its forwards,
        steps, captures and row buckets made anew when that changes; the KV cache and row state stay)."""
        compiled = all(g.key in self._built for g in graphs)
        if compiled:
            self._compiled_keys.add(self._shape_key(batch))  # the engine's own compile never runs for it
        if compiled == self._running_compiled:
            return
        self._run_compiled(compiled)
        batch.reset_compiled()
        if compiled:
            swap = Swap((batch.rows, batch.width * batch.block_size), produced, self._seconds)
            self.swaps.append(swap)
            progress.info("the compiled decode step (%s) took over %d row(s) x %d cache slots at token %d, %.1f s after "
                          "its compile started", self.background_backend, *swap.shape, produced, swap.compile_seconds)
