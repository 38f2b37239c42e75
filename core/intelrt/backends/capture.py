"""Stream-capture graph capturers (CUDA graphs, XPU graphs, HPU graphs share one shape).

Each backend's ``Backend.graph_capturer`` returns one of these; the decode engine calls it on
its own thread. Nothing here imports torch at import time.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator
from typing import Any

Step = Callable[[], object]
Replay = Callable[[], object]
Capturer = Callable[..., Replay]


def stream_capturer(device: Any, new_graph: Callable[[], Any],
                    record: Callable[[Any, Any], contextlib.AbstractContextManager[Any]]) -> Capturer:
    """A capturer for a torch device module with ``Stream``/``stream``/``current_stream``.

    Warm-up runs on a side stream (required before CUDA-style capture: kernels are compiled and
    workspaces allocated outside the graph), then ``record(graph, stream)`` records one call.
    """

    def capture(step: Step, warmup: int = 2) -> Replay:
        side = device.Stream()
        side.wait_stream(device.current_stream())
        with device.stream(side):
            for _ in range(warmup):
                step()
        device.current_stream().wait_stream(side)
        graph = new_graph()
        with record(graph, side):
            step()
        device.current_stream().wait_stream(side)
        replay: Replay = graph.replay
        return replay

    return capture


@contextlib.contextmanager
def begin_end(device: Any, graph: Any, stream: Any) -> Iterator[None]:
    """Record with explicit ``capture_begin``/``capture_end`` on ``stream`` (HPU graphs' API)."""
    with device.stream(stream):
        graph.capture_begin()
        try:
            yield
        finally:
            graph.capture_end()
