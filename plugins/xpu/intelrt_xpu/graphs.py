"""Decoding on Intel GPUs: intelrt's fast loop, the step compiled with inductor; XPU graphs opt-in.

``XpuBackend`` declares these facts (``graph_kind``, ``graphs_default_from``, ``decode_source``,
``decode_compiler``) and intelrt's one decode rule decides from them; this module says whether this
torch has XPU graphs and builds their capturer.

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

from intelrt.plugin import Backend, stream_capturer

from .facts import torch_version

UPSTREAM_GRAPHS = ("vLLM keeps XPU graphs opt-in (VLLM_XPU_ENABLE_XPU_GRAPH=0 by default, vllm-project/vllm#38193: "
                   "not stable yet; single-GPU only, vllm#49419) until torch 2.14 moves them to Level Zero graphs "
                   "(vllm#51600)")


def xpu_graphs_available() -> bool:
    """Whether this torch has XPU graphs (``torch.xpu.XPUGraph`` and ``torch.xpu.graph``)."""
    import torch

    return getattr(torch.xpu, "XPUGraph", None) is not None and getattr(torch.xpu, "graph", None) is not None


def graphs_missing(backend: Backend) -> str | None:
    """Why this torch cannot capture the decode step in XPU graphs (``None``: it can)."""
    if xpu_graphs_available():
        return None
    return f"torch {torch_version(backend)} has no torch.xpu.XPUGraph (XPU graphs need torch >= 2.11)"


def graph_capturer() -> Callable[..., Any]:
    """The XPU graph capturer (called on the decoding thread)."""
    import torch

    def record(graph: Any, stream: Any) -> Any:
        return torch.xpu.graph(graph, stream=stream)

    return stream_capturer(torch.xpu, torch.xpu.XPUGraph, record)
