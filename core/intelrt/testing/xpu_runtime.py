"""The ``torch._C``-level XPU calls of a simulated machine, so torch's own ``torch.xpu`` runs on top.

On an XPU build of torch, ``torch.xpu`` (Python) calls into ``torch._C``: ``_xpu_getDeviceCount``
(SYCL enumerates the Level Zero devices once per process), ``_xpu_init`` (binds
``torch.xpu._get_device_properties`` and the generators), ``_xpu_setDevice`` … This module
provides those functions for a :class:`~intelrt.testing.simulation.Simulation`; torch's
``is_available``, ``device_count``, ``get_device_properties``, ``is_bf16_supported``,
``set_device``, ``mem_get_info`` and transformers' and accelerate's code above them are the
real ones. The device list comes from :mod:`.level_zero`, read once, at the first call that
initialises the driver, like the real driver.

Tensors on ``"xpu"`` cannot be faked on a CPU build: a CPU build of torch has no XPU allocator
or kernels, and ``"xpu"`` is torch's own device type, which the PrivateUse1 route
(``torch.utils.rename_privateuse1_backend``) cannot take. So model execution under simulation stays
on the CPU, and what upstream does by placing a tensor is not simulated. The one that decides
plans: accelerate's ``get_max_memory()`` (``accelerate/utils/modeling.py``), which ``device_map="auto"``
without ``max_memory`` runs, places ``torch.tensor(0, device="xpu:i")`` on each device before
asking ``mem_get_info`` for its free memory, and logs and skips a device where that fails — so
under simulation it budgets the CPU only, where real hardware budgets each XPU's free memory. The
plan therefore passes ``max_memory`` whenever it limits ``auto`` to named devices (``devices=``,
:mod:`intelrt_xpu.placement`), and the free memory accelerate would read is what
:meth:`XpuDriver.memory_info` answers. Device memory is still accounted: :meth:`XpuDriver.allocate` is the caching allocator's
``malloc`` path (a test stands in for the tensors a load would create), and what it holds shows
in torch's own ``mem_get_info``, ``memory_allocated``, ``memory_reserved`` and ``memory_stats``;
an allocation past the product's single-allocation limit (Arc: 4 GiB) or past the free memory
raises torch's ``OutOfMemoryError`` with torch's message. ``torch.distributed``'s ``xccl``
backend is simulated by a Gloo process group, so ranks of a simulated launch rendezvous and
reduce for real.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from .level_zero import HIERARCHY_VAR, MASK_VAR, Device, enumerate_devices

if TYPE_CHECKING:
    from .machine import SimulationView as Simulation

PLATFORM = "Intel(R) oneAPI Unified Runtime over Level-Zero"
DRIVER_VERSION = "1.6.simulated"
RELAXED_LIMITS_VAR = "UR_L0_ENABLE_RELAXED_ALLOCATION_LIMITS"
"""Set to ``1`` before the driver loads, it lifts the single-allocation limit (oneapi-src/unified-runtime#1245)."""
# The caching allocator's sizes (pytorch c10/core/CachingDeviceAllocator.h, shared by XPU and CUDA).
_MIN_BLOCK = 512
_SMALL_SIZE = 1 << 20
_SMALL_BUFFER = 2 << 20
_MIN_LARGE_ALLOC = 10 << 20
_LARGE_BUFFER = 20 << 20
_ROUND_LARGE = 2 << 20


def format_size(size: int) -> str:
    """c10's ``format_size`` (as torch's out-of-memory messages print sizes)."""
    if size <= 1024:
        return f"{size} bytes"
    if size <= 1048576:
        return f"{size / 1024:.2f} KiB"
    if size <= 1073741824:
        return f"{size / 1048576:.2f} MiB"
    return f"{size / 1073741824:.2f} GiB"


def _round_size(size: int) -> int:
    return _MIN_BLOCK if size < _MIN_BLOCK else _MIN_BLOCK * ((size + _MIN_BLOCK - 1) // _MIN_BLOCK)


def _allocation_size(size: int) -> int:
    """``get_allocation_size``: the segment the allocator asks the driver for."""
    if size <= _SMALL_SIZE:
        return _SMALL_BUFFER
    if size < _MIN_LARGE_ALLOC:
        return _LARGE_BUFFER
    return _ROUND_LARGE * ((size + _ROUND_LARGE - 1) // _ROUND_LARGE)


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
        self.relaxed_limits = False
        self.blocks: dict[int, tuple[int, int, int]] = {}
        """handle → (device index, allocated bytes, reserved bytes)."""
        self.peaks: dict[tuple[int, str], int] = {}

    # -- the driver ----------------------------------------------------------------------------
    def enumerate(self) -> list[Device]:
        """The visible devices, decided from the environment at the first call and never again."""
        if self.devices is None:
            self.sim.record("xpu.driver_init")
            self.relaxed_limits = os.environ.get(RELAXED_LIMITS_VAR) == "1"
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

    # -- memory --------------------------------------------------------------------------------
    def _held(self, index: int, which: int) -> int:
        return sum(block[which] for block in self.blocks.values() if block[0] == index)

    def free_memory(self, index: int) -> int:
        """The device's free memory as Level Zero reports it to everyone: less what this process
        reserved and what other processes use (``memory_used_gib``)."""
        total = self._properties(index).total_memory
        others = int(self.sim.machine.memory_used_gib * 1024**3)
        return max(0, total - others - self._held(index, 2))

    def memory_info(self, index: int) -> tuple[int, int]:
        """``torch.xpu.mem_get_info``: (SYCL ``ext_intel_free_memory``, ``global_mem_size``)
        (pytorch ``c10/xpu/XPUCachingAllocator.cpp``, ``getMemoryInfo``)."""
        self.sim.record("xpu.mem_get_info")
        return self.free_memory(index), self._properties(index).total_memory

    def allocate(self, index: int, size: int) -> int:
        """What the caching allocator's ``malloc`` does for a new block of ``size`` bytes on device
        ``index``: a handle, or torch's ``OutOfMemoryError`` with torch's message when the driver
        refuses the segment (past the single-allocation limit, or past the free memory)."""
        import torch

        self.sim.record(f"xpu.allocate:{index}:{size}")
        self._device(index)
        total = self._properties(index).total_memory
        alloc = _allocation_size(_round_size(size))
        limit = None if self.relaxed_limits else self.sim.machine.product_info().max_allocation
        free = self.free_memory(index)
        if (limit is not None and alloc > limit) or alloc > free:
            allocated, reserved = self._held(index, 1), self._held(index, 2)
            raise torch.OutOfMemoryError(
                f"XPU out of memory. Tried to allocate {format_size(alloc)}. GPU {index} has a total capacity of "
                f"{format_size(total)} of which {format_size(free)} is free. Of the allocated memory "
                f"{format_size(allocated)} is allocated by PyTorch, and {format_size(reserved - allocated)} is "
                "reserved by PyTorch but unallocated. Please use `empty_cache` to release all unoccupied cached "
                "memory.")
        handle = max(self.blocks, default=0) + 1
        self.blocks[handle] = (index, _round_size(size), alloc)
        for which, name in ((1, "allocated_bytes"), (2, "reserved_bytes")):
            key = (index, name)
            self.peaks[key] = max(self.peaks.get(key, 0), self._held(index, which))
        return handle

    def release(self, handle: int) -> None:
        """Free a block :meth:`allocate` returned (the allocator gives the segment back at ``empty_cache``;
        the simulation gives it back at once)."""
        self.sim.record("xpu.free")
        self.blocks.pop(handle)

    def synchronize(self, index: int) -> None:
        self.sim.record("xpu.synchronize")

    def empty_cache(self) -> None:
        self.sim.record("xpu.empty_cache")

    def memory_stats(self, index: int) -> dict[str, Any]:
        """``torch._C._xpu_memoryStats``: the nested stats ``torch.xpu.memory_stats`` flattens."""
        stats: dict[str, Any] = {}
        for which, name in ((1, "allocated_bytes"), (2, "reserved_bytes"), (1, "active_bytes")):
            current = self._held(index, which)
            peak = self.peaks.get((index, name if name != "active_bytes" else "allocated_bytes"), current)
            stats[name] = {"all": {"current": current, "peak": max(peak, current)}}
        return stats

    def reset_stats(self, index: int) -> None:
        for name, which in (("allocated_bytes", 1), ("reserved_bytes", 2)):
            self.peaks[(index, name)] = self._held(index, which)

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
    options)``; ranks rendezvous through the store and collectives run for real (on the CPU).

    Kinder than the real one, an assumption named here: XCCL refuses ``ReduceOp`` BAND, BOR, BXOR and
    PREMUL_SUM ("Cannot use ReduceOp.<op> with XCCL"; AVG too before oneCCL 2021.15), Float8 tensors
    in reductions and data types outside uint8, int8, int32, int64, float16, float32, float64,
    bfloat16 and bool ("Input tensor data type is not supported for XCCL process group")
    (intel/torch-xpu-ops ``src/xccl/ProcessGroupXCCL.hpp`` ``getXcclReduceOp``, ``getXcclDataType``);
    the Gloo group accepts most of them, and its hangs are not XCCL's. Checking them here needs a
    group of Python's own (c10d's ``Backend`` has no Python constructor, and a Python
    ``ProcessGroup`` would change what DDP and FSDP run on in every simulated launch): not done."""
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
