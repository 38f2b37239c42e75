"""The ``torch._C``-level XPU calls of a simulated machine, so torch's own ``torch.xpu`` runs on top.

On an XPU build of torch, ``torch.xpu`` (Python) calls into ``torch._C``: ``_xpu_getDeviceCount``
(SYCL enumerates the Level Zero devices once per process), ``_xpu_init`` (binds
``torch.xpu._get_device_properties`` and the generators), ``_xpu_setDevice`` … This module
provides those functions for a :class:`~intelrt.testing.simulation.Simulation`; torch's
``is_available``, ``device_count``, ``get_device_properties``, ``is_bf16_supported``,
``set_device``, ``mem_get_info`` and transformers' and accelerate's code above them are the
real ones. The device list comes from :mod:`.level_zero`, read once, at the first call that
initialises the driver, like the real driver.

Tensors on ``"xpu"`` cannot be faked on a CPU build: model execution under simulation stays on
the CPU. ``torch.distributed``'s ``xccl`` backend is simulated by a Gloo process group, so ranks
of a simulated launch rendezvous and reduce for real.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from .level_zero import HIERARCHY_VAR, MASK_VAR, Device, enumerate_devices

if TYPE_CHECKING:
    from .simulation import Simulation

PLATFORM = "Intel(R) oneAPI Unified Runtime over Level-Zero"
DRIVER_VERSION = "1.6.simulated"


@dataclass(frozen=True)
class XpuDeviceProperties:
    """What ``torch.xpu.get_device_properties`` returns (the fields ``_XpuDeviceProperties`` has)."""

    name: str
    total_memory: int
    has_bfloat16_conversions: bool
    uuid: bytes
    platform_name: str = PLATFORM
    vendor: str = "Intel(R) Corporation"
    driver_version: str = DRIVER_VERSION
    version: str = "12.60.7"
    type: str = "gpu"
    has_fp16: bool = True
    has_fp64: bool = True
    has_atomic64: bool = True
    has_subgroup_matrix_multiply_accumulate: bool = True
    is_integrated_gpu: bool = False

    def __repr__(self) -> str:
        return (f"_XpuDeviceProperties(name='{self.name}', platform_name='{self.platform_name}', type='{self.type}', "
                f"driver_version='{self.driver_version}', total_memory={self.total_memory // 2**20}MB, "
                f"has_bfloat16_conversions={int(self.has_bfloat16_conversions)}, uuid={self.uuid.hex()})")


class XpuDriver:
    """One process's view of the simulated Level Zero driver and torch's XPU state above it."""

    def __init__(self, sim: Simulation) -> None:
        self.sim = sim
        self.devices: list[Device] | None = None
        self.current = 0

    # -- the driver ----------------------------------------------------------------------------
    def enumerate(self) -> list[Device]:
        """The visible devices, decided from the environment at the first call and never again."""
        if self.devices is None:
            self.sim.record("xpu.driver_init")
            self.devices = enumerate_devices(self.sim.count, self.sim.product_info(), os.environ.get(HIERARCHY_VAR),
                                             os.environ.get(MASK_VAR), self.sim.tiles)
        return self.devices

    def _device(self, index: int) -> Device:
        devices = self.enumerate()
        if not 0 <= index < len(devices):
            raise RuntimeError(f"device index {index} is out of range: {len(devices)} XPU device(s) (simulated)")
        return devices[index]

    def properties(self, index: int) -> XpuDeviceProperties:
        """``torch.xpu._get_device_properties`` (bound by ``_xpu_init``, as the real one is)."""
        self.sim.record("xpu.get_device_properties")
        return self._properties(index)

    def _properties(self, index: int) -> XpuDeviceProperties:
        device = self._device(index)
        return XpuDeviceProperties(self.sim.device_name(), self.sim.tile_memory() * len(device.tiles),
                                   self.sim.bf16, device.uuid)

    # -- torch._C ------------------------------------------------------------------------------
    def get_device_count(self) -> int:
        self.sim.record("xpu.device_count")
        return len(self.enumerate())

    def init(self) -> None:
        import torch

        self.sim.record("xpu.init")
        count = len(self.enumerate())
        torch.xpu.default_generators = tuple(torch.Generator() for _ in range(count))  # type: ignore[assignment]
        torch.xpu._get_device_properties = self.properties  # type: ignore[attr-defined]

    def set_device(self, index: int) -> None:
        self.sim.record("xpu.set_device")
        self._device(index)
        self.current = index

    def get_device(self) -> int:
        self.sim.record("xpu.current_device")
        return self.current

    def exchange_device(self, index: int) -> int:
        previous = self.current
        if index >= 0:
            self.set_device(index)
        return previous

    def memory_info(self, index: int) -> tuple[int, int]:
        self.sim.record("xpu.mem_get_info")
        total = self._properties(index).total_memory
        return total, total

    def synchronize(self, index: int) -> None:
        self.sim.record("xpu.synchronize")

    def empty_cache(self) -> None:
        self.sim.record("xpu.empty_cache")

    def memory_stats(self, index: int) -> dict[str, Any]:
        return {}

    def reset_stats(self, index: int) -> None:
        return None

    def raw_stream(self, index: int) -> int:
        return 0

    def accelerator(self) -> Any:
        import torch

        return torch.device("xpu")

    def c_functions(self) -> dict[str, Callable[..., Any]]:
        """``torch._C`` attribute → simulated function."""
        return {
            "_xpu_getDeviceCount": self.get_device_count, "_xpu_init": self.init,
            "_xpu_setDevice": self.set_device, "_xpu_getDevice": self.get_device,
            "_xpu_exchangeDevice": self.exchange_device, "_xpu_maybeExchangeDevice": self.exchange_device,
            "_xpu_synchronize": self.synchronize, "_xpu_getMemoryInfo": self.memory_info,
            "_xpu_emptyCache": self.empty_cache, "_xpu_memoryStats": self.memory_stats,
            "_xpu_resetPeakMemoryStats": self.reset_stats, "_xpu_resetAccumulatedMemoryStats": self.reset_stats,
            "_xpu_getCurrentRawStream": self.raw_stream,
            "_accelerator_getAccelerator": self.accelerator, "_get_accelerator": self.accelerator,
            "_accelerator_getDeviceIndex": self.get_device, "_accelerator_setDeviceIndex": self.set_device,
            "_accelerator_exchangeDevice": self.exchange_device,
            "_accelerator_maybeExchangeDevice": self.exchange_device,
            "_accelerator_synchronizeDevice": self.synchronize,
        }


def process_group_xccl() -> type:
    """A stand-in for ``torch._C._distributed_c10d.ProcessGroupXCCL``: a Gloo group on CPU tensors.

    ``init_process_group(backend="xccl")`` builds it as ``ProcessGroupXCCL(store, rank, size,
    options)``; ranks rendezvous through the store and collectives run for real (on the CPU)."""
    from datetime import timedelta

    from torch.distributed import ProcessGroupGloo

    class Options:
        def __init__(self) -> None:
            self.global_ranks_in_group: list[int] = []
            self.group_name = ""
            self._timeout = timedelta(minutes=10)

    class ProcessGroupXCCL:
        def __new__(cls, store: Any, rank: int, size: int, options: Any) -> Any:  # noqa: D102
            return ProcessGroupGloo(store, rank, size, options._timeout)

    ProcessGroupXCCL.Options = Options  # type: ignore[attr-defined]
    return ProcessGroupXCCL
