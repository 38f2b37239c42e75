"""X2, C2: what this process's Level Zero driver saw, recorded once, at its first initialisation.

Level Zero reads ``ZE_AFFINITY_MASK`` and ``ZE_FLAT_DEVICE_HIERARCHY`` once, in ``driverInit`` under
``std::call_once`` (compute-runtime ``level_zero/core/source/driver/driver.cpp`` l.114), and torch
enumerates its SYCL devices once per process (``c10::call_once`` in pytorch ``c10/xpu/XPUFunctions.cpp``).
A mask written into ``os.environ`` later — by the user, or by an earlier ``intelrt.setup_env`` — selects
nothing here (intel/torch-xpu-ops#2089). So what a process's devices are is decided by the environment
at the driver's first initialisation, and this module records it then, when intelrt's detection is
the first to touch the XPU, and trusts it over later ``os.environ`` (SPEC C2).

When the driver was initialised before intelrt looked (the user's own ``torch.xpu`` call), the mask
it read is not known for sure. Two facts still tell: torch's ``is_initialized()`` / cached count,
and the device count itself — a mask selecting *n* devices cannot show more than *n*. The view is
then ``recorded=False``: the mask at ``import intelrt`` is taken when it agrees with the count, and
no mask is claimed otherwise.

torch's Python state does not always show that the driver loaded. torch 2.13 counts devices through
Level Zero Sysman when the optional ``pyzes`` package imports, which leaves the driver unloaded until
``_lazy_init``; without it (or on an older torch) ``torch.xpu.device_count()`` and ``is_available()``
call ``torch._C._xpu_getDeviceCount()``, which enumerates the SYCL devices and so loads the driver,
while ``is_initialized()`` stays False and nothing is cached (``torch/xpu/__init__.py``
``device_count``, ``_device_count_zes``). The first check of the Intel GPU guide,
``torch.xpu.is_available(), torch.xpu.device_count()``, loads it that way. So when the mask changed
in this process since ``import intelrt`` and counting loads the driver, intelrt cannot tell whether
the driver read the mask of then (something counted before intelrt) or of now (intelrt's count was
the first): the view keeps both as :attr:`DriverView.candidates`, and :mod:`intelrt_xpu.devices`
names a device in this process only where the two agree.

One view per driver: the identity of torch's ``_xpu_getDeviceCount`` stands for this process's
driver (a simulation, which stands for a new process, installs a new one).
"""

from __future__ import annotations

import os
import threading
from dataclasses import dataclass
from typing import Any

from intelrt.plugin import environment_at_import

from .affinity import HIERARCHIES, read_mask
from .facts import AMBIGUOUS_VIEW, HIERARCHY_VAR, MASK_VAR


@dataclass(frozen=True)
class DriverView:
    """The environment this process's Level Zero driver read when it initialised."""

    mask: str | None
    """The ``ZE_AFFINITY_MASK`` it read (``None``: none, or unknown when not :attr:`recorded`)."""
    hierarchy: str | None
    """The ``ZE_FLAT_DEVICE_HIERARCHY`` value it read (``None``: unset, so the product's default)."""
    count: int
    """The devices it shows."""
    recorded: bool
    """True: the environment the driver read is known — intelrt's detection initialised the driver
    and read it then, or the variables have not changed since ``import intelrt``. False: the driver
    was initialised before intelrt looked; :attr:`mask` is the best evidence (the mask at ``import
    intelrt``, when the count agrees with it), or ``None`` (see :attr:`candidates`)."""
    note: str | None = None
    """What intelrt could not tell, when not :attr:`recorded`."""
    candidates: tuple[tuple[str | None, str | None], ...] = ()
    """(mask, hierarchy) pairs the driver may have read, when more than one agrees with what it
    shows (:attr:`mask` is then ``None``); empty when the view is one of them."""

    def env(self) -> dict[str, str]:
        """The view as the variables the driver read (for the readers of :mod:`intelrt_xpu.affinity`)."""
        seen = {MASK_VAR: self.mask, HIERARCHY_VAR: self.hierarchy}
        return {k: v for k, v in seen.items() if v is not None}


_lock = threading.Lock()
_view: tuple[Any, DriverView] | None = None


def _driver(torch: Any) -> Any:
    return getattr(torch._C, "_xpu_getDeviceCount", None)


def recorded_view(torch: Any) -> DriverView | None:
    """The view recorded for this process's driver, if any."""
    with _lock:
        return _view[1] if _view is not None and _view[0] is _driver(torch) else None


def _initialised_before(torch: Any) -> bool:
    xpu = torch.xpu
    return bool(xpu.is_initialized()) or getattr(xpu, "_cached_device_count", None) is not None


def _consistent(mask: str | None, hierarchy: str | None, count: int) -> bool:
    """Whether a driver that read ``mask`` can show ``count`` devices (a mask of n ids shows at most n)."""
    if mask is None:
        return True
    mode = hierarchy if hierarchy in HIERARCHIES else "FLAT"
    reading = read_mask(mask, str(mode))
    return reading.selects_all or count <= len(reading.ids)


def count_loads_driver(torch: Any) -> bool:
    """Whether ``torch.xpu.device_count()`` loads the Level Zero driver before torch initialises:
    torch 2.13 counts through Level Zero Sysman without loading it when ``pyzes`` imports and Sysman
    answers, and otherwise falls back to ``torch._C._xpu_getDeviceCount()`` (``torch/xpu/__init__.py``
    ``device_count`` and ``_device_count_zes``, which answers -1 for that fallback); a torch without
    the Sysman path always takes the C++ one."""
    sysman = getattr(torch.xpu, "_device_count_zes", None)
    if sysman is None:
        return True
    try:
        return int(sysman()) < 0
    except Exception:  # noqa: BLE001 - what torch itself does with a failing Sysman: count the other way
        return True


def _ambiguous(now: tuple[str | None, str | None], started: tuple[str | None, str | None], count: int) -> DriverView:
    def said(view: tuple[str | None, str | None]) -> str:
        return f"{MASK_VAR}={view[0]}" if view[0] is not None else f"no {MASK_VAR}"

    note = (f"{MASK_VAR} changed in this process after `import intelrt` ({said(started)} then, {said(now)} now), and "
            "this torch counts Intel GPUs by loading the Level Zero driver (no pyzes: torch.xpu.device_count() and "
            "is_available() load it): if anything counted them before intelrt did, the driver read the first, "
            f"otherwise the second; both agree with the {count} device(s) it shows, so {AMBIGUOUS_VIEW}")
    hierarchy = now[1] if now[1] == started[1] else None
    return DriverView(None, hierarchy, count, False, note, candidates=(started, now))


def first_view(torch: Any) -> DriverView:
    """This process's driver view: recorded by the first call (which initialises the driver, through
    ``torch.xpu.device_count()``), the same view for every later call, whatever ``os.environ`` says then.
    A driver that fails to initialise raises ``RuntimeError`` (nothing is recorded)."""
    global _view
    with _lock:
        driver = _driver(torch)
        if _view is not None and _view[0] is driver:
            return _view[1]
        before = _initialised_before(torch)
        mask, hierarchy = os.environ.get(MASK_VAR), os.environ.get(HIERARCHY_VAR)
        at_import = environment_at_import()
        started = at_import.get(MASK_VAR), at_import.get(HIERARCHY_VAR)
        count = int(torch.xpu.device_count()) if torch.xpu.is_available() else 0
        if not before and _consistent(mask, hierarchy, count) and (mask, hierarchy) != started and \
                _consistent(*started, count) and count_loads_driver(torch):
            view = _ambiguous((mask, hierarchy), started, count)
        elif before or not _consistent(mask, hierarchy, count):
            mask, hierarchy = started
            known = _consistent(mask, hierarchy, count)
            seen = f"the {count} device(s) it shows"
            note = (f"this process's Level Zero driver was initialised before intelrt looked, so the {MASK_VAR} it "
                    "read is not known for sure; " + (
                        f"taken to be the one at `import intelrt` ({MASK_VAR}={mask}), which agrees with {seen}"
                        if known and mask is not None else
                        f"there was none at `import intelrt`, which agrees with {seen}" if known else
                        f"the one at `import intelrt` ({MASK_VAR}={mask}) does not agree with {seen} either"))
            view = DriverView(mask if known else None, hierarchy, count, False, note)
        else:
            view = DriverView(mask, hierarchy, count, True)
        _view = (driver, view)
        return view
