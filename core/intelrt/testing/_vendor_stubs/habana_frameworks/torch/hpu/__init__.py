"""Stand-in for ``habana_frameworks.torch.hpu`` (the ``torch.hpu`` module on Gaudi).

Covers what intelrt, transformers (``is_torch_hpu_available``, ``TrainingArguments``, the
bitsandbytes quantizers) and accelerate (``PartialState``, ``accelerate launch``) call, with the
bridge's rules (gaudi-pytorch-bridge 1.19 ``hpu/__init__.py``):

* ``is_available()`` and ``device_count()`` count devices without acquiring one (l.99-118; the
  count "can be made prior to device acquire", ``device.cpp`` l.556-571); the count is cached;
* every other device query — ``get_device_name``, ``get_device_properties``, ``current_device``,
  ``synchronize``, ``mem_get_info`` / ``memory_stats`` — first runs ``_lazy_init()`` (l.67-91),
  which acquires a Gaudi for the process for good (:mod:`intelrt.testing.gaudi_modules`: one
  process per Gaudi, across processes) and sets checkpointing's default device type to ``hpu``;
* ``set_device(i)`` acquires nothing: it maps index ``i`` to a module id of
  ``HABANA_VISIBLE_MODULES`` (read with ``int()``: a malformed entry raises ``ValueError``),
  refuses another module once ``HLS_MODULE_ID`` names one, and records ``HLS_MODULE_ID``
  (l.321-358) — so after the process acquired a device, it changes nothing;
* ``get_device_properties`` answers a string; HPU graphs are exported in lazy mode only (l.45-46);
* fused SDPA's recompute switch (l.468-498), on by default (``backend/helpers/runtime_config.cpp`` l.33).
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator
from typing import Any

import torch.utils.checkpoint as _checkpoint

from intelrt.testing import gaudi_modules as _modules
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

HABANA_VISIBLE_MODULES_VAR = "HABANA_VISIBLE_MODULES"
HLS_MODULE_ID_VAR = "HLS_MODULE_ID"
_initialized = False
_recompute_fsdpa = True
_in_use: dict[str, int] = {"InUse": 0, "MaxInUse": 0, "NumAllocs": 0}


def _get_available_modules_from_environ() -> list[int]:
    """``hpu/_utils.py`` l.75-85: ``int()`` of each entry, so a bad one raises."""
    modules = [int(x) for x in os.getenv(HABANA_VISIBLE_MODULES_VAR, "0,1,2,3,4,5,6,7").split(",")]
    assert 0 < len(modules) <= 8, f"{HABANA_VISIBLE_MODULES_VAR} does not have valid value."
    return modules


def _get_module_id_from_environ() -> int:
    value = os.getenv(HLS_MODULE_ID_VAR, -1)
    return int(value) if value else -1


def _index(device: Any) -> int:
    """The device index meant by ``device`` (None, an int, ``"hpu"``, ``"hpu:1"``, a torch.device)."""
    if isinstance(device, str):
        device = device.split(":")[1] if ":" in device else None
    raw = getattr(device, "index", device)
    return current_device() if raw is None else int(raw)


def _lazy_init() -> None:
    """The bridge's ``_hpu_C.init()``: acquire a Gaudi for this process, once."""
    global _initialized
    if _initialized:
        return
    _modules.acquire(_current())
    _initialized = True
    _checkpoint.DefaultDeviceType.set_device_type("hpu")


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
    return sim.machine.device_name()


def get_device_properties(device: Any = None) -> str:
    """A string, as the bridge answers (``_hpu_C.get_device_properties``)."""
    sim = _current()
    sim.record("hpu.get_device_properties")
    index = _checked(device)
    kind = {"gaudi1": 1, "gaudi2": 2, "gaudi3": 3}[sim.machine.gaudi_generation()]
    return (f"(sramBaseAddress=0, dramBaseAddress=0, sramSize=0, dramSize={sim.machine.total_memory()}, "
            f"tpcEnabledMask=0, dramEnabled=1, fd=0, device_id={index}, device_type={kind})")


def is_bf16_supported() -> bool:
    """Every Gaudi generation computes in bfloat16 (the bridge answers ``is_available()``)."""
    _current().record("hpu.is_bf16_supported")
    return is_available()


def current_device() -> int:
    _current().record("hpu.current_device")
    _lazy_init()
    return max(set_device.current_device_idx, 0)  # type: ignore[attr-defined]


def set_device(device: Any) -> None:
    """The bridge's ``set_device``: index → module id; once a module is named, only that one."""
    _current().record("hpu.set_device")
    device_idx = _index(device)
    available = _get_available_modules_from_environ()
    if device_idx not in available and device_idx > len(available):
        raise AssertionError(f"Trying to open device with idx={device_idx} when only {available} are avaliable)")
    held = _get_module_id_from_environ()
    if held >= 0:
        device_idx = next((i for i in range(device_count()) if available[i] == held), device_idx)
        assert available[device_idx] == held, (f"Requested module_id={available[device_idx]} is different from "
                                               f"current_module_id={held} which was previously set.")
    if held == -1 and HABANA_VISIBLE_MODULES_VAR not in os.environ and device_count() < 8:
        assert device_idx == 0, f"As {HABANA_VISIBLE_MODULES_VAR} is not provided, the only supported device idx is 0."
    else:
        os.environ[HLS_MODULE_ID_VAR] = str(available[device_idx])
    set_device.current_device_idx = device_idx  # type: ignore[attr-defined]


set_device.current_device_idx = -1  # type: ignore[attr-defined]


def synchronize(device: object = None) -> None:
    _current().record("hpu.synchronize")
    _lazy_init()


def memory_stats(device: object = None) -> dict[str, int]:
    """``hpu/memory.py`` l.77-100: ``Limit`` (the device's memory), ``InUse``, ``MaxInUse`` …"""
    sim = _current()
    sim.record("hpu.memory_stats")
    _checked(device)
    return {"Limit": sim.machine.total_memory(), **_in_use}


def memory_allocated(device: object = None) -> int:
    return _in_use["InUse"]


def max_memory_allocated(device: object = None) -> int:
    return _in_use["MaxInUse"]


def reset_peak_memory_stats(device: object = None) -> None:
    _in_use["MaxInUse"] = _in_use["InUse"]


def empty_cache() -> None:
    _current().record("hpu.empty_cache")


def mem_get_info(device: object = None) -> tuple[int, int]:
    """``(free, total)``: ``Limit - InUse`` and ``Limit`` of ``memory_stats`` (``hpu/memory.py`` l.177-180)."""
    _current().record("hpu.mem_get_info")
    stats = memory_stats(device)
    return stats["Limit"] - stats["InUse"], stats["Limit"]


def enable_recompute_sdp(enabled: bool) -> None:
    """Fused SDPA with (True) or without (False) recompute."""
    global _recompute_fsdpa
    _recompute_fsdpa = bool(enabled)


def recompute_sdp_enabled() -> bool:
    return _recompute_fsdpa


@contextlib.contextmanager
def sdp_kernel(enable_recompute: bool = True) -> Iterator[dict[str, Any]]:
    backup = recompute_sdp_enabled()
    try:
        enable_recompute_sdp(enable_recompute)
        yield {}
    finally:
        enable_recompute_sdp(backup)
