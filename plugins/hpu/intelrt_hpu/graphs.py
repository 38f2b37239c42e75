"""Decoding on Intel Gaudi: HPU graphs in lazy mode, ``hpu_backend`` compile in eager mode (H1, H9).

HPU graphs (``habana_frameworks.torch.hpu.graphs.HPUGraph``) record and replay lazy-mode work, so
in lazy mode the decode step is captured once and replayed per token; in eager mode (the stack's
default from 1.21) they do not apply, and ``torch.compile(backend="hpu_backend")`` captures the
step's graph instead. These defaults are vLLM's Gaudi plugin's, the serving engine Intel
maintains: ``use_hpu_graph = not enforce_eager`` with HPU graphs in lazy mode only
(vllm-gaudi ``v1/worker/hpu_model_runner.py``, ``_maybe_wrap_in_hpu_graph``), ``torch.compile``
with ``hpu_backend`` in eager mode unless ``enforce_eager``. Optimum for Intel Gaudi keeps both
opt-in in its generation example (``--use_hpu_graphs`` and ``--torch_compile`` are off by default),
which ``graphs="off"`` / ``compile="none"`` give. ``HpuBackend`` declares these facts and intelrt's
one decode rule decides from them; the lazy mode is what this module adds (graphs only there,
compile only outside it). It reads only the environment and the stack's version: planning never
imports the Gaudi stack (H3).
"""

from __future__ import annotations

import importlib
from collections.abc import Callable
from typing import Any

from intelrt.plugin import Backend, DecodeChoice, Situation, begin_end, stream_capturer

from .compiler import LAZY_NO_COMPILE
from .facts import LAZY_VAR, execution_mode

ONE_PROCESS = ("a Gaudi is driven by one process (H6: the device is acquired by the process that opens it), so "
               "no compile worker can open it beside the decoding process")
VLLM_GAUDI = ("vLLM's Gaudi plugin's (vllm-gaudi hpu_model_runner.py: use_hpu_graph = not "
              "enforce_eager; HPU graphs in lazy mode, torch.compile with hpu_backend in eager mode); Optimum for "
              "Intel Gaudi keeps both opt-in (graphs='off' / compile='none' give that)")


def graphs_missing(backend: Backend, s: Situation) -> str | None:
    """H1: HPU graphs record lazy-mode work; in eager mode they do not apply."""
    lazy, mode = execution_mode(backend, s.env)
    return None if lazy else f"HPU graphs record lazy-mode work and this run is eager ({mode}); set {LAZY_VAR}=1"


def compile_missing(backend: Backend, s: Situation) -> str | None:
    """H1: lazy mode has no ``torch.compile``; eager mode compiles with ``hpu_backend`` (H9)."""
    lazy, mode = execution_mode(backend, s.env)
    return f"{LAZY_NO_COMPILE}, and this run is lazy ({mode})" if lazy else None


def decode_claim(choice: DecodeChoice) -> str:
    """H9 for a step compiled with ``hpu_backend``, else H1 (graphs in lazy mode, or eager ops)."""
    return "H9" if choice.compile else "H1"


def graph_capturer() -> Callable[..., Any]:
    """The HPU graph capturer: ``HPUGraph.capture_begin()`` / ``capture_end()`` on a side stream."""
    hpu = importlib.import_module("habana_frameworks.torch.hpu")
    graphs = importlib.import_module("habana_frameworks.torch.hpu.graphs")
    streams = hpu if hasattr(hpu, "Stream") and hasattr(hpu, "stream") else graphs

    def record(graph: Any, stream: Any) -> Any:
        return begin_end(streams, graph, stream)

    return stream_capturer(streams, graphs.HPUGraph, record)
