"""H5: this process takes its Gaudi before the model is built; a Gaudi held elsewhere is a clear error.

A Gaudi serves one process at a time, and the bridge acquires one at a process's first device use
(``torch.hpu.init()``, gaudi-pytorch-bridge 1.19 ``hpu/__init__.py``): the module ``HLS_MODULE_ID``
names. When that module is taken, ``HABANA_VISIBLE_MODULES`` is unset and the machine has at least
``WORLD_SIZE`` devices, the bridge logs "Device acquire failed for hls_mod_id: N ... Proceeding without
moduleid." and takes any free Gaudi instead (``backend/synapse_helpers/device.cpp`` l.383-495,
``acquire_on_failed_by_moduleid``) — a run that asked for module 5 silently ran on module 0. intelrt
therefore sets ``HABANA_VISIBLE_MODULES`` in this process as well as ``HLS_MODULE_ID``
(:mod:`intelrt_hpu.environment`), which turns that into the driver's own failure, ``synStatus=20
[Device already acquired]`` (huggingface/tgi-gaudi#54), and this module says it in intelrt's words.

Which process holds it the bridge does not say; ``hl-smi`` run as root on the host, outside
containers, lists the process on each Gaudi (Habana's System Management Interface Tool page:
"Run the sudo hl-smi command at root (not in a Docker) to be able to see the Process IDs of all
users"). A vendor tool is not run here: the message names the command.
"""

from __future__ import annotations

import importlib
import os

from intelrt.plugin import BackendUnavailableError, Plan

from .facts import HL_SMI_MAP, MODULE_ID_VAR, MODULES_VAR, STACK_LOADED_MODULE

ALREADY_ACQUIRED = "Device already acquired"
"""In the driver's failure ``synStatus=20 [Device already acquired] Device acquire failed.``"""
NOT_FOUND = "Device not found"
"""In ``synStatus=8 [Device not found] Device acquire failed.`` (no free Gaudi among those visible)."""
WHO_HOLDS = "`sudo hl-smi` on the host (outside containers) lists the process using each Gaudi"


def acquire_device(plan: Plan) -> None:
    """Acquire this process's Gaudi now (``torch.hpu.init()``), as the model's first tensor would; the
    driver's refusal becomes a :class:`BackendUnavailableError` naming the module and the way out."""
    # torch.hpu is this module of the stack, which importing loads (lazy mode loads it only when asked)
    hpu = importlib.import_module(f"{STACK_LOADED_MODULE}.hpu")
    module, visible = os.environ.get(MODULE_ID_VAR), os.environ.get(MODULES_VAR)
    try:
        hpu.init()
    except RuntimeError as exc:
        said = " ".join(str(exc).split())
        if ALREADY_ACQUIRED in said:
            which = f"Gaudi module {module}" if module is not None else "the Gaudi this process asked for"
            raise BackendUnavailableError(
                f"{which} is held by another process — a Gaudi serves one process at a time, and the driver "
                f"refused it ({said}); {WHO_HOLDS}. Wait for that process to end, or pick a free module with "
                f"devices= (CLI --devices; module ids as `{HL_SMI_MAP}` shows them)") from None
        if NOT_FOUND in said:
            among = f"modules {visible} ({MODULES_VAR})" if visible is not None else "the Gaudis of this machine"
            raise BackendUnavailableError(
                f"no Gaudi among {among} is free for this process — each is held by another process, or the "
                f"module asked for ({MODULE_ID_VAR}={module}) is not among them; the driver said: {said}. "
                f"{WHO_HOLDS}; pick a free module with devices= (CLI --devices)") from None
        raise
