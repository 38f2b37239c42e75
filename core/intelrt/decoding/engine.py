"""The fast decode loop: static KV cache, a step function with no host sync, device-graph replay.

The plan's decode decision (:class:`~intelrt.hooks.payloads.DecodeChoice`) says which graphs,
compiler and step run; :class:`~intelrt.decoding.tuning.DecodeTuning` holds the loop's own
settings. One *session* per shape (batch rows, cache length, sampling kind) holds the step's forward with
its KV cache (``forwards.py``: the compact step or the model's own forward) and the step's
device buffers; its step is captured into a device graph once (by the backend's
``intelrt_decode_graph`` capturer) and replayed for every later token and call. The step reads
the last token, writes the next one into an output buffer and advances the positions and cache
slot, all on the device; the host only checks for end-of-sequence every ``eos_check_every``
tokens. Greedy output equals ``model.generate``'s token for token (same masks and positions;
tests prove it on the CPU).
"""

from __future__ import annotations

import contextlib
import gc
import inspect
import logging
from collections import OrderedDict
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

from ..hooks.payloads import DecodeChoice
from .compact import CompactModel, Unsupported
from .compile_cache import CompileCache
from .forwards import CompactForward, ModelForward
from .keywords import DecodeOptions
from .tuning import DecodeTuning

log = logging.getLogger(__name__)
progress = logging.getLogger("intelrt.progress")

COMPILE_ESTIMATES: dict[str, str] = {
    "H200": "about a minute for a 0.6B model on an H200",  # docs/performance.md, "Warm-up that pays for itself"
}
"""How long a first compile of the step takes, by a substring of the device's name: only where it
was measured (elsewhere a compile line quotes no estimate: the spinner's clock is the honest one)."""


def compile_estimate(device: Any) -> str | None:
    """The measured compile time for ``device``'s kind (an H200's), or ``None``."""
    if getattr(device, "type", None) != "cuda":
        return None
    import torch

    name = torch.cuda.get_device_name(device)
    return next((text for key, text in COMPILE_ESTIMATES.items() if key in name), None)
"""What takes long — compiling a step — said before it starts and timed after it ends (the CLI
shows it; in a program, set this logger to INFO)."""

StepForward = ModelForward | CompactForward


@dataclass
class DecodeReport:
    """What one ``decode`` call did: shown to users as ``Loaded.last_generation``."""

    graphs: str | None
    compiled: str | None
    step: str = "model"
    """``compact`` (intelrt's compact step) or ``model`` (the model's own forward)."""
    attention_kernel: bool = False
    """The compact step's decode attention ran as one Triton kernel per layer (``triton_attention``)."""
    step_reason: str | None = None
    """Why the plan's compact step ran as the model's own forward in this call (else ``None``)."""
    captured: bool = False
    """A graph was captured during this call: the step's (first call of this shape) or the prompt
    pass's (first prompt of this padded length in this shape)."""
    warmup: str | None = None
    """How the step that ran was prepared: ``eager``, ``static`` (captured, not compiled) or
    ``compiled`` (for an ``adaptive`` plan, whichever it has reached)."""
    steps: int = 0
    notes: list[str] = field(default_factory=list)


def outside_top_p_dropped(scores: Any, top_p: Any) -> Any:
    """``scores`` (rows, vocabulary) with every token outside the smallest set whose probability
    reaches ``top_p`` (a one-element or a (rows, 1) tensor) set to ``-inf``, as transformers'
    top-p warper does; the likeliest token always stays."""
    import torch

    ordered, order = torch.sort(scores, descending=False)
    cumulative = ordered.softmax(-1).cumsum(-1)
    drop = cumulative <= (1 - top_p)
    drop[:, -1] = False  # keep at least one token
    return scores.masked_fill(drop.scatter(1, order, drop), float("-inf"))


class _Session:
    """Device buffers, cache and (once captured) the graph replay for one shape."""

    def __init__(self, rows: int, length: int, options: DecodeOptions, device: Any, forward: StepForward,
                 compile_backend: str | None = None, compiled_record: bool = True) -> None:
        import torch

        self.rows, self.length = rows, length
        self.forward = forward
        long = {"dtype": torch.long, "device": device}
        self.mask = torch.ones((rows, length), **long)
        self.token = torch.zeros((rows, 1), **long)
        self.position = torch.zeros((rows, 1), **long)
        self.slot = torch.zeros((1,), **long)
        self.index = torch.zeros((1,), **long)
        self.out = torch.zeros((rows, length), **long)
        self.done = torch.zeros((rows,), dtype=torch.bool, device=device)
        self.eos = torch.zeros((max(1, len(options.eos_token_ids)),), **long)
        self.pad = torch.zeros((1,), **long)
        self.temperature = torch.ones((1,), dtype=torch.float32, device=device)
        self.top_p = torch.ones((1,), dtype=torch.float32, device=device)
        self.top_k = options.top_k
        self.sampling = options.do_sample
        self.use_top_p = options.top_p < 1.0
        self.replay: Callable[[], object] | None = None
        self.prompts: OrderedDict[int, _PromptGraph] = OrderedDict()
        self.calls = 0
        self.record: Callable[[Any], None] = self._record
        if compile_backend and compiled_record:
            self.record = torch.compile(self._record, backend=compile_backend, dynamic=False)

    def choose(self, logits: Any) -> Any:
        """Next token per row: argmax, or temperature / top-k / top-p sampling as transformers does."""
        import torch

        if not self.sampling:
            return logits.argmax(-1)
        scores = logits.float() / self.temperature
        if self.top_k > 0:
            kth = torch.topk(scores, min(self.top_k, scores.shape[-1])).values[:, -1:]
            scores = scores.masked_fill(scores < kth, float("-inf"))
        if self.use_top_p:
            scores = outside_top_p_dropped(scores, self.top_p)
        probs = scores.softmax(-1)
        # Exponential race (Gumbel-max): samples like multinomial, with no host sync, graph-safe.
        return (probs / torch.empty_like(probs).exponential_(1)).argmax(-1)

    def accept(self, token: Any) -> None:
        """Record ``token`` (one per row) as this step's output and feed it to the next step."""
        import torch

        token = torch.where(self.done, self.pad, token)
        self.done.logical_or_((token[:, None] == self.eos[None, :]).any(-1))
        self.out.index_copy_(1, self.index, token[:, None])
        self.token.copy_(token[:, None])
        self.index.add_(1)

    def step(self) -> None:
        """One decode step, device work only (this is what the graph records)."""
        self.calls += 1
        self.record(self.choose(self.forward.logits(self.token, self.mask, self.position, self.slot)))

    def _record(self, token: Any) -> None:
        """Accept this step's token, then advance position and cache slot."""
        self.accept(token)
        self.position.add_(1)
        self.slot.add_(1)


class FastDecoder:
    """Decodes with sessions per shape, as the plan's decode decision ``choice`` says; ``capturer``
    is the backend's device-graph capturer for ``choice.graphs`` (``intelrt_decode_graph``)."""

    def __init__(self, model: Any, choice: DecodeChoice, capturer: Callable[..., Callable[[], object]] | None,
                 tuning: DecodeTuning | None = None) -> None:
        self.model = model
        self.tuning = tuning or DecodeTuning()
        self.step = choice.step or "model"
        graphs, compile_options = choice.graphs, choice.compile_options
        """``compact`` (intelrt's compact step, when the model's layout allows) or ``model``."""
        self.step_reason: str | None = None
        """Why a planned compact step runs the model's forward instead (adapters, a replaced module)."""
        self._compact: CompactModel | None = None
        self.compile_options = dict(compile_options or {})
        self.graphs = graphs if capturer is not None else None
        self._deferred = choice.compile if choice.prepared == "adaptive" else None
        """The compile backend an ``adaptive`` plan compiles with once that pays (``None`` after)."""
        self.compile_backend = None if self._deferred else choice.compile
        self._planned_kernel = choice.attention_kernel
        self.attention_kernel = choice.attention_kernel and not self._deferred  # comes with the compiled step
        self.decoded = 0
        """Tokens decoded so far (rows × steps, every call)."""
        self._compile_cache: CompileCache | None = None
        self.capturer = capturer
        self.notes: list[str] = []
        if graphs and capturer is None:
            self.notes.append(f"the plan names {graphs} graphs but no plugin provides their capturer; "
                              "decoding without graphs")
        self._sessions: OrderedDict[tuple[Any, ...], _Session] = OrderedDict()
        self._compiled: Callable[..., Any] | None = None
        self._compiled_any_rows: Callable[..., Any] | None = None
        self._compiled_prompt: Callable[..., Any] | None = None
        parameters = inspect.signature(model.forward).parameters
        self.cache_kwarg = "cache" if "cache" in parameters else "past_key_values"
        self.keep_logits = "logits_to_keep" in parameters

    # -- the step's forward --------------------------------------------------------------
    def prepare(self) -> None:
        """Build the compact step (or rejoin its fused projections) before a pass: what every
        ``decode`` call does first."""
        self._compact_model()

    @property
    def warmup(self) -> str:
        """How the step is prepared: ``compiled``, ``static`` (graph-captured) or ``eager``."""
        return "compiled" if self.compile_backend else "static" if self.graphs else "eager"

    @property
    def compact(self) -> CompactModel | None:
        """The compact step ``prepare`` built (``None`` when the step is the model's own forward)."""
        return self._compact if self.step == "compact" else None

    def _compact_model(self) -> CompactModel | None:
        """The compact step for this model (built once; its fused weights follow the model's)."""
        if self.step != "compact":
            return None
        if self._compact is not None and not self._compact.matches(self.model):
            log.info("intelrt fast decode: the model's modules changed (e.g. adapters); rebuilding the compact step")
            self._forget_compact()
        elif self._compact is not None:
            try:
                if self._compact.rejoin():
                    log.info("intelrt fast decode: parameters had been given new storage; fused projections rejoined")
            except Unsupported as why:  # a projection changed shape, dtype or device: fuse anew
                log.info("intelrt fast decode: %s; rebuilding the compact step", why)
                self._forget_compact()
        if self._compact is None:
            try:
                self._compact = CompactModel(self.model, self.tuning)
            except Unsupported as why:
                self.step = "model"
                self.step_reason = f"compact step off: {why}; the step runs the model's own forward"
                log.info("intelrt fast decode: %s", self.step_reason)
                return None
        return self._compact

    def _forget_compact(self) -> None:
        """Drop the compact step and everything compiled or captured from it."""
        self._compact, self._compiled, self._compiled_prompt = None, None, None
        self._compiled_any_rows = None
        self._sessions.clear()

    def new_forward(self, rows: int, length: int, device: Any, *, cache: tuple[list[Any], list[Any]] | None = None,
                    any_rows: bool = False) -> StepForward:
        """The forward of a new session: the compact step ``prepare`` built, else the model's.

        ``cache``: the compact step's cache tensors to use (views of a larger cache) instead of new
        ones. ``any_rows``: compile the compact step once for every row count (shapes dynamic
        after the second count), for the in-flight batch's row buckets; otherwise the step is
        compiled per shape."""
        compact = self._compact if self.step == "compact" else None
        if compact is not None:
            forward: Callable[..., Any] = compact
            prompt: Callable[..., Any] = compact.prompt
            if self.compile_backend:
                import torch

                if any_rows and self._compiled_any_rows is None:
                    self._compiled_any_rows = torch.compile(compact.__call__, backend=self.compile_backend)
                if not any_rows and self._compiled is None:
                    self._compiled = torch.compile(compact.__call__, backend=self.compile_backend, dynamic=False)
                if self._compiled_prompt is None and self.tuning.compiled_prompt:
                    self._compiled_prompt = torch.compile(compact.prompt, backend=self.compile_backend)
                forward = (self._compiled_any_rows if any_rows else self._compiled) or forward
                prompt = self._compiled_prompt or prompt
            return CompactForward(compact, rows, length, device, forward, prompt,
                                  compiled=bool(self.compile_backend), fused_attention=self.attention_kernel,
                                  cache=cache)
        return ModelForward(self.model, rows, length, self._forward(), self.cache_kwarg, self.keep_logits)

    def _forward(self) -> Callable[..., Any]:
        if not self.compile_backend:
            return self.model
        if getattr(self.model, "_compiled_call_impl", None) is not None:
            return self.model  # already compiled in place by the plan's compile decision
        if self._compiled is None:
            import torch

            self._compiled = torch.compile(self.model, backend=self.compile_backend, dynamic=False,
                                           fullgraph=False)
        return self._compiled

    def compiler_settings(self) -> contextlib.AbstractContextManager[Any]:
        """Inductor settings from the plan and ``DecodeTuning.programmatic_launch``, active whenever
        the step may compile. ``freezing`` is left out: it bakes the weights into the compiled step
        as constants — a second copy, and one that training or ``load_state_dict`` would leave stale."""
        if self.compile_backend != "inductor":
            return contextlib.nullcontext()
        import torch._inductor.config as inductor_config

        options = dict(self.compile_options)
        if options.pop("freezing", False):
            note = ("inductor's freezing is not applied: it would copy the weights into the compiled step, and "
                    "the copy would not follow later changes to them")
            if note not in self.notes:
                self.notes.append(note)
        if self.tuning.programmatic_launch:  # a plan's own setting of it stays
            options.setdefault("triton.enable_pdl", True)
        known = {k: v for k, v in options.items() if hasattr(inductor_config, k)}
        return inductor_config.patch(known) if known else contextlib.nullcontext()

    def _session(self, rows: int, length: int, options: DecodeOptions, device: Any) -> _Session:
        key = self._shape(rows, length, options)
        session = self._sessions.pop(key, None)
        if session is None:
            session = _Session(rows, length, options, device, self.new_forward(rows, length, device),
                               self.compile_backend, self.tuning.compiled_record)
            while len(self._sessions) >= self.tuning.max_sessions:
                self._sessions.popitem(last=False)
        self._sessions[key] = session
        return session

    def disable(self, what: str, exc: BaseException) -> None:
        """Turn off ``what`` (``graph …``: device graphs, else compilation) after ``exc``, with a
        note, and drop every session built with it."""
        message = f"{what} failed ({type(exc).__name__}: {str(exc)[:300]}); decoding without it from now on"
        log.warning("intelrt fast decode: %s", message)
        log.debug("intelrt fast decode: %s failed", what, exc_info=exc)
        self.notes.append(message)
        if what.startswith("graph"):
            self.graphs = None
        else:
            self.compile_backend = None
        self._sessions.clear()

    # -- decoding ------------------------------------------------------------------------
    def decode(self, input_ids: Any, attention_mask: Any, options: DecodeOptions) -> tuple[Any, DecodeReport]:
        """New tokens for each row of left-padded ``input_ids``: shape (rows, n), EOS-padded like
        ``model.generate``; stops when every row has finished or after ``max_new_tokens``.

        A failing graph capture or compilation is turned off (in that order) with a note, and the
        call retried without it; any other failure is the caller's to handle."""
        import torch

        with torch.inference_mode():
            for _ in range(4):
                try:
                    return self._decode(input_ids, attention_mask, options)
                except CaptureFailed as failed:
                    what, error = f"graph capture ({self.graphs})", failed.__cause__ or failed
                except StreamerRaised as raised:
                    raise (raised.__cause__ or raised) from None  # the caller's own error: no retry
                except Exception as exc:
                    if not self.compile_backend:
                        raise
                    what, error = f"compile ({self.compile_backend})", exc
                self.disable(what, error)
        raise AssertionError("unreachable")  # pragma: no cover

    def _decode(self, input_ids: Any, attention_mask: Any, options: DecodeOptions) -> tuple[Any, DecodeReport]:
        self._compact_model()  # built, or its projections rejoined to the fused tensors
        rows, prompt_length = input_ids.shape
        tuning = self.tuning
        bucket = -(-prompt_length // tuning.prompt_bucket) * tuning.prompt_bucket
        captured_prompt = self.captures_prompt(rows, bucket)
        if captured_prompt and bucket > prompt_length:
            import torch.nn.functional as F

            input_ids = F.pad(input_ids, (bucket - prompt_length, 0), value=0)
            attention_mask = F.pad(attention_mask, (bucket - prompt_length, 0), value=0)
            prompt_length = bucket
        need = prompt_length + options.max_new_tokens
        length = -(-need // tuning.cache_length_bucket) * tuning.cache_length_bucket
        shape = self._shape(rows, length, options)
        if self._deferred and shape not in self._sessions and self._cache(input_ids.device).holds(shape):
            self._compile_from_now("the compile cache holds this step from an earlier process")
        compiling = shape not in self._sessions and self.compile_backend is not None
        with self._compiling(shape, input_ids.device) if compiling else contextlib.nullcontext():
            s = self._session(rows, length, options, input_ids.device)
            # A captured shape's call allocates few Python objects: it runs without pauses of the
            # garbage collector (which, in a process holding compiled graphs, take milliseconds
            # while the device waits for its next launch). First calls, which compile, collect as usual.
            with _collector_paused(s.replay is not None):
                tokens, report = self._run(s, input_ids, attention_mask, options, captured_prompt)
        self.decoded += rows * report.steps
        if self._deferred and self.decoded >= tuning.compile_after_tokens:
            self._compile_from_now(f"{self.decoded:,} tokens decoded (DecodeTuning.compile_after_tokens="
                                   f"{tuning.compile_after_tokens:,}): compiling now pays for itself")
        return tokens, report

    # -- warm-up ---------------------------------------------------------------------------
    @staticmethod
    def _shape(rows: int, length: int, options: DecodeOptions) -> tuple[Any, ...]:
        """A session's key: what its captured step and compiled code are specialised to."""
        return (rows, length, *options.sampling_key, len(options.eos_token_ids))

    def _cache(self, device: Any) -> CompileCache:
        if self._compile_cache is None:
            step = {"step": self.step, "compile": self._deferred or self.compile_backend,
                    "options": self.compile_options, "attention_kernel": self._planned_kernel,
                    "graphs": self.graphs, "tuning": repr(self.tuning)}
            self._compile_cache = CompileCache(self.model, step, device)
        return self._compile_cache

    def _compile_from_now(self, why: str) -> None:
        """An ``adaptive`` plan's switch: later calls compile their step (and capture it anew)."""
        backend, self._deferred = self._deferred, None
        self.compile_backend, self.attention_kernel = backend, self._planned_kernel
        self._sessions.clear()
        progress.info("the decode step will be compiled with %s from the next call: %s", backend, why)

    def _persisted(self) -> bool:
        """Compiled steps are kept across processes (inductor's artifacts, ``compile_cache.py``)."""
        return self.compile_backend == "inductor" and self.tuning.persist_compiled

    @contextlib.contextmanager
    def _compiling(self, shape: tuple[Any, ...], device: Any) -> Iterator[None]:
        """The first call of a shape compiles its step: a progress step (a spinner on the command
        line), with how long it takes on this device where that was measured."""
        from ..support.progress import step

        found = self._persisted() and self._cache(device).load(shape)
        backend = self.compile_backend
        expect = ("its artifacts from an earlier process are loaded" if found else
                  "nothing cached for it yet" + (f": {estimate}" if (estimate := compile_estimate(device)) else ""))
        with step(f"compiling the decode step for {shape[0]} row(s) x {shape[1]} cache slots with {backend} "
                  f"({expect})"):
            yield
        saved = self._cache(device).save(shape) if self._persisted() and self.compile_backend else None
        if saved:
            progress.info("the compiled decode step%s is kept for the next process in %s",
                          " (captured)" if self.graphs else "", saved)

    def _run(self, s: _Session, input_ids: Any, attention_mask: Any, options: DecodeOptions,
             captured_prompt: bool) -> tuple[Any, DecodeReport]:
        """One call on session ``s``: the prompt's pass, then decode steps."""
        import torch

        report = DecodeReport(self.graphs, self.compile_backend, self.step,
                              attention_kernel=bool(getattr(s.forward, "fused_attention", False)),
                              step_reason=self.step_reason, warmup=self.warmup, notes=list(self.notes))

        s.done.zero_()
        s.index.zero_()
        s.out.fill_(options.pad_token_id)
        s.pad.fill_(options.pad_token_id)
        if options.eos_token_ids:
            s.eos.copy_(torch.tensor(options.eos_token_ids, dtype=torch.long))
        else:
            s.eos.fill_(-1)
        s.temperature.fill_(options.temperature)
        s.top_p.fill_(options.top_p)

        s.accept(s.choose(self.prompt_pass(s, input_ids, attention_mask, captured_prompt, report)))
        stream = (_Stream(options.streamer, input_ids[:, -int(attention_mask[0].sum()):], options.eos_token_ids)
                  if options.streamer is not None else None)

        produced = 1
        with self.compiler_settings():  # the step's (the prompt's pass compiles with inductor's defaults)
            produced = self._steps(s, options, produced, report, stream)
        report.steps = produced
        tokens = s.out[:, :produced]
        if options.eos_token_ids and bool(s.done.all()):
            # model.generate stops once every row has finished: drop the all-padding tail.
            is_eos = (tokens[:, :, None] == s.eos[None, None, :]).any(-1)
            last = int(is_eos.int().argmax(-1).max()) + 1
            tokens = tokens[:, :last]
        if stream is not None:
            stream.finish(tokens)
        return tokens.clone(), report

    def prompt_pass(self, s: _Session, input_ids: Any, attention_mask: Any, captured_prompt: bool,
                    report: DecodeReport) -> Any:
        """The prompt's pass on session ``s`` (its cache reset, the prompt written to slots
        ``0 .. width``; positions from the padding mask, as in transformers' generate), leaving the
        session ready for the first step; returns each row's last logits."""
        import torch

        prompt_length = input_ids.shape[1]
        s.forward.reset()
        s.mask.fill_(1)
        s.mask[:, :prompt_length].copy_(attention_mask)
        positions = attention_mask.long().cumsum(-1) - 1
        positions = positions.masked_fill(attention_mask == 0, 0)
        slots = torch.arange(prompt_length, device=input_ids.device)
        if captured_prompt:
            logits = self._captured_prompt(s, input_ids, positions, slots, report)
        else:
            logits = s.forward.prefill(input_ids, s.mask, positions, slots)
        s.position.copy_(positions[:, -1:] + 1)
        s.slot.fill_(prompt_length)
        return logits

    def captures_prompt(self, rows: int, padded_length: int) -> bool:
        """Whether a prompt pass of ``rows`` × ``padded_length`` tokens is replayed from a device
        graph (prompts are then left-padded to a multiple of ``tuning.prompt_bucket``)."""
        compact = self.compact
        return bool(self.graphs) and compact is not None and rows * padded_length <= compact.captured_prompt_tokens

    def capture(self, fn: Callable[[], object], warmup: int, report: DecodeReport) -> Callable[[], object]:
        """``fn`` recorded by the backend's capturer (after ``warmup`` real runs); a failure is
        raised as ``CaptureFailed``, so ``decode`` retries without graphs."""
        try:
            replay = self.capturer(fn, warmup=warmup)  # type: ignore[misc]
        except Exception as exc:
            raise CaptureFailed() from exc
        report.captured = True
        return replay

    def _captured_prompt(self, s: _Session, input_ids: Any, positions: Any, slots: Any,
                         report: DecodeReport) -> Any:
        """The prompt's pass replayed from a device graph (captured at the first prompt of this
        padded length in this session): without it, each of its hundreds of kernels is launched
        from the host, which costs more than the pass itself for short prompts."""
        length = input_ids.shape[1]
        graph = s.prompts.pop(length, None)
        if graph is None:
            graph = _PromptGraph(s, input_ids, positions, slots)
            graph.replay = self.capture(graph.run, 1, report)
            while len(s.prompts) >= self.tuning.prompt_graphs_per_session:
                s.prompts.popitem(last=False)
        s.prompts[length] = graph
        graph.ids.copy_(input_ids)
        graph.positions.copy_(positions)
        graph.replay()
        return graph.logits

    def _steps(self, s: _Session, options: DecodeOptions, produced: int, report: DecodeReport,
               stream: _Stream | None = None) -> int:
        """Decode steps until ``max_new_tokens`` or every row's end; returns the tokens produced.
        With a ``stream``, tokens are handed over every ``stream_every`` steps (a host sync each)."""
        warmup = self.tuning.warmup_steps
        every = self.tuning.stream_every if stream is not None else self.tuning.eos_check_every
        while produced < options.max_new_tokens:
            left = options.max_new_tokens - produced
            if s.replay is None and self.graphs and left > warmup + 1:
                before = s.calls
                s.replay = self.capture(s.step, warmup, report)
                produced += s.calls - before - 1  # warm-up steps ran; the recorded call did not
                continue
            todo = min(left, every - produced % every)
            run = s.replay or s.step
            for _ in range(todo):
                run()
            produced += todo
            if stream is not None:
                stream.send(s.out[:, :produced])
            if options.eos_token_ids and bool(s.done.all()):
                break
        return produced


class _Stream:
    """Hands one row's new tokens to a transformers streamer as they come, as ``generate`` does:
    the prompt first, then each new token once, up to and including its end-of-sequence, then
    ``end()``."""

    def __init__(self, streamer: Any, prompt: Any, eos: tuple[int, ...]) -> None:
        self.streamer, self.eos, self.sent, self.ended = streamer, set(eos), 0, False
        self._call(streamer.put, prompt.cpu())

    def send(self, tokens: Any) -> None:
        if self.ended:
            return
        new = tokens[0, self.sent:].tolist()
        stop = next((i + 1 for i, t in enumerate(new) if t in self.eos), None)
        if stop is not None:
            new, self.ended = new[:stop], True
        if new:
            import torch

            self._call(self.streamer.put, torch.tensor(new))
            self.sent += len(new)

    def finish(self, tokens: Any) -> None:
        self.send(tokens)
        self._call(self.streamer.end)

    @staticmethod
    def _call(method: Callable[..., object], *args: Any) -> None:
        try:
            method(*args)
        except Exception as exc:
            raise StreamerRaised() from exc


@contextlib.contextmanager
def _collector_paused(paused: bool) -> Iterator[None]:
    """Python's cyclic garbage collector off while the block runs (when ``paused``), then back
    as it was."""
    was_enabled = gc.isenabled()
    if paused:
        gc.disable()
    try:
        yield
    finally:
        if paused and was_enabled:
            gc.enable()


class _PromptGraph:
    """A session's prompt pass for one padded prompt length, on static input buffers."""

    def __init__(self, s: _Session, input_ids: Any, positions: Any, slots: Any) -> None:
        self.forward, self.mask = s.forward, s.mask
        self.ids, self.positions, self.slots = input_ids.clone(), positions.clone(), slots.clone()
        self.logits: Any = None
        self.replay: Callable[[], object] = self.run

    def run(self) -> None:
        logits = self.forward.prefill(self.ids, self.mask, self.positions, self.slots)
        if self.logits is None:  # the warm-up run, before capture, allocates the output buffer
            self.logits = logits.clone()
        else:
            self.logits.copy_(logits)


class StreamerRaised(Exception):
    """The caller's streamer raised (its error is the cause): ``decode`` re-raises that error as
    it is, rather than taking it for a failed compilation and running the call again."""


class CaptureFailed(Exception):
    """Raised (from the capturer's error) so ``decode`` can retry without graphs."""
