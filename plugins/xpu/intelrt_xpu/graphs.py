"""Decoding on Intel GPUs: intelrt's fast loop with the step captured in an XPU graph.

``torch.xpu.XPUGraph`` / ``torch.xpu.graph`` follow ``torch.cuda``'s graph API; where torch has
them the decode step is compiled with inductor (Triton kernels for XPU) and captured once, then
replayed for every token. The choice is proven under simulation (``simulate("xpu")``); the
CUDA path that shares the capturer is measured on real hardware (docs/performance.md).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from intelrt.plugin import (
    BackendStatus,
    Decision,
    DecisionValue,
    ModelInfo,
    Request,
    decode_attention_kernel,
    decode_blockers,
    decode_compile,
    decode_graphs,
    fast_decode,
    hookimpl,
    stream_capturer,
)

from .facts import mine


def xpu_graphs_available() -> bool:
    """Whether this torch has XPU graphs (``torch.xpu.XPUGraph`` and ``torch.xpu.graph``)."""
    import torch

    return getattr(torch.xpu, "XPUGraph", None) is not None and getattr(torch.xpu, "graph", None) is not None


@hookimpl
def intelrt_select_decode(backend: BackendStatus, request: Request, model: ModelInfo,
                          decisions: Mapping[str, DecisionValue]) -> Decision | None:
    """Fast decode loop on XPU: static KV cache, inductor-compiled step, XPU graph when torch has one."""
    if not mine(backend) or decode_blockers(model, decisions) is not None:
        return None
    import torch

    # The step is the model's own forward; intelrt's Triton decode attention is unmeasured on Intel GPUs.
    decode_attention_kernel(request, False, "intelrt's Triton decode attention is not measured on Intel GPUs",
                            "model")
    available = xpu_graphs_available()
    graphs = decode_graphs(request, backend, "xpu" if available else None,
                           f"torch {torch.__version__} has no torch.xpu.XPUGraph (XPU graphs need a newer torch)")
    compiled = decode_compile(request, "inductor")
    parts = ["static KV cache", f"step compiled with {compiled}" if compiled else "step runs eagerly (compile='none')"]
    if graphs:
        parts.append("captured in an XPU graph (torch.xpu.XPUGraph): one launch per token, no host sync per token")
    elif request.graphs == "off":
        parts.append("no XPU graph (graphs='off')")
    else:
        parts.append(f"no XPU graph: torch {torch.__version__} has no torch.xpu.XPUGraph")
    return fast_decode(graphs, compiled, "; ".join(parts),
                       notes=("inductor settings tuned on CUDA (weight freezing) are not applied: unmeasured on XPU",)
                       if compiled == "inductor" else ())


@hookimpl
def intelrt_decode_graph(backend: BackendStatus, kind: str) -> Callable[..., Any] | None:
    """The XPU graph capturer (called on the decoding thread, never inside this hook)."""
    if not mine(backend) or kind != "xpu":
        return None
    import torch

    def record(graph: Any, stream: Any) -> Any:
        return torch.xpu.graph(graph, stream=stream)

    return stream_capturer(torch.xpu, torch.xpu.XPUGraph, record)
