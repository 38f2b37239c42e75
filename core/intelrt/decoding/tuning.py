"""The decode engine's tuning: sizes, buckets and switches of the fast loop, as one value.

Device choices (graphs, compile backend, which step, whether the one-kernel attention runs) come
from the plan's decode decision; these are the engine's own settings. The defaults are the ones
measured best on an H200 (docs/performance.md, "Fast decode path"); ``benchmarks/profile_decode.py``
compares variants by building other values, never by changing module state.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from ..hooks.request import ENGINE_OPTIONS

PREFETCH_MODES = ("early", "late", "off")
PREFETCHABLE = ("o_proj", "gate_up", "down_proj", "next_qkv")


@dataclass(frozen=True)
class DecodeTuning:
    """Settings of :class:`~intelrt.decoding.engine.FastDecoder` and the compact step."""

    warmup_steps: int = 2
    """Real decode steps run before capture (compile and allocate outside the graph)."""
    eos_check_every: int = 16
    """An offline ``generate`` call's engine looks at the host every this many decode steps (new
    tokens read, ended rows freed, waiting prompts let in): one sync each."""
    stream_every: int = 2
    """With a streamer, tokens are handed over (and the end checked) every this many steps: a
    smaller number gives text sooner, at one host sync each."""
    inflight_steps: int = 8
    """A server's engine runs this many decode steps between its host's looks: new tokens handed
    out, ended rows freed, waiting requests let in. Fewer give text sooner and let requests join
    sooner, at one host sync each."""
    block_size: int = 16
    """Token slots per block of the paged KV cache (vLLM's default): a request holds
    ``ceil(tokens / block_size)`` blocks; prefix caching reuses whole blocks."""
    max_batch_tokens: int | None = None
    """Tokens one engine step computes at most (vLLM's ``max_num_batched_tokens``): one per decoding
    row, the rest prefill chunks of waiting prompts. A longer prompt is prefilled in chunks across
    steps (chunked prefill), so the rows decoding meanwhile keep getting tokens. ``None``: the plan's
    (``DecodeChoice.step_tokens``, sized for the device and model; a list of prompts takes
    ``sizing.batch_step_tokens`` of it)."""
    prefix_caching: bool = True
    """Reuse the KV blocks of identical prompt prefixes across requests (``blocks.py``)."""
    memory_utilization: float = 0.9
    """Share of the device memory free after loading (less the profiled activation peak and device
    graphs) the KV cache takes (vLLM's ``--gpu-memory-utilization``, ``memory.py``)."""
    cpu_kv_cache_bytes: int = 2**30
    """The KV cache budget on the CPU (and on a device whose runtime reports no free memory)."""
    compiled_record: bool = True
    """With a compiled step, recording the chosen token and advancing position and slot are
    compiled too: one fused kernel instead of about seven small ones. The choice itself stays
    eager: compiled, a one-row argmax over the vocabulary fuses into one slow single-program kernel."""
    compiled_flat: bool = True
    """With a step compiled by inductor, a server's steps with prompt chunks (``CompactModel.flat_step``,
    captured once per size at the warm-up) are compiled too: one graph with a symbolic token count and
    cache size, built during the memory profile over its small cache. Uncompiled, each layer's norms,
    activation and rotation run as separate elementwise kernels; compiled, they fuse, for one more
    compiled frame at a server's start (measured: docs/performance.md). Off: such steps are captured
    uncompiled."""
    gemv_max_rows: int = 4
    """A compiled compact step of at most this many rows writes its projections as
    multiply-and-sum, which the compiler fuses with the operation after them."""
    fold_norms: bool = True
    """Fold RMSNorms into the multiply-and-sum projections after them (norm and projection in one kernel)."""
    prefetch_weights: tuple[str, ...] = PREFETCHABLE
    """With few rows, the weights a layer's attention kernel prefetches into L2, of those read
    after it: the layer's o-projection, gate/up and down projections, the next layer's q/k/v."""
    attention_splits: int = 64
    """The attention kernel splits the cache so that about this many programs share the work
    (flash-decoding): one row has too few key/value heads to keep a GPU busy."""
    merge_in_kernel: bool = True
    """The last split of each head merges the splits' states (else a second kernel merges them)."""
    experts_dense_max_tokens: int = 256
    """A mixture-of-experts layer runs every expert on up to this many tokens (static shapes, graph
    capturable); a longer prompt pass runs the model's own experts code (``experts.py``)."""
    background_compile: bool = True
    """With an ``adaptive`` warm-up whose plan has a compile worker (``DecodeChoice.compile_worker``),
    the compiled step is built by a worker process from the first call while the uncompiled
    (captured) step decodes, and takes over at a look boundary once built (``background.py``).
    False: the step compiles on the caller's thread after ``compile_after_tokens``."""
    compile_timeout: int = 1800
    """Seconds a compile worker (``compile_worker.py``) may take before it is stopped; the step it
    was building is then not swapped in (a note says so) and the uncompiled step goes on."""
    compile_after_tokens: int = 32768
    """With an ``adaptive`` warm-up and no compile worker (``background_compile=False``, a plan without
    one, or a model the worker cannot build), the step is compiled once this many tokens have been decoded:
    a compile of about a minute (cold, on a GPU) saving about 2 ms per token has then paid for
    itself (the compile cache makes a later process compile at once)."""
    persist_compiled: bool = True
    """Keep inductor's artifacts of each compiled step in intelrt's cache directory, and load them
    before compiling the same step in a later process (``compile_cache.py``)."""
    programmatic_launch: bool = True
    """On CUDA GPUs of compute capability 9.0 or newer (Hopper), the compiled step's kernels are
    launched as programmatic dependent launches: each starts while the kernel before it drains
    and waits, on the device, for the data it reads (inductor's ``triton.enable_pdl``, and the
    attention kernel's own launch), which shortens the gaps between a captured step's ~150
    kernels. Inert on other devices."""
    prefetch: str = "early"
    """When the attention kernel prefetches ``prefetch_weights``: ``early`` (extra programs, as the
    kernel starts), ``late`` (the attention programs, after their own loads) or ``off``."""

    @property
    def max_steps(self) -> int:
        """The most decode steps one look runs (what the runner's output buffers hold per row)."""
        return max(self.eos_check_every, self.stream_every, self.inflight_steps)

    def __post_init__(self) -> None:
        counts = ("warmup_steps", "eos_check_every", "stream_every", "inflight_steps", "block_size",
                  "max_batch_tokens", "cpu_kv_cache_bytes", "gemv_max_rows", "attention_splits",
                  "experts_dense_max_tokens", "compile_after_tokens", "compile_timeout")
        for name in counts:
            value = getattr(self, name)
            if value is None and name == "max_batch_tokens":
                continue
            if not isinstance(value, int) or isinstance(value, bool) or value < (0 if name == "gemv_max_rows" else 1):
                raise ValueError(f"DecodeTuning.{name} must be a whole number >= 1, got {value!r}")
        utilization = self.memory_utilization
        if isinstance(utilization, bool) or not isinstance(utilization, (int, float)) or not 0 < utilization <= 1:
            raise ValueError(f"DecodeTuning.memory_utilization must be in (0, 1], got {utilization!r}")
        if self.max_batch_tokens is not None and self.max_batch_tokens < self.block_size:
            raise ValueError(f"DecodeTuning.max_batch_tokens={self.max_batch_tokens} must be at least block_size="
                             f"{self.block_size}")
        if self.prefetch not in PREFETCH_MODES:
            raise ValueError(f"DecodeTuning.prefetch={self.prefetch!r} is not one of {', '.join(PREFETCH_MODES)}")
        unknown = sorted(set(self.prefetch_weights) - set(PREFETCHABLE))
        if unknown:
            raise ValueError(f"DecodeTuning.prefetch_weights names {', '.join(unknown)}; choose from "
                             f"{', '.join(PREFETCHABLE)}")


def with_engine_options(tuning: DecodeTuning, spelled: Callable[[str], str] = lambda name: f"{name}=",
                        **options: Any) -> DecodeTuning:
    """``tuning`` with the engine options given (``None``: leave as it is); ``ConfigurationError``
    naming the option as the caller spells it (``spelled``: ``gpu_memory_utilization=`` for Python,
    ``--gpu-memory-utilization `` on the command line) and what it takes."""
    from dataclasses import replace

    from ..errors import ConfigurationError

    changes: dict[str, Any] = {}
    for name, value in options.items():
        if name not in ENGINE_OPTIONS:
            raise TypeError(f"unknown engine option {name!r}; the engine options are {', '.join(ENGINE_OPTIONS)}")
        if value is None:
            continue
        if name == "gpu_memory_utilization" and (isinstance(value, bool) or not isinstance(value, (int, float))
                                                 or not 0 < value <= 1):
            raise ConfigurationError(f"{spelled(name)}{value!r} must be a number in (0, 1]: the share of the device "
                                     "memory free after loading that the KV cache takes (e.g. 0.9, vLLM's default)")
        if name == "max_batch_tokens" and (isinstance(value, bool) or not isinstance(value, int)
                                           or value < tuning.block_size):
            raise ConfigurationError(f"{spelled(name)}{value!r} must be a whole number of tokens >= {tuning.block_size} "
                                     "(one KV block): the tokens one engine step computes, e.g. 2048")
        if name == "prefix_caching" and not isinstance(value, bool):
            raise ConfigurationError(f"{spelled(name)}{value!r} must be True or False")
        changes[ENGINE_OPTIONS[name]] = value
    return replace(tuning, **changes) if changes else tuning
