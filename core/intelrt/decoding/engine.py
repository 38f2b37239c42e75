"""The fast decode engine of one loaded model: its step (the compact step or the model's own forward),
how that step is prepared (compiled, captured into device graphs), and the offline run of a list of
prompts through the in-flight batch (``inflight.py``).

The plan's decode decision (:class:`~intelrt.hooks.payloads.DecodeChoice`) says which graphs,
compiler and step run; :class:`~intelrt.decoding.tuning.DecodeTuning` holds the engine's own
settings. ``Loaded.generate``, ``Loaded.stream`` and ``intelrt serve`` all decode through
:class:`FastDecoder`: a call of ``generate`` is an in-flight batch whose requests all join at once
(``FastDecoder.generate``); a server keeps one batch running and adds requests as they come. The
step is captured into a device graph once per row bucket and sampler kind (by the backend's
capturer, ``Backend.graph_capturer``) and replayed for every later token; the host only looks every
``eos_check_every`` tokens (``stream_every`` with a streamer). Greedy output equals
``model.generate``'s token for token (same masks and positions; tests prove it on the CPU).
"""

from __future__ import annotations

import contextlib
import inspect
import logging
from collections.abc import Callable, Iterator, Sequence
from typing import Any

from ..errors import GenerationError
from ..hooks.backend import Backend
from ..hooks.payloads import Buckets, DecodeChoice
from .compact import CompactModel, Unsupported
from .compile_cache import CompileCache
from .forwards import CompactForward, ModelForward, StepForward
from .inflight import InflightBatch
from .keywords import DecodeOptions
from .lora import EngineAdapters
from .memory import EngineSize, KVShape, MemoryBudget, kv_shape, memory_budget, size_engine
from .paged import PagedCache
from .prefilled import PrefilledPrompt
from .report import GenerationReport
from .runner import CaptureFailed, InflightUnavailable, collector_paused, record_step
from .sampling import DecodeRequest, SamplingParams
from .tuning import DecodeTuning

log = logging.getLogger(__name__)
progress = logging.getLogger("intelrt.progress")
"""What takes long — compiling a step — said before it starts and timed after it ends (the CLI
shows it; in a program, set this logger to INFO)."""

COMPILE_ESTIMATES: dict[str, str] = {
    "H200": "about a minute for a 0.6B model on an H200",  # docs/performance.md, "Warm-up that pays for itself"
}
"""How long a first compile of the step takes, by a substring of the device's name: only where it
was measured (elsewhere a compile line quotes no estimate: the spinner's clock is the honest one)."""


def compile_estimate(backend: Backend, device: Any) -> str | None:
    """The measured compile time for ``device``'s model (an H200's), or ``None``."""
    name = backend.device_name(device)
    return next((text for key, text in COMPILE_ESTIMATES.items() if key in name), None)

def dynamic_rows(backend: str | None) -> bool | None:
    """Whether the compact step compiles once for every row count and cache size (symbolic shapes):
    with inductor, so that a batch size or context no call had before runs at once, its device
    graph captured from the one compiled step (no recompile: issue 38); ``None`` (torch's automatic
    choice) for other compilers — Gaudi's ``hpu_backend`` compiles each bucket's static shapes."""
    return True if backend == "inductor" else None


CONTEXT_BUCKET = 128
"""An offline call's context (longest prompt plus new tokens) rounds up to a multiple of this, so
calls of similar length reuse one batch and its captured steps."""

__all__ = ["CaptureFailed", "FastDecoder", "GenerationReport", "StepForward", "StreamerRaised", "collector_paused"]


class FastDecoder:
    """The decode engine of ``model`` as the plan's decode decision ``choice`` says, on the plan's
    ``backend`` (which answers every question about the device: memory, streams, events, its
    kernels' capability); ``capturer`` is the backend's device-graph capturer for ``choice.graphs``
    (``Backend.graph_capturer``)."""

    def __init__(self, model: Any, choice: DecodeChoice, capturer: Callable[..., Callable[[], object]] | None,
                 tuning: DecodeTuning | None = None, *, backend: Backend) -> None:
        self.model = model
        self.backend = backend
        self.tuning = tuning or DecodeTuning()
        self.step = choice.step or "model"
        """``compact`` (intelrt's compact step, when the model's layout allows) or ``model``."""
        graphs, compile_options = choice.graphs, choice.compile_options
        self.step_reason: str | None = None
        """Why a planned compact step runs the model's forward instead (adapters, a replaced module)."""
        self._compact: CompactModel | None = None
        self.compile_options = dict(compile_options or {})
        self.graphs = graphs if capturer is not None else None
        self._deferred = choice.compile if choice.prepared == "adaptive" else None
        """The compile backend an ``adaptive`` plan compiles with once that pays (``None`` after)."""
        self.compile_backend = None if self._deferred else choice.compile
        self._planned_kernel = choice.attention_kernel
        self.step_attention = choice.step_attention or "torch"
        """How a step's flat queries attend (``DecodeChoice.step_attention``): ``triton`` runs
        ``unified_attention``, the one kernel for decoding rows and prompt chunks together."""
        self.shape_buckets: Buckets | None = None
        """The plan's shape buckets (Gaudi: a graph per input shape), which the engine's steps are
        padded to and a warm-up runs each of (``pad_to``)."""
        self.planned_step_tokens = choice.step_tokens
        """The plan's tokens per engine step for a server (``DecodeChoice.step_tokens``)."""
        self.attention_kernel = choice.attention_kernel and not self._deferred  # comes with the compiled step
        self.decoded = 0
        """Tokens decoded so far (every row's, every call)."""
        self._compile_cache: CompileCache | None = None
        self.capturer = capturer
        self.notes: list[str] = []
        if graphs and capturer is None:
            self.notes.append(f"the plan names {graphs} graphs but no plugin provides their capturer; "
                              "decoding without graphs")
        self._compiled_decode: Callable[..., Any] | None = None
        self._compiled_flat: Callable[..., Any] | None = None
        self.flat_compile_failed: str | None = None
        """Why compiling the step with prompt chunks failed (it then runs uncompiled), or ``None``."""
        self._compiled_model: Callable[..., Any] | None = None
        self._compiled_record: Callable[..., Any] | None = None
        self._offline: InflightBatch | None = None
        self._stored_shape: KVShape | None = None
        self._compiled_keys: set[tuple[Any, ...]] = set()
        self.adapters = EngineAdapters(model)
        """LoRA adapters served per row (a server's ``/v1/load_lora_adapter``: ``InflightBatch.load_adapter``)."""
        parameters = inspect.signature(model.forward).parameters
        self.cache_kwarg = "cache" if "cache" in parameters else "past_key_values"
        self.keep_logits = "logits_to_keep" in parameters

    # -- the step ------------------------------------------------------------------------------
    def prepare(self) -> None:
        """Build the compact step (or rejoin its fused projections) before a pass."""
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
                self._compact = CompactModel(self.model, self.tuning, backend=self.backend)
            except Unsupported as why:
                self.step = "model"
                self.step_reason = f"compact step off: {why}; the step runs the model's own forward"
                log.info("intelrt fast decode: %s", self.step_reason)
                self._offline = None
                return None
        return self._compact

    def _forget_compact(self) -> None:
        """Drop the compact step and everything compiled or captured from it."""
        self._compact, self._compiled_decode, self._compiled_flat = None, None, None
        self._offline = None

    def vocab_size(self) -> int:
        """Logits per token (the LM head's outputs)."""
        head = self.model.get_output_embeddings() if hasattr(self.model, "get_output_embeddings") else None
        weight = getattr(head, "weight", None)
        if weight is not None:
            return int(weight.shape[0])
        return int(self.model.config.get_text_config().vocab_size)

    def kv_shape(self) -> KVShape:
        """What the KV cache this step reads and writes holds per token (``memory.KVShape``): the
        compact step's, else what the model's own forward stores (:meth:`_stored_kv_shape`)."""
        compact = self.compact
        if compact is not None:
            return compact.kv_shape()
        if self._stored_shape is None:
            self._stored_shape = self._stored_kv_shape()
        return self._stored_shape

    def _stored_kv_shape(self) -> KVShape:
        """The keys and values the model's own forward stores per token, read from a one-token
        forward into transformers' ``DynamicCache``: a config may not say them plainly (Falcon's
        ``multi_query`` keeps one head whatever ``num_kv_heads`` says). ``InflightUnavailable`` when
        its layers store different shapes, or none, since the paged cache holds one shape."""
        import torch
        from transformers import DynamicCache

        cache = DynamicCache()
        token = torch.zeros((1, 1), dtype=torch.long, device=self.model.device)
        try:
            with torch.inference_mode():
                self.model(input_ids=token, use_cache=True, **{self.cache_kwarg: cache})
        except Exception as exc:  # noqa: BLE001 - the config's word then; the step's own checks say why it cannot run
            log.debug("intelrt fast decode: a one-token forward to read the KV shape failed", exc_info=exc)
            shape = kv_shape(self.model.config, self.model.dtype.itemsize)
            if shape is None:
                raise InflightUnavailable("the model's config does not say its layers, key/value heads and head size, "
                                          f"and a one-token forward failed ({type(exc).__name__})") from exc
            return shape
        shapes = []
        for layer in cache.layers:
            keys, values = getattr(layer, "keys", None), getattr(layer, "values", None)
            if keys is None or values is None or keys.dim() != 4:
                raise InflightUnavailable("its cache holds layers without per-head keys and values (a recurrent or "
                                          "linear-attention state), which the paged cache does not hold")
            shapes.append((int(keys.shape[1]), int(keys.shape[3]), int(values.shape[3])))
        if not shapes or len(set(shapes)) != 1:
            raise InflightUnavailable(f"its layers store keys and values of different shapes ({sorted(set(shapes))} as "
                                      "(heads, key size, value size)); the paged cache holds one shape for every layer")
        heads, key_dim, value_dim = shapes[0]
        if value_dim != key_dim:
            raise InflightUnavailable(f"its keys ({key_dim} per head) and values ({value_dim}) differ in size, which the "
                                      "paged cache under the model's own forward does not hold")
        return KVShape(len(shapes), heads, key_dim, self.model.dtype.itemsize)

    def new_cache(self, blocks: int, block_size: int, device: Any) -> PagedCache:
        """A paged KV cache of ``blocks`` blocks for this step."""
        compact = self.compact
        if compact is not None:
            return compact.new_cache(blocks, block_size, device, self.tuning.prefix_caching)
        shape = self.kv_shape()
        return PagedCache(shape.layers, shape.kv_heads, shape.head_dim, self.model.dtype, device, blocks, block_size,
                          self.tuning.prefix_caching)

    def pad_to(self, buckets: Buckets) -> None:
        """Pad every step to the plan's shape ``buckets`` (a backend that compiles a graph per input
        shape: Gaudi): the decode steps' rows and blocks, the prompt chunks' tokens, and the KV
        cache's block size the buckets are counted in (vLLM-Gaudi's 128)."""
        from dataclasses import replace

        self.shape_buckets = buckets
        if self.tuning.block_size != buckets.block_size:
            self.tuning = replace(self.tuning, block_size=buckets.block_size)
        self._offline = None

    def row_buckets(self, rows: int) -> list[int]:
        """The row counts a batch of ``rows`` rows steps (one captured step each): powers of two
        below ``rows``, then ``rows`` (with shape buckets, their decode batch sizes below ``rows``);
        one bucket of all rows for a compiled model forward (compiled for one shape: a bucket each
        would compile it again each time)."""
        if self.shape_buckets is not None:
            return [*[b for b in self.shape_buckets.decode_batch_sizes if b < rows], rows]
        if self.step != "compact" and self.compile_backend:
            return [rows]
        sizes, size = [], 1
        while size < rows:
            sizes.append(size)
            size *= 2
        return [*sizes, rows]

    def new_forward(self, cache: PagedCache, rows: int) -> StepForward:
        """The step's forward over ``cache`` for a bucket of ``rows`` rows: the compact step
        ``prepare`` built (compiled once for every row count), else the model's own forward."""
        compact = self.compact
        if compact is not None:
            decode: Callable[..., Any] = compact.decode
            if self.compile_backend:
                import torch

                if self._compiled_decode is None:
                    self._compiled_decode = torch.compile(compact.decode, backend=self.compile_backend,
                                                          dynamic=dynamic_rows(self.compile_backend))
                decode = self._compiled_decode
            gemv = bool(self.compile_backend) and rows <= self.tuning.gemv_max_rows
            return CompactForward(compact, cache, decode, gemv=gemv, fused_attention=self.attention_kernel,
                                  unified=self.step_attention == "triton", flat_fn=self.compiled_flat(compact))
        return ModelForward(self.model, cache, self._model_forward(), self.cache_kwarg, self.keep_logits)

    def adapter_forward(self, cache: PagedCache) -> ModelForward:
        """The forward of batches holding LoRA adapter rows: the model's own, eager (PEFT's
        mixed-batch hooks choose each row's adapter in Python), over ``cache``."""
        return ModelForward(self.model, cache, self.model, self.cache_kwarg, self.keep_logits, self.adapters)

    def compiled_flat(self, compact: CompactModel) -> Callable[..., Any] | None:
        """``compact.flat_step`` (a step with prompt chunks, over padded token counts) compiled with a
        symbolic token count and cache size (``CompactForward.flat`` marks them), so that one compile
        serves every captured size and the engine's cache: with ``DecodeTuning.compiled_flat``, where
        the step compiles so (``dynamic_rows``: inductor), unless compiling it failed before."""
        if not self.tuning.compiled_flat or self.flat_compile_failed:
            return None
        if self.compile_backend is None or not dynamic_rows(self.compile_backend):
            return None
        if self._compiled_flat is None:
            import torch

            self._compiled_flat = torch.compile(compact.flat_step, backend=self.compile_backend)
        return self._compiled_flat

    def _model_forward(self) -> Callable[..., Any]:
        if not self.compile_backend:
            return self.model
        if getattr(self.model, "_compiled_call_impl", None) is not None:
            return self.model  # already compiled in place by the plan's compile decision
        if self._compiled_model is None:
            import torch

            self._compiled_model = torch.compile(self.model, backend=self.compile_backend, dynamic=False,
                                                 fullgraph=False)
        return self._compiled_model

    def recorder(self) -> Callable[..., None]:
        """``runner.record_step`` (a step's bookkeeping after the tokens are chosen), compiled
        with the step's backend when ``DecodeTuning.compiled_record`` — one fused kernel instead of
        about a dozen small ones, compiled once for every row count. The choice itself stays
        eager: compiled, a one-row argmax over the vocabulary fuses into one slow single-program
        kernel."""
        if not (self.compile_backend and self.tuning.compiled_record):
            return record_step
        if self._compiled_record is None:
            import torch

            self._compiled_record = torch.compile(record_step, backend=self.compile_backend,
                                                  dynamic=dynamic_rows(self.compile_backend))
        return self._compiled_record

    def compiler_settings(self, backend: str | None = None) -> contextlib.AbstractContextManager[Any]:
        """Inductor settings from the plan and ``DecodeTuning.programmatic_launch``, active whenever
        the step may compile (``backend``: for a compile with that backend, default the step's own).
        ``freezing`` is left out: it bakes the weights into the compiled step as constants — a
        second copy, and one that training or ``load_state_dict`` would leave stale."""
        if (backend or self.compile_backend) != "inductor":
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

    def capture(self, fn: Callable[[], object], warmup: int, report: GenerationReport) -> Callable[[], object]:
        """``fn`` recorded by the backend's capturer (after ``warmup`` real runs); a failure is
        raised as ``CaptureFailed``, so the engine goes on without graphs."""
        try:
            replay = self.capturer(fn, warmup=warmup)  # type: ignore[misc]
        except Exception as exc:
            raise CaptureFailed() from exc
        report.captured = True
        return replay

    def disable(self, what: str, exc: BaseException) -> None:
        """Turn off ``what`` (``graph …``: device graphs, else compilation) after ``exc``, with a
        note, and drop every batch step built with it."""
        message = f"{what} failed ({type(exc).__name__}: {str(exc)[:300]}); decoding without it from now on"
        log.warning("intelrt fast decode: %s", message)
        log.debug("intelrt fast decode: %s failed", what, exc_info=exc)
        self.notes.append(message)
        if what.startswith("graph"):
            self.graphs = None
        else:
            self.compile_backend = None
            self._compiled_decode = self._compiled_model = self._compiled_record = self._compiled_flat = None
        self._offline = None

    # -- sizing ------------------------------------------------------------------------------------
    def step_tokens(self, *, batch: bool) -> int:
        """Tokens one engine step computes at most: ``DecodeTuning.max_batch_tokens`` when set, else
        the plan's (``batch``: a list of prompts, which has no inter-token latency to keep, takes
        ``sizing.batch_step_tokens`` of it)."""
        from ..backends.sizing import DEFAULT_STEP_TOKENS, batch_step_tokens

        if self.tuning.max_batch_tokens is not None:
            return self.tuning.max_batch_tokens
        planned = self.planned_step_tokens or DEFAULT_STEP_TOKENS
        return batch_step_tokens(planned) if batch else planned

    def size_for(self, rows: int, context: int, needed_tokens: int | None, device: Any) -> EngineSize:
        """The engine's size for an offline call (``memory.size_engine`` over the memory budget)."""
        return size_engine(self.kv_shape(), memory_budget(self.backend, device, self.tuning), self.tuning, rows=rows,
                           context=context, needed_tokens=needed_tokens, step_tokens=self.step_tokens(batch=True))

    def serving_size(self, rows: int, context: int, device: Any, *, rows_asked: bool = False
                     ) -> tuple[EngineSize, MemoryBudget]:
        """A server's engine size and the memory budget it comes from: on a device that reports its
        memory, one prefill of ``max_batch_tokens`` tokens and one decode step of ``rows`` rows
        (the costliest sampler kind) are profiled on a batch with no KV cache to speak of, and their
        peak, the batch's own buffers and (with graphs) what the captured steps will hold are set
        aside before the utilization's share of the free memory goes to the KV cache.
        ``InflightUnavailable`` when the step cannot run over the paged cache."""
        self.prepare()
        if self._planned_kernel and not self.attention_kernel:
            # A server's decode steps read long contexts through the block table: the one-kernel
            # attention stops at each row's length (the torch attention gathers whole blocks), so
            # it runs from the start here, whether or not an adaptive plan has compiled yet.
            self.attention_kernel = True
            self._offline = None
        shape = self.kv_shape()
        activation = graphs = 0
        if self.backend.memory_info(device) is not None:
            # Rows or a context that the whole budget could not hold even before the profile are
            # refused now, with the largest value that fits: the profile's batch of ``rows`` rows
            # would allocate for them first (409 GB for ``serve --max-batch 100000000``).
            size_engine(shape, memory_budget(self.backend, device, self.tuning), self.tuning, rows=rows, context=context,
                        rows_asked=rows_asked)
            probe_size = EngineSize(rows, context, self.tuning.block_size, 2, self.step_tokens(batch=False),
                                    shape.bytes_per_token)
            probe = InflightBatch(self, probe_size, device, preallocate=True)
            prefill, decode, warmed = probe.profile()
            flat = probe.runner.flat_capturable()
            held = probe.buffer_bytes() + probe.runner.flat_buffer_bytes()
            del probe
            activation = max(prefill, decode) + held
            if self.graphs:  # each captured step holds its own intermediate buffers, about in proportion to its rows
                buckets = self.row_buckets(rows)
                graphs = int(sum(warmed) * sum(buckets) / rows)
                if flat:  # the captured steps with prompt chunks: the widest holds about a prefill's peak
                    graphs += prefill
        budget = memory_budget(self.backend, device, self.tuning, activation, graphs)
        return size_engine(shape, budget, self.tuning, rows=rows, context=context, rows_asked=rows_asked,
                           step_tokens=self.step_tokens(batch=False)), budget

    # -- offline decoding ----------------------------------------------------------------------------
    def decode(self, input_ids: Any, attention_mask: Any, options: DecodeOptions) -> tuple[Any, GenerationReport]:
        """New tokens for each row of left-padded ``input_ids``: shape (rows, n), padded with
        ``options.pad_token_id`` after a row's end like ``model.generate``; stops when every row has
        finished or after ``max_new_tokens``."""
        import torch

        prompts = [row[mask.bool()].tolist() for row, mask in zip(input_ids, attention_mask, strict=True)]
        outputs, report = self.generate(prompts, options.params(), rows=len(prompts), streamer=options.streamer)
        width = max(len(o) for o in outputs)
        tokens = torch.full((len(outputs), width), options.pad_token_id, dtype=torch.long)
        for i, row in enumerate(outputs):
            tokens[i, :len(row)] = torch.tensor(row, dtype=torch.long)
        return tokens.to(input_ids.device), report

    def generate(self, prompts: Sequence[Sequence[int]], params: SamplingParams | Sequence[SamplingParams], *,
                 rows: int, streamer: Any = None, prefilled: Sequence[PrefilledPrompt] | None = None
                 ) -> tuple[list[list[int]], GenerationReport]:
        """New tokens of every prompt (up to and including a stop token), at most ``rows`` decoding
        at once, and the report of the run. A failing graph capture or compilation is turned off,
        with a note, and the run goes on (or starts again, if nothing was handed out yet).
        ``prefilled``: each prompt's keys, values and logits computed outside the engine
        (``prefilled.py``), one per prompt."""
        import torch

        each = list(params) if isinstance(params, Sequence) else [params] * len(prompts)
        if streamer is not None and len(prompts) != 1:
            raise ValueError("a streamer takes the tokens of one prompt")
        with torch.inference_mode():
            for _ in range(4):
                stream = _Stream(streamer, prompts[0], each[0].stop_token_ids) if streamer is not None else None
                try:
                    return self._generate(prompts, each, rows, stream, prefilled)
                except StreamerRaised as raised:
                    raise (raised.__cause__ or raised) from None  # the caller's own error: no retry
                except Exception as exc:
                    if not self.compile_backend or (stream is not None and stream.sent):
                        raise
                    self.disable(f"compile ({self.compile_backend})", exc)
        raise AssertionError("unreachable")  # pragma: no cover

    def _offline_batch(self, prompts: Sequence[Sequence[int]], params: Sequence[SamplingParams], rows: int,
                       device: Any) -> InflightBatch:
        """The batch for an offline call: the last one when it is large enough, else one sized for it."""
        longest = max(len(p) + q.max_new_tokens for p, q in zip(prompts, params, strict=True))
        context = -(-longest // CONTEXT_BUCKET) * CONTEXT_BUCKET
        block = self.tuning.block_size
        needed = sum(-(-(len(p) + q.max_new_tokens) // block) * block for p, q in zip(prompts, params, strict=True))
        rows = max(1, min(rows, len(prompts)))
        batch = self._offline
        if (batch is not None and batch.rows >= rows and batch.size.context >= longest
                and batch.pool.usable * block >= min(needed, batch.size.tokens) and batch.rows <= 2 * rows):
            return batch
        size = self.size_for(rows, max(context, longest), needed, device)
        self._offline = None  # its memory back before the new one is made
        self._offline = InflightBatch(self, size, device)  # each row bucket captured when first used
        return self._offline

    def _generate(self, prompts: Sequence[Sequence[int]], params: Sequence[SamplingParams], rows: int,
                  stream: _Stream | None, prefilled: Sequence[PrefilledPrompt] | None = None
                  ) -> tuple[list[list[int]], GenerationReport]:
        import torch

        self._compact_model()  # built, or its projections rejoined to the fused tensors
        device = self.model.device
        batch = self._offline_batch(prompts, params, rows, device)
        key = self._shape_key(batch)
        if self._deferred and self._cache(device).holds(key):
            self._compile_from_now("the compile cache holds this step from an earlier process")
            batch = self._offline_batch(prompts, params, rows, device)
        # This call's report before its hooks run: a step swapped in now is this call's, not the last one's.
        batch.report = GenerationReport("fast", "", len(prompts), 1, self.graphs, self.compile_backend, self.step,
                                        step_reason=self.step_reason, warmup=self.warmup)
        batch.report.attention_kernel = batch.runner.attention_kernel
        self._before_call(batch, key)
        compiling = self.compile_backend is not None and key not in self._compiled_keys
        with self._compiling(key, device) if compiling else contextlib.nullcontext():
            batch.forget_prefixes()  # the weights may have changed since the last call
            seeds = torch.randint(0, 2**62, (len(prompts),)).tolist()  # torch.manual_seed makes a call repeatable
            handed: Sequence[PrefilledPrompt | None] = prefilled if prefilled is not None else [None] * len(prompts)
            handles = batch.add((DecodeRequest(tuple(p), q, prefilled=h)
                                 for p, q, h in zip(prompts, params, handed, strict=True)), seeds)
            outputs: dict[int, list[int]] = {h: [] for h in handles}
            steps = self.tuning.stream_every if stream is not None else self.tuning.eos_check_every
            try:
                with collector_paused(bool(batch.runner.captured())):
                    while batch.pending:
                        done = batch.step(steps)
                        for handle, sampled in done.outputs.items():
                            outputs[handle] += [t.token_id for t in sampled]
                        if done.failed:
                            raise GenerationError(f"the decode engine could not finish a prompt: "
                                                  f"{next(iter(done.failed.values()))}")
                        self._after_look(batch, key, sum(len(o) for o in outputs.values()))
                        if stream is not None:
                            stream.send(outputs[handles[0]])
            finally:
                for handle in batch.handles():
                    batch.retire(handle)
            if stream is not None:
                stream.finish(outputs[handles[0]])
        report = batch.report
        report.notes = sorted(set(self.notes))
        report.graphs, report.compiled, report.warmup = self.graphs, self.compile_backend, self.warmup
        self.decoded += sum(len(o) for o in outputs.values())
        if self._deferred and self.decoded >= self.tuning.compile_after_tokens:
            self._compile_from_now(f"{self.decoded:,} tokens decoded (DecodeTuning.compile_after_tokens="
                                   f"{self.tuning.compile_after_tokens:,}): compiling now pays for itself")
        return [outputs[h] for h in handles], report

    def _before_call(self, batch: InflightBatch, key: tuple[Any, ...]) -> None:
        """Called before an offline call's first look at ``batch`` (a subclass's hook: ``background.py``)."""

    def _after_look(self, batch: InflightBatch, key: tuple[Any, ...], produced: int) -> None:
        """Called after each look of an offline call, ``produced`` tokens into it: a step boundary,
        where a subclass may replace the batch's step (``background.py``)."""

    # -- warm-up ---------------------------------------------------------------------------------
    def _shape_key(self, batch: InflightBatch) -> tuple[Any, ...]:
        """What a batch's compiled steps are specialised to (its compile-cache entry)."""
        return ("paged", batch.rows, batch.width, batch.block_size)

    def _cache(self, device: Any) -> CompileCache:
        if self._compile_cache is None:
            step = {"step": self.step, "compile": self._deferred or self.compile_backend,
                    "options": self.compile_options, "attention_kernel": self._planned_kernel,
                    "graphs": self.graphs, "tuning": repr(self.tuning)}
            self._compile_cache = CompileCache.of(self.model, step, self.backend.compiled_for(device))
        return self._compile_cache

    def compiled_choice(self, backend: str) -> DecodeChoice:
        """The plan's decode decision for this step compiled with ``backend`` at once (no graphs):
        what a compile worker builds (``compile_worker.py``)."""
        return DecodeChoice("fast", cache="static", compile=backend, step=self.step,
                            compile_options=self.compile_options or None, attention_kernel=self._planned_kernel,
                            warmup="compiled", step_attention=self.step_attention)

    def compiled_twin(self, backend: str) -> FastDecoder:
        """A decoder of this model and compact step whose step is compiled with ``backend``: it builds
        the compiled step beside this decoder (``background.py``), which then takes its compiled
        functions over (:meth:`adopt_compiled`)."""
        twin = FastDecoder(self.model, self.compiled_choice(backend), None, self.tuning, backend=self.backend)
        twin._compact = self._compact
        return twin

    def adopt_compiled(self, twin: FastDecoder | None) -> None:
        """Step with ``twin``'s compiled functions (built elsewhere), or none (``None``)."""
        self._compiled_decode = None if twin is None else twin._compiled_decode
        self._compiled_record = None if twin is None else twin._compiled_record
        self._compiled_model = None if twin is None else twin._compiled_model

    def _compile_from_now(self, why: str) -> None:
        """An ``adaptive`` plan's switch: later calls compile their step (and capture it anew)."""
        backend, self._deferred = self._deferred, None
        self.compile_backend, self.attention_kernel = backend, self._planned_kernel
        self._offline = None
        progress.info("the decode step will be compiled with %s from the next call: %s", backend, why)

    def _persisted(self) -> bool:
        """Compiled steps are kept across processes (inductor's artifacts, ``compile_cache.py``)."""
        return self.compile_backend == "inductor" and self.tuning.persist_compiled

    @contextlib.contextmanager
    def _compiling(self, key: tuple[Any, ...], device: Any) -> Iterator[None]:
        """The first call of a batch shape compiles its step: a progress step (a spinner on the
        command line), with how long it takes on this device where that was measured."""
        from ..support.progress import step

        found = self._persisted() and self._cache(device).load(key)
        expect = ("its artifacts from an earlier process are loaded" if found else
                  "nothing cached for it yet" + (f": {estimate}" if (estimate := compile_estimate(self.backend, device)) else ""))
        with step(f"compiling the decode step for {key[1]} row(s) x {key[2]} cache blocks with "
                  f"{self.compile_backend} ({expect})"):
            yield
        self._compiled_keys.add(key)
        saved = self._cache(device).save(key) if self._persisted() else None
        if saved:
            progress.info("the compiled decode step%s is kept for the next process in %s",
                          " (captured)" if self.graphs else "", saved)


class _Stream:
    """Hands one row's new tokens to a transformers streamer as they come, as ``generate`` does:
    the prompt first, then each new token once, up to and including its end-of-sequence, then
    ``end()``."""

    def __init__(self, streamer: Any, prompt: Sequence[int], eos: tuple[int, ...]) -> None:
        import torch

        self.streamer, self.eos, self.sent = streamer, set(eos), 0
        self._call(streamer.put, torch.tensor([list(prompt)]))

    def send(self, tokens: list[int]) -> None:
        new = tokens[self.sent:]
        if new:
            import torch

            self._call(self.streamer.put, torch.tensor(new))
            self.sent += len(new)

    def finish(self, tokens: list[int]) -> None:
        self.send(tokens)
        self._call(self.streamer.end)

    @staticmethod
    def _call(method: Callable[..., object], *args: Any) -> None:
        try:
            method(*args)
        except Exception as exc:
            raise StreamerRaised() from exc


class StreamerRaised(Exception):
    """The caller's streamer raised (its error is the cause): the engine re-raises that error as
    it is, rather than taking it for a failed compilation and running the call again."""
