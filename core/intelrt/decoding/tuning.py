"""The decode engine's tuning: sizes, buckets and switches of the fast loop, as one value.

Device choices (graphs, compile backend, which step, whether the one-kernel attention runs) come
from the plan's decode decision; these are the engine's own settings. The defaults are the ones
measured best on an H200 (docs/performance.md, "Fast decode path"); ``benchmarks/profile_decode.py``
compares variants by building other values, never by changing module state.
"""

from __future__ import annotations

from dataclasses import dataclass

PREFETCH_MODES = ("early", "late", "off")
PREFETCHABLE = ("o_proj", "gate_up", "down_proj", "next_qkv")


@dataclass(frozen=True)
class DecodeTuning:
    """Settings of :class:`~intelrt.decoding.engine.FastDecoder` and the compact step."""

    warmup_steps: int = 2
    """Real decode steps run before capture (compile and allocate outside the graph)."""
    eos_check_every: int = 16
    """Tokens between the host's checks whether every row has finished (one sync each)."""
    stream_every: int = 2
    """With a streamer, tokens are handed over (and the end checked) every this many steps: a
    smaller number gives text sooner, at one host sync each."""
    inflight_steps: int = 4
    """The in-flight batch (``inflight.py``) runs this many decode steps between its host's looks:
    new tokens handed out, ended rows freed, waiting requests let in. Fewer give text sooner and
    let requests join sooner, at one host sync each."""
    inflight_admit_rows: int = 8
    """The most waiting requests whose prompts pass together when they join an in-flight batch
    (more wait for the next look): one pass for several is cheaper, but busy rows wait for it."""
    cache_length_bucket: int = 128
    """Cache lengths round up to a multiple of this, so calls of similar length share a graph."""
    max_sessions: int = 4
    """Captured shapes kept alive (each holds a KV cache and a graph's memory pool)."""
    prompt_bucket: int = 16
    """With device graphs, the compact step's prompts are left-padded (masked, as in a batch) to a
    multiple of this many tokens, so prompts of similar length share one captured prompt pass."""
    prompt_graph_max_tokens: int = 4096
    """Prompt passes over more tokens (rows × padded length) run uncaptured: they launch few
    kernels per token, and their graph would hold much memory."""
    prompt_graphs_per_session: int = 4
    """Captured prompt lengths kept per session (least recently used dropped first)."""
    compiled_record: bool = True
    """With a compiled step, recording the chosen token and advancing position and slot are
    compiled too: one fused kernel instead of about seven small ones. The choice itself stays
    eager: compiled, a one-row argmax over the vocabulary fuses into one slow single-program kernel."""
    compiled_prompt: bool = True
    """A compiled compact step comes with a compiled prompt pass (dynamic shapes): eagerly, the
    prompt's pass is about 2,000 small operations per call."""
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
    compile_after_tokens: int = 32768
    """With an ``adaptive`` warm-up, the step is compiled once this many tokens have been decoded:
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

    def __post_init__(self) -> None:
        counts = ("warmup_steps", "eos_check_every", "stream_every", "inflight_steps", "inflight_admit_rows",
                  "cache_length_bucket", "max_sessions", "prompt_bucket", "prompt_graphs_per_session",
                  "gemv_max_rows", "attention_splits", "experts_dense_max_tokens", "compile_after_tokens")
        for name in counts:
            value = getattr(self, name)
            if not isinstance(value, int) or isinstance(value, bool) or value < (0 if name == "gemv_max_rows" else 1):
                raise ValueError(f"DecodeTuning.{name} must be a whole number >= 1, got {value!r}")
        if self.prefetch not in PREFETCH_MODES:
            raise ValueError(f"DecodeTuning.prefetch={self.prefetch!r} is not one of {', '.join(PREFETCH_MODES)}")
        unknown = sorted(set(self.prefetch_weights) - set(PREFETCHABLE))
        if unknown:
            raise ValueError(f"DecodeTuning.prefetch_weights names {', '.join(unknown)}; choose from "
                             f"{', '.join(PREFETCHABLE)}")
