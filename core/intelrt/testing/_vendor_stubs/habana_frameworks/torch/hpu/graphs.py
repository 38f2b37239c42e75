"""Stand-in for ``habana_frameworks.torch.hpu.graphs`` (HPU graphs: capture once, replay; lazy mode only).

Records every capture and replay in the simulation's ``calls``; a replay does no work (there
is no device), which is enough to prove what intelrt decided and how it drives the API. A capture
inside a multi-rank ``hccl`` group in a process without lazy collectives fails (see
:mod:`habana_frameworks.torch.distributed.hccl`).
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

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


def wrap_in_hpu_graph(module: object, *args: object, **kwargs: object) -> object:
    _check_collectives()
    _current().record("hpu.graph.wrap_in_hpu_graph")
    return module
