"""The ``intelrt`` entry point ``hpu = intelrt_hpu.plugin``: contributes the ``hpu`` backend."""

from __future__ import annotations

from intelrt.plugin import Backend, hookimpl

from .backend import HpuBackend


@hookimpl
def intelrt_backends() -> list[type[Backend]]:
    return [HpuBackend]


__all__ = ["HpuBackend", "intelrt_backends"]
