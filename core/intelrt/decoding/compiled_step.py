"""The graphs of a compiled decode step, and the calls that build them (issue 39).

A compiled step is built by calling it: dynamo traces and the compiler compiles at the first call of
a shape no earlier call had. The compile worker (``compile_worker.py``, a process of its own) makes
these calls with nothing cached; the decoding process makes the very same calls once the worker is
done and finds every graph in inductor's caches (the FX-graph and AOT-autograd caches under
``TORCHINDUCTOR_CACHE_DIR``, shared by default, and the artifacts the worker kept in intelrt's
compile cache). The calls therefore trace the same graphs in both processes:

* the compact step compiled with symbolic shapes (``engine.dynamic_rows``: inductor) has one graph
  per :data:`ROW_CLASSES` entry — one row (torch specialises a size of 1), a few rows (up to
  ``DecodeTuning.gemv_max_rows``: multiply-and-sum projections) and more rows — each serving every
  row count of its class and every cache size. Each is built over a small cache of its own
  (:data:`SYMBOLIC_BLOCKS` blocks, :data:`SYMBOLIC_WIDTH` per row) with torch's duck sizing off, so
  that every size is a symbol of its own: two sizes that happen to be equal in one process (two rows
  and two key/value heads) are never tied together in one graph and not in the other;
* a step compiled for static shapes (the model's own forward, or a compiler without symbolic
  shapes: Gaudi's ``hpu_backend``) has one graph per row bucket of the batch, at the batch's own
  sizes (rows, blocks per row, cache blocks).

The arguments are the ones the engine's steps pass (``runner.ModelRunner._step_fn``): zeroed row
state, written at slot 0 of the null block (``blocks.NULL_BLOCK``, where idle rows write; no live
row reads it), under ``inference_mode`` and the decoder's compiler settings.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator, Sequence
from dataclasses import asdict, dataclass
from typing import TYPE_CHECKING, Any

from .runner import MAX_STOPS

if TYPE_CHECKING:
    from .engine import FastDecoder
    from .paged import PagedCache

SYMBOLIC_BLOCKS = 5
"""Cache blocks of the small cache a symbolic graph is built over (any size of 2 or more would do)."""
SYMBOLIC_WIDTH = 3
"""Blocks per row of a symbolic graph's table (2 or more: torch specialises a size of 1)."""
ROW_CLASSES = ("one", "few", "many")
"""The symbolic graphs of the compact step: one row; 2 to ``gemv_max_rows`` rows; more rows."""


@dataclass(frozen=True)
class StepGraph:
    """One graph of a compiled decode step: what a call of ``rows`` rows over a cache of ``blocks``
    blocks of ``block_size`` slots, ``width`` blocks per row, builds. ``rows_class``: the symbolic
    graph's class (:data:`ROW_CLASSES`), serving every row count of the class and every cache size;
    ``None``: a graph of exactly these sizes."""

    rows: int
    width: int
    blocks: int
    block_size: int
    rows_class: str | None = None

    @property
    def key(self) -> tuple[Any, ...]:
        """The graph's compile-cache entry (``compile_cache.CompileCache``)."""
        if self.rows_class is not None:
            return ("rows", self.rows_class, self.block_size)
        return ("paged", self.rows, self.width, self.blocks, self.block_size)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def rows_class(rows: int, gemv_max_rows: int) -> str:
    """The symbolic graph a step of ``rows`` rows runs (:data:`ROW_CLASSES`)."""
    return "one" if rows == 1 else "few" if rows <= gemv_max_rows else "many"


def class_rows(name: str, gemv_max_rows: int) -> int:
    """The rows a symbolic graph of class ``name`` is built with."""
    return {"one": 1, "few": max(2, gemv_max_rows), "many": max(2, gemv_max_rows + 1)}[name]


def step_graphs(symbolic: bool, buckets: Sequence[int], width: int, blocks: int, block_size: int,
                gemv_max_rows: int) -> list[StepGraph]:
    """The graphs the decode steps of a batch run: one per row bucket (``buckets``, as the compiled
    step buckets rows), or with ``symbolic`` shapes one per row class its buckets fall in."""
    graphs: dict[tuple[Any, ...], StepGraph] = {}
    for bucket in buckets:
        if symbolic:
            name = rows_class(bucket, gemv_max_rows)
            graph = StepGraph(class_rows(name, gemv_max_rows), SYMBOLIC_WIDTH, SYMBOLIC_BLOCKS, block_size, name)
        else:
            graph = StepGraph(bucket, width, blocks, block_size)
        graphs.setdefault(graph.key, graph)
    return list(graphs.values())


@contextlib.contextmanager
def distinct_sizes() -> Iterator[None]:
    """Every symbolic size its own symbol (torch's duck sizing off) while the block runs."""
    import torch.fx.experimental._config as shape_config

    with shape_config.patch(use_duck_shape=False):  # type: ignore[attr-defined]  # install_config_module adds it
        yield


def build(decoder: FastDecoder, graphs: Sequence[StepGraph], device: Any, cache: PagedCache | None = None) -> None:
    """Call ``decoder``'s compiled step (its compile settings applied: ``FastDecoder.compiled_twin``)
    once for each of ``graphs``, with the arguments the engine's steps pass, so that each is compiled
    (or found in the caches). A graph of exact sizes runs over ``cache`` when it has them (the batch's
    own KV cache: only the null block is written), else over a cache made for the call."""
    import torch

    record = decoder.recorder()
    long = {"dtype": torch.long, "device": device}
    with torch.inference_mode(), decoder.compiler_settings(), distinct_sizes():
        for graph in graphs:
            over = cache if cache is not None and _holds(cache, graph) else decoder.new_cache(
                graph.blocks, graph.block_size, device)
            rows, width = graph.rows, graph.width
            forward = decoder.new_forward(over, rows)
            zeros = torch.zeros((rows,), **long)
            logits = forward.decode(zeros[:, None], zeros[:, None], zeros, torch.zeros((rows, width), **long))
            record(logits.argmax(-1), torch.zeros((rows, 1), **long), torch.zeros((rows, 1), **long),
                   torch.zeros((rows,), **long), torch.zeros((rows, width), **long),
                   torch.ones((rows,), dtype=torch.bool, device=device), torch.zeros((rows,), **long),
                   torch.full((rows, MAX_STOPS), -1, **long),
                   torch.zeros((rows, decoder.tuning.max_steps), **long), torch.zeros((1,), **long),
                   graph.block_size, width)


def _holds(cache: PagedCache, graph: StepGraph) -> bool:
    return graph.rows_class is None and cache.keys[0].shape[0] == graph.blocks and cache.block_size == graph.block_size
