"""Stand-in for ``habana_frameworks.torch.hpu`` (the ``torch.hpu`` module on Gaudi).

Covers what intelrt, transformers (``is_torch_hpu_available``, ``TrainingArguments``, the
bitsandbytes quantizers) and accelerate (``PartialState``, ``accelerate launch``) call, with the
bridge's rules (gaudi-pytorch-bridge 1.19 ``hpu/__init__.py``): the count is cached at its first
answer; the first device query acquires a Gaudi for the process, which then keeps it;
``set_device(i)`` maps index ``i`` to a module id of ``HABANA_VISIBLE_MODULES`` (read with
``int()``: a malformed entry raises ``ValueError``) and refuses another module once one is held;
``get_device_properties`` answers a string; HPU graphs are exported in lazy mode only.
"""

from __future__ import annotations

import os
from typing import Any

from intelrt.testing.simulation import current as _current

from ..utils.internal import is_lazy
from . import random  # noqa: F401
from .random import (  # noqa: F401 - the real torch.hpu re-exports them
    get_rng_state,
    get_rng_state_all,
    manual_seed,
    manual_seed_all,
    set_rng_state,
    set_rng_state_all,
)

if is_lazy():
    from .graphs import HPUGraph, wrap_in_hpu_graph  # noqa: F401

__intelrt_stub__ = True

_VISIBLE = "HABANA_VISIBLE_MODULES"
_MODULE_ID = "HLS_MODULE_ID"
_initialized = False
_current_index = -1


def _available_modules() -> list[int]:
    """``_get_available_modules_from_environ``: ``int()`` of each entry, so a bad one raises."""
    modules = [int(x) for x in os.getenv(_VISIBLE, "0,1,2,3,4,5,6,7").split(",")]
    assert 0 < len(modules) <= 8, f"{_VISIBLE} does not have valid value."
    return modules


def _index(device: Any) -> int:
    """The device index meant by ``device`` (None, an int, ``"hpu"``, ``"hpu:1"``, a torch.device)."""
    if isinstance(device, str):
        device = device.split(":")[1] if ":" in device else None
    raw = getattr(device, "index", device)
    return current_device() if raw is None else int(raw)


def _acquired_module() -> int:
    """The module this process acquires: ``HLS_MODULE_ID``, else the entry of
    ``HABANA_VISIBLE_MODULES`` at ``LOCAL_RANK`` (Habana's Gaudi-to-process assignment: module =
    local rank when the list is unset), else the first visible one."""
    sim = _current()
    if os.environ.get(_MODULE_ID):
        return int(os.environ[_MODULE_ID])
    rank = os.environ.get("LOCAL_RANK") or os.environ.get("OMPI_COMM_WORLD_LOCAL_RANK")
    if rank is not None and rank.isdigit():
        return _available_modules()[int(rank)] if _VISIBLE in os.environ else int(rank)
    return sim.modules()[sim.visible_ids()[0]]


def _lazy_init() -> None:
    """Acquire a Gaudi for this process (the bridge's ``_hpu_C.init()``)."""
    global _initialized
    if _initialized:
        return
    sim = _current()
    if not sim.visible_ids():
        raise RuntimeError("synStatus 26 [Device not found]: no Gaudi device available (simulated)")
    sim.record(f"hpu.acquire:{_acquired_module()}")
    _initialized = True


def is_initialized() -> bool:
    return _initialized


def init() -> None:
    _current().record("hpu.init")
    _lazy_init()


def is_available() -> bool:
    sim = _current()
    sim.record("hpu.is_available")
    return bool(sim.visible_ids())


def device_count() -> int:
    sim = _current()
    sim.record("hpu.device_count")
    if device_count._device_count is None:  # type: ignore[attr-defined]
        device_count._device_count = len(sim.visible_ids())  # type: ignore[attr-defined]
    return int(device_count._device_count)  # type: ignore[attr-defined]


device_count._device_count = None  # type: ignore[attr-defined]


def _checked(device: Any) -> int:
    _lazy_init()
    index = _index(device)
    if index < 0 or index >= device_count():
        raise AssertionError("Invalid device id")
    return index


def get_device_name(device: Any = None) -> str:
    sim = _current()
    sim.record("hpu.get_device_name")
    _checked(device)
    return sim.device_name()


def get_device_properties(device: Any = None) -> str:
    """A string, as the bridge answers (``_hpu_C.get_device_properties``)."""
    sim = _current()
    sim.record("hpu.get_device_properties")
    index = _checked(device)
    kind = {"gaudi1": 1, "gaudi2": 2, "gaudi3": 3}[sim.generation or "gaudi2"]
    return (f"(sramBaseAddress=0, dramBaseAddress=0, sramSize=0, dramSize={sim.total_memory()}, "
            f"tpcEnabledMask=0, dramEnabled=1, fd=0, device_id={index}, device_type={kind})")


def is_bf16_supported() -> bool:
    """Every Gaudi generation computes in bfloat16 (the bridge answers ``is_available()``)."""
    _current().record("hpu.is_bf16_supported")
    return is_available()


def current_device() -> int:
    _current().record("hpu.current_device")
    _lazy_init()
    return max(_current_index, 0)


def set_device(device: Any) -> None:
    """The bridge's ``set_device``: index → module id; once a module is held, only that one."""
    global _current_index
    sim = _current()
    sim.record("hpu.set_device")
    index = _index(device)
    available = _available_modules()
    if index not in available and index > len(available):
        raise AssertionError(f"Trying to open device with idx={index} when only {available} are avaliable)")
    held = int(os.environ.get(_MODULE_ID) or -1)
    if held >= 0:
        index = next((i for i in range(device_count()) if available[i] == held), index)
        assert available[index] == held, (f"Requested module_id={available[index]} is different from "
                                          f"current_module_id={held} which was previously set.")
    if held == -1 and _VISIBLE not in os.environ and device_count() < 8:
        assert index == 0, f"As {_VISIBLE} is not provided, the only supported device idx is 0."
    else:
        os.environ[_MODULE_ID] = str(available[index])
    _current_index = index


def synchronize(device: object = None) -> None:
    _current().record("hpu.synchronize")


def memory_allocated(device: object = None) -> int:
    return 0


def max_memory_allocated(device: object = None) -> int:
    return 0


def reset_peak_memory_stats(device: object = None) -> None:
    return None


def empty_cache() -> None:
    _current().record("hpu.empty_cache")


def mem_get_info(device: object = None) -> tuple[int, int]:
    """``(free, total)`` of the Gaudi (the bridge's ``hpu.memory.mem_get_info``)."""
    sim = _current()
    sim.record("hpu.mem_get_info")
    _checked(device)
    return sim.total_memory(), sim.total_memory()
