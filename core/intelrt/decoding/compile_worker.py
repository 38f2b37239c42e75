"""The compile worker: a process of its own that compiles a decode step while the decoding process
goes on decoding (issue 39).

Compiling is Python (dynamo's trace, inductor's lowering and code generation) that holds the
interpreter lock for a minute or more: on a thread of the decoding process it starved the decode
loop (a fresh process was up to 20× slower than the compiled step for its first minute). Here the
cold compile runs in a child process (``python -m intelrt.decoding.compile_worker JOB``), which

* builds the model's skeleton from its class and config on the ``meta`` device and gives it
  uninitialised storage on the same device (``nn.Module.to_empty``; tied weights tied again):
  compiling needs the parameters' shapes, dtypes and devices, not their values, and reads no
  checkpoint. A skeleton whose parameters, buffers and modules differ from the decoding process's
  model (a quantized or adapted model, weights kept in another dtype) is refused (:func:`signature`):
  its graphs would not be the ones the decoding process looks up;
* makes the calls that build each graph (``compiled_step.build``), with nothing cached: inductor
  writes its FX graphs, AOT-autograd entries and tuned kernels to its caches (``TORCHINDUCTOR_CACHE_DIR``,
  the same directory as the decoding process's unless one of them changed it), and the worker writes
  ``torch.compiler.save_cache_artifacts()`` to intelrt's compile cache after each graph
  (``compile_cache.py``), where the decoding process (and any later process) loads them;
* writes its outcome to ``JOB.result`` (the graphs built and how long each took, inductor's cache
  counters, or the error) and exits.

:class:`CompileWorker` is the decoding process's handle: it starts the child (in a session of its
own, so that a Ctrl-C in the terminal goes to the program, not to the compile), looks at it without
waiting (:meth:`CompileWorker.poll`), stops it after ``timeout`` seconds, and stops it when the
decoding process exits. A worker whose parent is gone exits by itself.
"""

from __future__ import annotations

import atexit
import hashlib
import json
import logging
import os
import shutil
import subprocess
import sys
import tempfile
import threading
import time
import traceback
import weakref
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from .compile_cache import CompileCache

log = logging.getLogger(__name__)

MODULE = "intelrt.decoding.compile_worker"
LOG_TAIL = 1500
"""Characters of the worker's output a failure is logged with."""
COMPILE_THREADS = "TORCHINDUCTOR_COMPILE_THREADS"
RESERVED_CORES = 2
"""Cores the worker's compile processes leave to the decoding process (unless the user set
``TORCHINDUCTOR_COMPILE_THREADS``; it is not part of inductor's cache key)."""
WORKER_NICENESS = 10
"""How much lower the worker's CPU priority is than the decoding process's (``os.nice``)."""
_RUNNING: weakref.WeakSet[CompileWorker] = weakref.WeakSet()


def signature(model: Any) -> str:
    """A digest of what a compiled step's graphs depend on in ``model``: each parameter's and
    buffer's name, shape and dtype, and each module's class (values are not read)."""
    parts: list[tuple[str, Any, str]] = [(name, list(tensor.shape), str(tensor.dtype))
                                         for name, tensor in model.named_parameters()]
    parts += [(name, list(tensor.shape), str(tensor.dtype)) for name, tensor in model.named_buffers()]
    parts += [(name, type(module).__qualname__, "") for name, module in model.named_modules()]
    return hashlib.sha256(json.dumps(parts, sort_keys=True).encode()).hexdigest()


def _qualified(kind: type) -> str:
    return f"{kind.__module__}:{kind.__qualname__}"


def _resolve(name: str) -> Any:
    import importlib

    module, _, attribute = name.partition(":")
    found: Any = importlib.import_module(module)
    for part in attribute.split("."):
        found = getattr(found, part)
    return found


@dataclass(frozen=True)
class CompileJob:
    """What the worker compiles: the model (class, config, dtype, attention and experts
    implementations, device, :func:`signature`), the backend that runs it (its name: the worker
    detects it as ``intelrt.load`` would), the decode decision with its compile applied
    (``DecodeChoice.to_dict``), the engine's tuning, the graphs (``compiled_step.StepGraph``), and
    the compile-cache entry directory their artifacts go to (``None``: kept in inductor's caches only)."""

    model_class: str
    config_class: str
    config: dict[str, Any]
    dtype: str
    attn_implementation: str | None
    experts_implementation: str | None
    device: str
    signature: str
    backend: str
    choice: dict[str, Any]
    tuning: dict[str, Any]
    graphs: list[dict[str, Any]]
    cache: str | None
    identity: dict[str, Any]
    threads: int
    parent: int = field(default_factory=os.getpid)

    @classmethod
    def of(cls, model: Any, backend: str, choice: Any, tuning: Any, graphs: list[Any],
           cache: CompileCache | None) -> CompileJob:
        """The job of compiling ``graphs`` of ``model``'s step on ``backend`` as ``choice`` says
        (their artifacts kept in ``cache``)."""
        import torch

        config = model.config
        return cls(_qualified(type(model)), _qualified(type(config)), config.to_dict(),
                   str(model.dtype).removeprefix("torch."), getattr(config, "_attn_implementation", None),
                   getattr(config, "_experts_implementation", None), str(model.device), signature(model),
                   backend, choice.to_dict(), asdict(tuning), [graph.to_dict() for graph in graphs],
                   None if cache is None else str(cache.directory), {} if cache is None else cache.identity,
                   torch.get_num_threads())


class CompileWorker:
    """A compile worker process for ``job``, stopped after ``timeout`` seconds (``poll`` says so)."""

    def __init__(self, job: CompileJob, timeout: float) -> None:
        self.job, self.timeout = job, timeout
        self._folder = Path(tempfile.mkdtemp(prefix="intelrt-compile-"))
        self._job_file = self._folder / "job.json"
        self._job_file.write_text(json.dumps(asdict(job)), encoding="utf-8")
        self._log = self._folder / "worker.log"
        self._process: subprocess.Popen[bytes] | None = None
        self._started = 0.0
        self.state = "new"
        """``new``, ``running``, ``done`` (built), ``failed`` or ``timed out``."""
        self.error: str | None = None
        self.result: dict[str, Any] = {}
        """The worker's outcome (``graphs``: the keys built, ``seconds``, ``counters``)."""
        self.seconds = 0.0
        self.output = ""
        """The end of a failed worker's output (its traceback)."""

    def start(self) -> None:
        env = dict(os.environ)
        # Inductor's pool of compile processes takes every core by default: two are left to the decode loop.
        env.setdefault(COMPILE_THREADS, str(max(1, (os.cpu_count() or 1) - RESERVED_CORES)))
        with open(self._log, "wb") as out:
            self._process = subprocess.Popen(  # noqa: S603 - this interpreter, this module, our own job file
                [sys.executable, "-m", MODULE, str(self._job_file)], stdin=subprocess.DEVNULL, stdout=out,
                stderr=subprocess.STDOUT, start_new_session=True, env=env)
        self._started = time.perf_counter()
        self.state = "running"
        _RUNNING.add(self)

    @property
    def pid(self) -> int | None:
        return None if self._process is None else self._process.pid

    def poll(self) -> str:
        """The worker's state now (never waits)."""
        if self.state != "running" or self._process is None:
            return self.state
        self.seconds = time.perf_counter() - self._started
        code = self._process.poll()
        if code is None:
            if self.seconds > self.timeout:
                self.stop()
                self._finish("timed out", f"the compile did not finish within {self.timeout:g} s "
                                          "(DecodeTuning.compile_timeout); the worker was stopped")
            return self.state
        result_file = Path(f"{self._job_file}.result")
        try:
            self.result = json.loads(result_file.read_text(encoding="utf-8"))
        except (OSError, ValueError):
            self.result = {}
        if code == 0 and "error" not in self.result:
            self._finish("done", None)
        else:
            self.output = self._tail()
            self._finish("failed", self.result.get("error") or f"the worker exited with status {code}")
        return self.state

    def wait(self, timeout: float | None = None) -> str:
        """Block until the worker ends (or ``timeout`` seconds pass); its state."""
        ends = None if timeout is None else time.perf_counter() + timeout
        while self.poll() == "running" and (ends is None or time.perf_counter() < ends):
            time.sleep(0.05)
        return self.state

    def stop(self) -> None:
        """End the worker now (its process group: inductor's own compile workers too)."""
        process = self._process
        if process is None or process.poll() is not None:
            return
        try:
            os.killpg(process.pid, 9)
        except OSError:
            process.kill()
        process.wait()

    def _tail(self) -> str:
        try:
            return self._log.read_text(encoding="utf-8", errors="replace").strip()[-LOG_TAIL:]
        except OSError:
            return ""

    def _finish(self, state: str, error: str | None) -> None:
        self.state, self.error = state, error
        _RUNNING.discard(self)
        shutil.rmtree(self._folder, ignore_errors=True)


@atexit.register
def _stop_running_workers() -> None:
    """A program that ends while a step compiles does not wait for the compile, nor leave it running."""
    for worker in list(_RUNNING):
        worker.stop()


# -- the worker process ---------------------------------------------------------------------------

def _watch_parent(parent: int) -> None:
    """Exit when the decoding process is gone (its compile is nobody's any more)."""
    def watch() -> None:
        while os.getppid() == parent:
            time.sleep(1.0)
        os._exit(3)

    threading.Thread(target=watch, name="intelrt-compile-parent", daemon=True).start()


def skeleton(job: CompileJob) -> Any:
    """The model of ``job`` with uninitialised weights on its device (``ValueError`` when it does not
    match the decoding process's model)."""
    import torch

    config = _resolve(job.config_class).from_dict(job.config)
    extra = {name: value for name, value in (("attn_implementation", job.attn_implementation),
                                             ("experts_implementation", job.experts_implementation))
             if value is not None}
    with torch.device("meta"):
        model = _resolve(job.model_class)._from_config(config, dtype=getattr(torch, job.dtype), **extra)
    model = model.to_empty(device=job.device)
    model.tie_weights()  # to_empty gives each tied parameter storage of its own
    model.eval()
    if signature(model) != job.signature:
        raise ValueError(f"the model {job.model_class} built from its config differs from the decoding process's "
                         "(other parameters, dtypes or modules: quantized, adapted or changed after loading); its "
                         "compiled graphs would not be the ones that process looks up")
    return model


def run(job: CompileJob) -> dict[str, Any]:
    """Compile ``job``'s graphs; what was built."""
    import torch
    from torch._dynamo.utils import counters

    from ..hooks.payloads import DecodeChoice
    from ..planning.planner import plan_backend
    from .compile_cache import CompileCache
    from .compiled_step import StepGraph, build
    from .engine import FastDecoder
    from .tuning import DecodeTuning

    torch.set_num_threads(job.threads)  # inductor's CPU kernels are generated for the thread count
    model = skeleton(job)
    settings: dict[str, Any] = {k: tuple(v) if isinstance(v, list) else v for k, v in job.tuning.items()}
    tuning = DecodeTuning(**settings)
    backend = plan_backend(backend=job.backend).backend
    decoder = FastDecoder(model, DecodeChoice.from_dict(job.choice), None, tuning, backend=backend)
    decoder.prepare()
    cache = None if job.cache is None else CompileCache(Path(job.cache), job.identity)
    device = torch.device(job.device)
    built, seconds = [], []
    for data in job.graphs:
        graph = StepGraph(**data)
        began = time.perf_counter()
        build(decoder, [graph], device)
        seconds.append(round(time.perf_counter() - began, 2))
        if cache is not None:
            cache.save(graph.key)
        built.append(list(graph.key))
    return {"graphs": built, "seconds": seconds,
            "counters": {k: dict(v) for k, v in counters.items() if k in ("inductor", "aot_autograd")}}


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    if len(args) != 1:
        print(f"usage: python -m {MODULE} JOB.json", file=sys.stderr)
        return 2
    job_file = Path(args[0])
    job = CompileJob(**json.loads(job_file.read_text(encoding="utf-8")))
    _watch_parent(job.parent)
    os.nice(WORKER_NICENESS)  # where cores are scarce, the decode loop goes first
    logging.basicConfig(level=logging.WARNING)
    try:
        outcome = run(job)
    except Exception as exc:  # noqa: BLE001 - said to the decoding process, which goes on without it
        traceback.print_exc()  # into the worker's log, whose end the decoding process's note quotes
        outcome = {"error": f"{type(exc).__name__}: {str(exc)[:600]}"}
    Path(f"{job_file}.result").write_text(json.dumps(outcome), encoding="utf-8")
    return 1 if "error" in outcome else 0


if __name__ == "__main__":
    sys.exit(main())
