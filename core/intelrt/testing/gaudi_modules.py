"""Which simulated Gaudi modules are held, across every process of a simulation: one process per Gaudi.

The real driver gives a Gaudi to one process at a time: a second process that asks for an acquired
module gets ``synStatus=20 [Device already acquired] Device acquire failed.`` (huggingface/tgi-gaudi#54,
#93), one that finds no free device ``synStatus=8 [Device not found] Device acquire failed.``
(huggingface/optimum-habana#367, vllm-gaudi ``docs/.../ci_failures``). The module comes back when the
process ends. The simulation keeps that across processes with one lock file per module in the
simulation's state directory (``module-<id>.lock`` holding the owner's pid); a module another
tenant holds (:attr:`~intelrt.testing.machine.Machine.busy_modules`) is never free.

How a process chooses its module follows the bridge (gaudi-pytorch-bridge 1.19
``backend/synapse_helpers/device.cpp`` l.383-495): ``HLS_MODULE_ID`` set → acquire that module;
when it is taken and ``HABANA_VISIBLE_MODULES`` is unset and the machine has at least
``WORLD_SIZE`` devices, fall back to any free device ("Proceeding without moduleid", l.433-441);
otherwise the first free visible device (``synDeviceAcquireByDeviceType``; closed source, so the
order — device index, as ``hl-smi`` lists them — is an assumption).
"""

from __future__ import annotations

import contextlib
import logging
import os
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from .machine import SimulationView as Simulation

log = logging.getLogger(__name__)

ALREADY_ACQUIRED = "synStatus=20 [Device already acquired] Device acquire failed."
NOT_FOUND = "synStatus=8 [Device not found] Device acquire failed."
OTHER_TENANT = "tenant"
"""What a lock file of a module held outside the simulation (``busy_modules``) holds instead of a pid."""


def _lock(state_dir: str, module: int) -> Path:
    return Path(state_dir) / f"module-{module}.lock"


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def holder(state_dir: str, module: int) -> str | None:
    """Who holds ``module``: a pid (as text), :data:`OTHER_TENANT`, or ``None`` when it is free."""
    try:
        owner = _lock(state_dir, module).read_text(encoding="utf-8").strip()
    except FileNotFoundError:
        return None
    if owner.isdigit() and not _alive(int(owner)):
        return None  # the holder ended: the driver released its device
    return owner or None


def try_acquire(state_dir: str, module: int) -> bool:
    """Take ``module`` for this process unless another live process (or tenant) holds it."""
    path = _lock(state_dir, module)
    me = str(os.getpid())
    for _ in range(2):
        try:
            fd = os.open(path, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o644)
        except FileExistsError:
            owner = holder(state_dir, module)
            if owner == me:
                return True
            if owner is not None:
                return False
            with contextlib.suppress(FileNotFoundError):
                path.unlink()  # a stale lock of an ended process
            continue
        with os.fdopen(fd, "w", encoding="utf-8") as fh:
            fh.write(me)
        return True
    return False


def release_mine(state_dir: str) -> None:
    """Give back every module this process holds (the driver does it when a process ends)."""
    me = str(os.getpid())
    for path in Path(state_dir).glob("module-*.lock"):
        with contextlib.suppress(FileNotFoundError):
            if path.read_text(encoding="utf-8").strip() == me:
                path.unlink()


def mark_busy(state_dir: str, modules: tuple[int, ...]) -> None:
    """Record the modules other tenants hold (a simulation's ``busy_modules``)."""
    for module in modules:
        _lock(state_dir, module).write_text(OTHER_TENANT, encoding="utf-8")


def acquire(sim: Simulation, environ: os._Environ[str] | dict[str, str] | None = None) -> int:
    """The module this process acquires at the bridge's ``_hpu_C.init()``; ``RuntimeError`` as the
    driver fails. Records ``hpu.acquire:<module>`` in the simulation's calls."""
    env = os.environ if environ is None else environ
    state = sim.state_dir
    if state is None:
        raise RuntimeError("the simulation has no state directory (intelrt.testing.simulate sets one)")
    visible = sim.visible_ids()
    if not visible:
        raise RuntimeError(f"{NOT_FOUND} No devices found.")
    world = env.get("WORLD_SIZE") or env.get("OMPI_COMM_WORLD_SIZE") or "1"
    fallback = env.get("HABANA_VISIBLE_MODULES") is None and sim.count >= int(world)
    wanted = env.get("HLS_MODULE_ID")
    if wanted is not None:
        module = int(wanted)  # std::stoul
        if module in visible and try_acquire(state, module):
            return _acquired(sim, module)
        if not fallback:
            held = module in visible and holder(state, module) is not None
            raise RuntimeError(ALREADY_ACQUIRED if held else f"{NOT_FOUND} (HLS_MODULE_ID={wanted})")
        log.warning("Device acquire failed for hls_mod_id: %s. Proceeding without moduleid.", module)
    for module in visible:
        if try_acquire(state, module):
            return _acquired(sim, module)
    raise RuntimeError(NOT_FOUND)


def _acquired(sim: Simulation, module: int) -> int:
    sim.acquired = module
    sim.record(f"hpu.acquire:{module}")
    return module
