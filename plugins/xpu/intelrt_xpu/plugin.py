"""The ``intelrt`` entry point ``xpu = intelrt_xpu.plugin``: contributes the ``xpu`` backend."""

from __future__ import annotations

from intelrt.plugin import Backend, hookimpl

from .backend import XpuBackend
from .facts import ACCELERATE_XPU_OFF_AT_OR_BELOW, PRIORITY, TRANSFORMERS_TORCH_FLOOR


@hookimpl
def intelrt_backends() -> list[type[Backend]]:
    return [XpuBackend]


__all__ = ["ACCELERATE_XPU_OFF_AT_OR_BELOW", "PRIORITY", "TRANSFORMERS_TORCH_FLOOR", "XpuBackend", "intelrt_backends"]
