"""Decoding on Intel Gaudi: HPU graphs in lazy mode, ``hpu_backend`` compile in eager mode (H1, H9).

HPU graphs (``habana_frameworks.torch.hpu.graphs.HPUGraph``) record and replay lazy-mode work, so
in lazy mode the decode step is captured once and replayed per token; in eager mode (the stack's
default from 1.21) they do not apply, and ``torch.compile(backend="hpu_backend")`` captures the
step's graph instead. These defaults are vLLM's Gaudi plugin's, the serving engine Intel
maintains: ``use_hpu_graph = not enforce_eager`` with HPU graphs in lazy mode only
(vllm-gaudi ``v1/worker/hpu_model_runner.py``, ``_maybe_wrap_in_hpu_graph``), ``torch.compile``
with ``hpu_backend`` in eager mode unless ``enforce_eager``. Optimum for Intel Gaudi keeps both
opt-in in its generation example (``--use_hpu_graphs`` and ``--torch_compile`` are off by default),
which ``graphs="off"`` / ``compile="none"`` give. The decision reads only the environment and the
stack's version: planning never imports the Gaudi stack (H3).
"""

from __future__ import annotations

import importlib
from collections.abc import Callable
from typing import Any

from intelrt.plugin import (
    Backend,
    Decision,
    Situation,
    begin_end,
    decode_attention_kernel,
    decode_blockers,
    decode_compile,
    decode_graphs,
    fast_decode,
    stream_capturer,
)

from .compiler import lazy_refusal
from .facts import LAZY_VAR, execution_mode

VLLM_GAUDI = ("as vLLM's Gaudi plugin does by default (vllm-gaudi hpu_model_runner.py: use_hpu_graph = not "
              "enforce_eager; HPU graphs in lazy mode, torch.compile with hpu_backend in eager mode); Optimum for "
              "Intel Gaudi keeps both opt-in (graphs='off' / compile='none' give that)")


def select_decode(backend: Backend, s: Situation) -> Decision | None:
    """Lazy mode → HPU graph of an uncompiled step (no ``torch.compile`` in lazy mode, H1); eager mode
    → step compiled with ``hpu_backend``."""
    request = s.request
    if decode_blockers(s.model, s.decided) is not None:
        return None  # the generic rule explains the fallback
    # The step is the model's own forward: intelrt's Triton decode attention is not for Gaudi.
    decode_attention_kernel(request, False, "Gaudi runs no Triton kernels", "model")
    lazy, mode = execution_mode(backend, s.env)
    graphs = decode_graphs(request, "hpu" if lazy else None,
                           f"HPU graphs record lazy-mode work and this run is eager ({mode}); set {LAZY_VAR}=1")
    if lazy:
        if request.compile not in ("auto", "none"):
            raise lazy_refusal(f"compile={request.compile!r} for the decode step", mode)
        reason = (f"lazy mode ({mode}): the step is captured in an HPU graph and replayed per token, skipping "
                  f"lazy op accumulation on the host, {VLLM_GAUDI}" if graphs else
                  f"lazy mode ({mode}), graphs='off': ops accumulate lazily every token")
        return fast_decode(graphs, None, reason, claim="H1")
    compiled = decode_compile(request, "hpu_backend")
    reason = (f"eager mode ({mode}): HPU graphs need lazy mode; "
              + (f"the step is compiled with {compiled}, which captures its graph, {VLLM_GAUDI}" if compiled
                 else "the step runs eagerly (compile='none')"))
    return fast_decode(None, compiled, reason, claim="H9" if compiled else "H1")


def graph_capturer(kind: str) -> Callable[..., Any] | None:
    """The HPU graph capturer: ``HPUGraph.capture_begin()`` / ``capture_end()`` on a side stream."""
    if kind != "hpu":
        return None
    hpu = importlib.import_module("habana_frameworks.torch.hpu")
    graphs = importlib.import_module("habana_frameworks.torch.hpu.graphs")
    streams = hpu if hasattr(hpu, "Stream") and hasattr(hpu, "stream") else graphs

    def record(graph: Any, stream: Any) -> Any:
        return begin_end(streams, graph, stream)

    return stream_capturer(streams, graphs.HPUGraph, record)
