"""Stand-in for ``habana_frameworks.torch.dynamo.compile_backend.backends``: the ``hpu_backend``.

The real module registers ``hpu_backend`` with ``torch._dynamo`` when it is imported
(gaudi-pytorch-bridge 1.19 ``backends.py`` l.47-72: ``@register_backend``), which
``habana_frameworks.torch.core`` does in both execution modes. Compiling with it is supported in
eager mode only: Intel's PyTorch Support Matrix lists ``torch.compile(backend="hpu_backend")`` as
"No" in lazy mode, and vLLM's Gaudi plugin turns dynamo off there (vllm-gaudi ``platform.py``
l.411-431: "PT HPU lazy backend does not support torch.compile"). The stand-in records each graph
it compiles and runs it unchanged on the CPU; in lazy mode it refuses to compile (the real
failure is not documented; the simulation makes it loud).

A ``hpu_backend`` a test registered before the stack was imported is left in place.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from torch._dynamo.backends import registry as _registry

from intelrt.testing.simulation import current as _current

from ...utils.internal import is_lazy


def hpu_backend(graph_module: Any, example_inputs: list[Any], **kwargs: Any) -> Callable[..., Any]:
    sim = _current()
    if is_lazy():
        sim.record("hpu_backend.refused:lazy")
        raise RuntimeError("torch.compile(backend='hpu_backend') does not run in lazy mode (PT_HPU_LAZY_MODE=1): "
                           "Intel's PyTorch Support Matrix supports torch.compile in eager mode only "
                           "(PT_HPU_LAZY_MODE=0) (simulated Gaudi stack)")
    sim.record("hpu_backend.compile")
    return graph_module.forward


hpu_backend.__intelrt_stub__ = True  # type: ignore[attr-defined]

if "hpu_backend" not in _registry._COMPILER_FNS:
    _registry.register_backend(hpu_backend)
