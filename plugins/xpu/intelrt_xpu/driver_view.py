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
from .facts import HIERARCHY_VAR, MASK_VAR


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
    """True: intelrt's detection initialised the driver and read the environment then. False: the
    driver was initialised before intelrt looked; :attr:`mask` is the best evidence (the mask at
    ``import intelrt``, when the count agrees with it), or ``None``."""
    note: str | None = None
    """What intelrt could not tell, when not :attr:`recorded`."""

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
        count = int(torch.xpu.device_count()) if torch.xpu.is_available() else 0
        if before or not _consistent(mask, hierarchy, count):
            started = environment_at_import()
            mask, hierarchy = started.get(MASK_VAR), started.get(HIERARCHY_VAR)
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
