"""Stand-in for ``habana_frameworks.torch.hpu.graphs`` (HPU graphs: capture once, replay; lazy mode only).

Records every capture and replay in the simulation's ``calls``; an ``HPUGraph`` replay does no work
(there is no device), which is enough to prove what intelrt decided and how it drives the API. A
capture inside a multi-rank ``hccl`` group in a process without lazy collectives fails (see
:mod:`habana_frameworks.torch.distributed.hccl`).

``wrap_in_hpu_graph(module, …)`` keeps one captured graph per distinct input signature — the
shapes and dtypes of the tensors and the other values passed (gaudi-pytorch-bridge 1.19
``hpu/graphs.py`` l.488-500 ``input_hash``, l.553-659 ``wrapped_hpugraph_forward``): a call with a
new signature captures a new graph (``hpu.graph.capture:<signature>``; on hardware a graph
compilation, which bucketing and warm-up exist to keep out of a serving run), a known one replays
(``hpu.graph.replay:<signature>``). ``max_graphs`` bounds the cache (further signatures run
uncaptured), ``bypass_hpu_graphs=True`` runs the plain forward, ``warmup_mode=True`` is accepted.
The stand-in runs the module's forward on every call, so results are the model's own.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator
from typing import Any

from intelrt.testing.simulation import current as _current


def _check_collectives() -> None:
    import torch.distributed as dist

    from ..distributed import hccl

    if (dist.is_available() and dist.is_initialized() and dist.get_world_size() > 1
            and dist.get_backend() == "hccl" and hccl.lazy_collectives_missing()):
        _current().record("hpu.graph.refused:lazy-collectives")
        raise RuntimeError("HPU graph capture with collectives in a multi-card hccl group needs "
                           "PT_HPU_ENABLE_LAZY_COLLECTIVES=true before the Gaudi stack is imported (vllm-gaudi "
                           "docs/configuration/env_variables.md; simulated: on hardware the collectives hang or "
                           "compute wrongly)")


class HPUGraph:
    def __init__(self) -> None:
        self.captured = False

    def capture_begin(self) -> None:
        _check_collectives()
        _current().record("hpu.graph.capture_begin")

    def capture_end(self) -> None:
        _current().record("hpu.graph.capture_end")
        self.captured = True

    def replay(self) -> None:
        if not self.captured:
            raise RuntimeError("HPUGraph.replay() before capture_end() (simulated)")
        _current().record("hpu.graph.replay")


class Stream:
    def wait_stream(self, other: Stream) -> None:
        _current().record("hpu.stream.wait_stream")


_default = Stream()


def current_stream() -> Stream:
    return _default


@contextlib.contextmanager
def stream(s: Stream) -> Iterator[None]:
    _current().record("hpu.stream.enter")
    yield


def _signature(value: Any) -> Any:
    import torch

    if isinstance(value, torch.Tensor):
        return ("tensor", tuple(value.shape), str(value.dtype))
    if isinstance(value, dict):
        return tuple((k, _signature(v)) for k, v in value.items())
    if isinstance(value, (list, tuple)):
        return tuple(_signature(v) for v in value)
    return value if isinstance(value, (int, float, str, bool, type(None))) else type(value).__name__


def _describe(key: Any) -> str:
    shapes = []

    def walk(item: Any) -> None:
        if isinstance(item, tuple) and len(item) == 3 and item[0] == "tensor":
            shapes.append("x".join(map(str, item[1])))
        elif isinstance(item, tuple):
            for part in item:
                walk(part)

    walk(key)
    return ",".join(shapes)


def wrap_in_hpu_graph(module: Any, asynchronous: bool = False, disable_tensor_cache: bool = False,
                      dry_run: bool = False, max_graphs: int | None = None) -> Any:
    """The module with its forward captured once per input signature and replayed after."""
    _check_collectives()
    _current().record("hpu.graph.wrap_in_hpu_graph")
    forward: Callable[..., Any] = module.forward
    cache: dict[Any, str] = {}

    def graphed(*args: Any, **kwargs: Any) -> Any:
        kwargs.pop("warmup_mode", False)
        if kwargs.pop("bypass_hpu_graphs", False):
            return forward(*args, **kwargs)
        key = _signature((args, kwargs))
        if key not in cache:
            if max_graphs is not None and len(cache) == max_graphs:
                return forward(*args, **kwargs)
            _check_collectives()
            cache[key] = _describe(key)
            _current().record(f"hpu.graph.capture:{cache[key]}")
        else:
            _current().record(f"hpu.graph.replay:{cache[key]}")
        return forward(*args, **kwargs)

    module.forward = graphed
    module.hpu_graph_cache = cache
    return module
