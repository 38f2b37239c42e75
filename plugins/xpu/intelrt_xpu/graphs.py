"""Decoding on Intel GPUs: intelrt's fast loop, the step compiled with inductor; XPU graphs opt-in.

``torch.xpu.XPUGraph`` / ``torch.xpu.graph`` follow ``torch.cuda``'s graph API (torch >= 2.11).
intelrt captures the decode step in one by default only where upstream does: vLLM keeps XPU
graphs off unless asked (``VLLM_XPU_ENABLE_XPU_GRAPH``, default ``0``; vllm-project/vllm#38193:
"require a specific driver version, it's not stable yet"), warns that they support single-GPU
runs only (vllm#49419), and has reports of wrong output with them (vllm#48327, vllm#48946);
making them the default waits for torch 2.14, which moves XPU graphs to Level Zero graphs
(vllm#51600). So below torch 2.14 graphs are opt-in (``graphs="on"``); from 2.14 they are the
default. No Intel GPU here measures either: the choice is proven under simulation only.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from intelrt.plugin import (
    Backend,
    Decision,
    Request,
    Situation,
    decode_attention_kernel,
    decode_blockers,
    decode_compile,
    decode_graphs,
    fast_decode,
    quantized,
    quantized_step,
    stream_capturer,
)

from .facts import XPU_GRAPHS_DEFAULT_TORCH, torch_at_least, torch_version

UPSTREAM_GRAPHS = ("vLLM keeps XPU graphs opt-in (VLLM_XPU_ENABLE_XPU_GRAPH=0 by default, vllm-project/vllm#38193: "
                   "not stable yet; single-GPU only, vllm#49419) until torch 2.14 moves them to Level Zero graphs "
                   "(vllm#51600)")


def xpu_graphs_available() -> bool:
    """Whether this torch has XPU graphs (``torch.xpu.XPUGraph`` and ``torch.xpu.graph``)."""
    import torch

    return getattr(torch.xpu, "XPUGraph", None) is not None and getattr(torch.xpu, "graph", None) is not None


def _graphs(backend: Backend, request: Request) -> tuple[str | None, str]:
    """(graph kind or None, why) for the decode step."""
    version = torch_version(backend)
    if not xpu_graphs_available():
        graphs = decode_graphs(request, None, f"torch {version} has no torch.xpu.XPUGraph (XPU graphs need "
                                                       "torch >= 2.11)")
        return graphs, (f"no XPU graph: torch {version} has no torch.xpu.XPUGraph" if request.graphs != "off"
                        else "no XPU graph (graphs='off')")
    if request.graphs == "on":
        return "xpu", "captured in an XPU graph (torch.xpu.XPUGraph) as asked (graphs='on'): one launch per token"
    if request.graphs == "off":
        return None, "no XPU graph (graphs='off')"
    if torch_at_least(backend, XPU_GRAPHS_DEFAULT_TORCH):
        return "xpu", (f"captured in an XPU graph (torch.xpu.XPUGraph): one launch per token; default from torch "
                       f"{XPU_GRAPHS_DEFAULT_TORCH}, where {UPSTREAM_GRAPHS}")
    return None, (f"no XPU graph by default with torch {version} < {XPU_GRAPHS_DEFAULT_TORCH}: {UPSTREAM_GRAPHS}; "
                  "graphs='on' captures the step anyway")


def select_decode(backend: Backend, s: Situation) -> Decision | None:
    """Fast decode loop on XPU: static KV cache, inductor-compiled step; XPU graph by default only
    from torch 2.14 (``graphs="on"`` before)."""
    request = s.request
    if decode_blockers(s.model, s.decided) is not None:
        return None  # the generic rule explains the fallback
    # The step is the model's own forward; intelrt's Triton decode attention is unmeasured on Intel GPUs.
    decode_attention_kernel(request, False, "intelrt's Triton decode attention is not measured on Intel GPUs",
                            "model")
    graphs, graph_reason = _graphs(backend, request)
    compiled = decode_compile(request, "inductor")
    parts = ["static KV cache", f"step compiled with {compiled}" if compiled else "step runs eagerly (compile='none')",
             graph_reason]
    choice = s.decided.quantization
    if choice is not None and quantized(s.decided):
        parts.insert(1, quantized_step(choice))
    return fast_decode(graphs, compiled, "; ".join(parts),
                       notes=("inductor settings tuned on CUDA (weight freezing) are not applied: unmeasured on XPU",)
                       if compiled == "inductor" else ())


def graph_capturer(kind: str) -> Callable[..., Any] | None:
    """The XPU graph capturer (called on the decoding thread)."""
    if kind != "xpu":
        return None
    import torch

    def record(graph: Any, stream: Any) -> Any:
        return torch.xpu.graph(graph, stream=stream)

    return stream_capturer(torch.xpu, torch.xpu.XPUGraph, record)
