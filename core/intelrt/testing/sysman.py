"""A stand-in for ``pyzes`` (Intel's Python bindings of Level Zero Sysman) on a simulated machine.

torch 2.13 counts Intel GPUs through Level Zero Sysman when ``pyzes`` imports
(``torch/xpu/__init__.py`` ``_enum_zes_device_infos``, ``_device_count_zes``): ``zesInit``, then
``zesDriverGet`` / ``zesDeviceGet`` for the first driver's devices, ``zesDeviceGetProperties`` for
each one's ``numSubdevices`` and, through the ``zes_device_ext_properties_t`` chained on ``pNext``,
whether it is integrated. torch applies ``ZE_AFFINITY_MASK`` and ``ZE_FLAT_DEVICE_HIERARCHY`` itself,
from ``os.environ`` at every count, and this path loads no Level Zero *core* driver: ``device_count()``
then leaves the driver unloaded until ``_lazy_init`` (SPEC X2). Real machines often have ``pyzes``
(pypi.org/project/pyzes, 0.1.3: "Python bindings for Intel Level-Zero Driver Library (Sysman API)").

What Sysman lists is the simulated machine's cards, each with its tiles as sub-devices, all discrete:
an assumption that Sysman's device handles ignore ``ZE_AFFINITY_MASK`` — torch's own mask filtering
over them (``visible_mask`` in ``_enum_zes_device_infos``) is the evidence. The structures keep only
the fields torch reads (pyzes 0.1.3 ``pyzes/__init__.py`` declares the full layouts); the functions
are Python, called as pyzes' ctypes wrappers are, with ``byref`` arguments.
"""

from __future__ import annotations

import types
from ctypes import POINTER, Structure, c_int32, c_uint32, c_void_p, cast
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from .machine import SimulationView as Simulation

ZE_RESULT_SUCCESS = 0
ZE_RESULT_ERROR_UNINITIALIZED = 0x78000001
ZES_STRUCTURE_TYPE_DEVICE_PROPERTIES = 0x1
ZES_STRUCTURE_TYPE_DEVICE_EXT_PROPERTIES = 0x2D


class zes_driver_handle_t(c_void_p):  # noqa: N801 - pyzes' names
    pass


class zes_device_handle_t(c_void_p):  # noqa: N801
    pass


class zes_device_properties_t(Structure):  # noqa: N801
    _fields_ = [("stype", c_int32), ("pNext", c_void_p), ("numSubdevices", c_uint32)]


class zes_device_ext_properties_t(Structure):  # noqa: N801
    _fields_ = [("stype", c_int32), ("pNext", c_void_p), ("flags", c_uint32)]


def _target(pointer: Any) -> Any:
    """The object a ``byref(...)`` argument points at (or the object itself)."""
    return getattr(pointer, "_obj", pointer)


def module(sim: Simulation) -> types.ModuleType:
    """``pyzes`` answering for ``sim``'s machine; each call is recorded as ``"zes.<function>"``."""
    state = {"initialised": False}
    cards = sim.machine.count
    tiles = sim.machine.tiles or sim.machine.product_info().tiles

    def zesInit(flags: int) -> int:  # noqa: N802
        sim.record("zes.init")
        state["initialised"] = True
        return ZE_RESULT_SUCCESS

    def _listed(count: Any, handles: Any, n: int, kind: type) -> int:
        if not state["initialised"]:
            return ZE_RESULT_ERROR_UNINITIALIZED
        counted = _target(count)
        if handles is not None:
            for i in range(min(counted.value, n)):
                handles[i] = kind(i + 1)
        counted.value = n
        return ZE_RESULT_SUCCESS

    def zesDriverGet(count: Any, drivers: Any) -> int:  # noqa: N802
        sim.record("zes.driver_get")
        return _listed(count, drivers, 1, zes_driver_handle_t)

    def zesDeviceGet(driver: Any, count: Any, devices: Any) -> int:  # noqa: N802
        sim.record("zes.device_get")
        return _listed(count, devices, cards, zes_device_handle_t)

    def zesDeviceGetProperties(device: Any, properties: Any) -> int:  # noqa: N802
        sim.record("zes.device_get_properties")
        props = _target(properties)
        props.numSubdevices = tiles if tiles > 1 else 0
        if props.pNext:
            cast(props.pNext, POINTER(zes_device_ext_properties_t)).contents.flags = 0  # discrete
        return ZE_RESULT_SUCCESS

    stand_in = types.ModuleType("pyzes", "intelrt simulation: a stand-in for pyzes (Level Zero Sysman)")
    for name, value in {
        "ZE_RESULT_SUCCESS": ZE_RESULT_SUCCESS, "ZES_STRUCTURE_TYPE_DEVICE_PROPERTIES": ZES_STRUCTURE_TYPE_DEVICE_PROPERTIES,
        "ZES_STRUCTURE_TYPE_DEVICE_EXT_PROPERTIES": ZES_STRUCTURE_TYPE_DEVICE_EXT_PROPERTIES,
        "zes_driver_handle_t": zes_driver_handle_t, "zes_device_handle_t": zes_device_handle_t,
        "zes_device_properties_t": zes_device_properties_t, "zes_device_ext_properties_t": zes_device_ext_properties_t,
        "zesInit": zesInit, "zesDriverGet": zesDriverGet, "zesDeviceGet": zesDeviceGet,
        "zesDeviceGetProperties": zesDeviceGetProperties, "__intelrt_stub__": True,
    }.items():
        setattr(stand_in, name, value)
    return stand_in
