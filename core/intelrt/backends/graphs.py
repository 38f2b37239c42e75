"""Decode and batching choices of the built-in ``cuda`` and ``cpu`` backends, and CUDA graphs.

CUDA: intelrt's fast decode loop with the step compiled by inductor and captured in a CUDA
graph, so a token costs one graph launch and no host synchronisation; a list of prompts goes
through that loop as one padded batch (measured against transformers in docs/performance.md).
CPU: the same loop, eager (no device graphs exist; compile warm-up outweighs its gain). How much
warm-up a step gets on CUDA follows the work (``decoding/policy.py``: ``decode_warmup``).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any

from ..decoding.capture import stream_capturer
from ..decoding.policy import (
    QUANTIZED_STEP,
    compact_step,
    decode_attention_kernel,
    decode_blockers,
    decode_compile,
    decode_graphs,
    decode_warmup,
    fast_decode,
    fast_decode_planned,
    kernel_blocker,
    plain_generate,
    quantized,
    triton_installed,
)
from ..errors import PlanError
from ..hooks.markers import hookimpl
from ..hooks.payloads import BatchingChoice, DecisionValue
from ..hooks.types import BackendStatus, Decision
from .defaults import padded_generate_instead

if TYPE_CHECKING:
    from ..planning.model_source import ModelInfo
    from ..planning.request import Request

CUDA_MAX_PADDED_BATCH = 256
"""Prompts per padded batch on CUDA (fewer when the KV cache would not fit free memory)."""
CPU_MAX_PADDED_BATCH = 64
CUDA_INDUCTOR_OPTIONS = {"coordinate_descent_tuning": True}
"""For the compiled step, compact or the model's own forward. inductor's ``freezing`` made the model's
own forward faster (Qwen3-0.6B shape on an H200: 1.81 against 2.33 ms/token) but bakes a second copy of
the weights into the step, which training would leave stale; the compact step fuses its projections
itself (docs/performance.md)."""


QUANTIZED_COMPILE = ("bitsandbytes 4-bit weights: torch.compile over its dequantizing kernels is not measured; a "
                     "failing graph capture falls back to an uncaptured step, with a note")

CPU_FLEX_OVER_4BIT = ("bitsandbytes 4-bit weights with attention='flex_attention' on the CPU: flex attention compiles "
                      "its kernel with inductor's C++ backend, which fails to build over the 4-bit layers, so "
                      "transformers' generate runs them (or choose attention='sdpa' for the fast loop)")

TRITON_INTERPRET = "TRITON_INTERPRET"
"""``1``: Triton runs its kernels in its interpreter, on the CPU."""


def _mine(backend: BackendStatus) -> bool:
    return backend.name in ("cuda", "cpu")


@hookimpl
def intelrt_select_decode(backend: BackendStatus, request: Request, model: ModelInfo, env: Mapping[str, str],
                          decisions: Mapping[str, DecisionValue]) -> Decision | None:
    if not _mine(backend) or decode_blockers(model, decisions, four_bit=True) is not None:
        return None  # the generic default explains the fallback
    four_bit = quantized(decisions)
    if backend.name == "cpu" and four_bit and decisions.get("attention") == "flex_attention":
        return plain_generate(CPU_FLEX_OVER_4BIT)
    step, step_reason = ("model", QUANTIZED_STEP) if four_bit else compact_step(model)
    misfit = kernel_blocker(model) if step == "compact" else None
    if backend.name == "cuda":
        graphs = decode_graphs(request, backend, "cuda", "")
        compiler = None if four_bit else decode_compile(request, "inductor")
        warm = decode_warmup(request, graphs, compiler, "graphs='off'", QUANTIZED_COMPILE)
        parts = ["static KV cache", step_reason, warm.reason]
        if warm.compile == "inductor":
            parts.append("compiled kernels coordinate-descent-tuned")
        if warm.kind == "static" and request.attention_kernel == "auto":
            kernel = False  # its first use compiles and tunes a Triton kernel: seconds a short call would not win back
            parts.append("decode attention in torch operations (the Triton kernel's first-use compile and tuning "
                         "would not pay for one short call)")
        else:
            kernel = decode_attention_kernel(request, triton_installed(), "Triton is not installed", step, misfit)
            if misfit and step == "compact":
                parts.append(f"decode attention in torch operations (the one-kernel attention does not serve it: "
                             f"{misfit})")
        if warm.graphs is None and graphs is None:
            parts.append("no CUDA graph (graphs='off'): one kernel launch per op")
        return fast_decode(warm.graphs, warm.compile, "; ".join(parts), compile_options=CUDA_INDUCTOR_OPTIONS,
                           step=step, attention_kernel=kernel, warmup=warm.kind)
    decode_graphs(request, backend, None, "the CPU has no device graphs")
    warm = decode_warmup(request, None, decode_compile(request, None), "the CPU has no device graphs",
                         "compile warm-up outweighs its gain on the CPU")
    # On the CPU the kernel runs only under Triton's interpreter, as the test suite runs it.
    interpreted = env.get(TRITON_INTERPRET) == "1" and triton_installed()
    kernel = decode_attention_kernel(request, interpreted, f"the CPU runs it only under Triton's interpreter "
                                     f"({TRITON_INTERPRET}=1, with Triton installed)", step, misfit)
    reason = f"static-KV-cache decode loop without generate's per-token bookkeeping; {warm.reason}; {step_reason}"
    return fast_decode(None, warm.compile, reason, step=step, attention_kernel=kernel, warmup=warm.kind)


@hookimpl
def intelrt_select_batching(backend: BackendStatus, request: Request, model: ModelInfo,
                            decisions: Mapping[str, DecisionValue]) -> Decision | None:
    if not _mine(backend):
        return None
    fast = fast_decode_planned(decisions)
    on_cuda = backend.name == "cuda"
    if (not on_cuda and not fast and decisions.get("attention") == "flex_attention"
            and decisions.get("task") == "text-generation"):
        raise PlanError("attention='flex_attention' cannot generate from a list of prompts on the CPU when "
                        "transformers' generate decodes (the plan's decode decision says why the fast decode loop "
                        "is off): its continuous batching does not run flex attention, and a padded batch fails to "
                        "build flex attention's CPU kernel (inductor). Use attention='sdpa' (the default) or 'eager'")
    if request.batching == "padded":
        return None
    size = CUDA_MAX_PADDED_BATCH if on_cuda else CPU_MAX_PADDED_BATCH
    fallback = padded_generate_instead(request, model, decisions, size)
    if fallback is not None:
        return fallback
    if request.batching == "auto" and fast:
        why = ("the CUDA-graph decode step costs about the same for 1 or 256 rows (weights are read once per "
               "step), so one padded batch beats continuous batching's per-step scheduling (docs/performance.md)"
               if on_cuda else "on the CPU one padded batch through the decode loop skips continuous batching's "
               "per-step scheduling")
        return Decision(BatchingChoice.padded("fast", size),
                        f"padded batches of up to {size} prompts through the fast decode loop: {why}",
                        notes=("batching='continuous' uses transformers' generate_batch instead",))
    user = "requested by the user" if request.batching == "continuous" else "the fast decode loop is off"
    if on_cuda:
        graphs = request.graphs != "off"
        return Decision(BatchingChoice.continuous(use_graphs=graphs, use_async_batching=True),
                        f"{user}; continuous batching with CUDA graphs "
                        f"{'on' if graphs else 'off (graphs=off)'} and async double-buffering (H200-class memory "
                        "affords the doubled buffers)", claim="X7")
    return Decision(BatchingChoice.continuous(use_graphs=False, use_async_batching=False, kv_sizing="requests"),
                    f"{user}; continuous batching on the CPU: no graphs, no async double-buffering, KV cache "
                    "sized from the requests (sizing it from free memory takes seconds)", claim="X7")


@hookimpl
def intelrt_decode_graph(backend: BackendStatus, kind: str) -> Callable[..., Any] | None:
    if backend.name != "cuda" or kind != "cuda":
        return None
    import torch

    def record(graph: Any, stream: Any) -> Any:
        return torch.cuda.graph(graph, stream=stream, capture_error_mode="thread_local")

    return stream_capturer(torch.cuda, torch.cuda.CUDAGraph, record)
