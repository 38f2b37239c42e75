"""X1: is there an Intel GPU that stock PyTorch can use? (No IPEX: it is neither needed nor imported.)"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping
from typing import Any

from intelrt.plugin import BackendStatus, DeviceInfo, at_least

from .affinity import HIERARCHIES, hierarchy, read_mask
from .driver_view import DriverView, first_view, recorded_view
from .facts import (
    ACCELERATE_XPU_OFF_AT_OR_BELOW,
    DRIVER_CANDIDATES_KEY,
    DRIVER_HIERARCHY_KEY,
    DRIVER_MASK_KEY,
    DRIVER_VIEW_KEY,
    HIERARCHY_KEY,
    HIERARCHY_VAR,
    MASK_VAR,
    NAME,
    PRIORITY,
    TRANSFORMERS_TORCH_FLOOR,
    XCCL_KEY,
    accelerate_uses_xpu,
)

XPU_INDEX = "https://download.pytorch.org/whl/xpu"


def torch_floor_notes(torch_version: str) -> list[str]:
    """The torch floors of transformers (>= 2.6, on the base version) and accelerate (> 2.6, on the full
    version, local label included: ``2.6.0+xpu`` passes, ``2.6.0`` does not) that ``torch_version`` misses."""
    notes = []
    if not at_least(torch_version, TRANSFORMERS_TORCH_FLOOR):
        notes.append(f"torch {torch_version} < {TRANSFORMERS_TORCH_FLOOR}: transformers does not use XPU "
                     f"(is_torch_xpu_available() needs torch >= {TRANSFORMERS_TORCH_FLOOR})")
    if not accelerate_uses_xpu(torch_version):
        notes.append(f"torch {torch_version} is not above {ACCELERATE_XPU_OFF_AT_OR_BELOW} as packaging orders "
                     f"versions: accelerate does not use XPU (is_xpu_available() is False when "
                     f"is_torch_version('<=', '{ACCELERATE_XPU_OFF_AT_OR_BELOW}'); the XPU wheel 2.6.0+xpu passes, "
                     "its local label sorting above 2.6), so Trainer and device_map='auto' miss it")
    return notes


def xccl_available(torch: Any) -> bool:
    """``torch.distributed.is_xccl_available()``: the build has the XCCL backend (USE_XCCL)."""
    distributed = torch.distributed
    return bool(distributed.is_available() and getattr(distributed, "is_xccl_available", lambda: False)())


def hierarchy_note(mode: str, why: str) -> str:
    if mode == "COMPOSITE":
        return (f"Level Zero hierarchy COMPOSITE ({why}): each card is one device; ZE_AFFINITY_MASK=card.tile "
                "selects one tile of a multi-tile card")
    return (f"Level Zero hierarchy {mode} ({why}): each tile of a multi-tile card (a Data Center GPU Max 1550 "
            "has 2) is its own device, so torch counts tiles, not the cards `xpu-smi discovery` lists; "
            "ZE_AFFINITY_MASK and devices= take these device ids")


def _unavailable(reason: str, versions: dict[str, str], notes: tuple[str, ...] = ()) -> BackendStatus:
    return BackendStatus(NAME, "xpu", False, reason, PRIORITY, versions=versions, notes=notes)


def detect(env: Mapping[str, str]) -> BackendStatus:
    """X1: available when ``torch.xpu.is_available()`` and ``torch.xpu.device_count() > 0``.

    Reports torch's XPU build, whether it has XCCL, every visible device's name, memory and
    native bf16, the Level Zero hierarchy, and the torch floors of transformers and accelerate
    that are not met. A mask the driver cannot read is reported without touching the driver.
    """
    try:
        import torch
    except ImportError:
        return BackendStatus(NAME, "xpu", False, "torch is not installed", PRIORITY)
    version = str(torch.__version__)
    build = getattr(torch.version, "xpu", None)
    versions = {"torch": version, "xpu_build": str(build), XCCL_KEY: str(xccl_available(torch))}
    floors = tuple(torch_floor_notes(version))
    if build is None:
        return _unavailable(f"torch {version} is not an XPU build (torch.version.xpu is None); install torch from the "
                            f"XPU index: pip install torch --index-url {XPU_INDEX}", versions)
    view = recorded_view(torch)
    if view is None:  # the driver may load now, reading this process's mask: one it cannot read fails it
        pending, stated = os.environ.get(MASK_VAR), os.environ.get(HIERARCHY_VAR)
        fatal = read_mask(pending, stated if stated in HIERARCHIES else "FLAT").fatal if pending is not None else ()
        if fatal:
            return _unavailable(f"{MASK_VAR}={pending!r}: {'; '.join(fatal)}; the Level Zero driver reads every entry "
                                "as a number and fails to initialise on one it cannot read, so every XPU call would "
                                f"fail. Correct or unset {MASK_VAR}", versions, floors)
    try:
        view = view or first_view(torch)
        properties = [torch.xpu.get_device_properties(i) for i in range(view.count)]
    except RuntimeError as exc:
        return _unavailable(f"the XPU runtime failed while counting devices: {exc}", versions, floors)
    mode, why = hierarchy(view.env(), [p.name for p in properties])
    versions[HIERARCHY_KEY] = mode
    versions.update(view_versions(view))
    seen = view_notes(view, env)
    if not properties:
        # no device to tell the product's default hierarchy: read the mask as the Max series' FLAT
        mask = view.mask
        problems = read_mask(mask, view.hierarchy if view.hierarchy in HIERARCHIES else "FLAT").problems \
            if mask is not None else ()
        where = (f"{MASK_VAR}={mask} selects no device the driver knows" if mask is not None
                 else "check the driver with xpu-smi") + "".join(f"; {p}" for p in problems)
        return _unavailable(f"torch.xpu.is_available() is False: no Intel GPU visible ({where})", versions,
                            (*floors, *seen))
    devices = tuple(DeviceInfo(i, str(p.name), int(p.total_memory), getattr(p, "has_bfloat16_conversions", None))
                    for i, p in enumerate(properties))
    names = sorted({d.name for d in devices})
    native = all(d.bf16 is not False for d in devices)
    reason = (f"{len(devices)} Intel GPU device(s) visible: {', '.join(names)}; bfloat16 "
              + ("native" if native else "emulated (no native bfloat16 conversions: has_bfloat16_conversions is False)"))
    if view.mask is not None:
        reason += f" (through {MASK_VAR}={view.mask}, read when the driver loaded)"
    return BackendStatus(NAME, "xpu", True, reason, PRIORITY, devices=devices, versions=versions,
                         notes=(hierarchy_note(mode, why), *floors, *seen))


def view_versions(view: DriverView) -> dict[str, str]:
    """The driver's view as facts of ``BackendStatus.versions`` (what devices.py reads for this process)."""
    facts = {DRIVER_VIEW_KEY: "recorded" if view.recorded else "ambiguous" if view.candidates else "inferred"}
    if view.candidates:
        facts[DRIVER_CANDIDATES_KEY] = json.dumps([list(c) for c in view.candidates])
    if view.mask is not None:
        facts[DRIVER_MASK_KEY] = view.mask
    if view.hierarchy is not None:
        facts[DRIVER_HIERARCHY_KEY] = view.hierarchy
    return facts


def view_notes(view: DriverView, env: Mapping[str, str]) -> tuple[str, ...]:
    """X2/C2: a mask in ``env`` other than the one the driver read changes nothing in this process."""
    notes = [] if view.note is None else [view.note]
    now = env.get(MASK_VAR)
    if now is not None and now != view.mask and not view.candidates:
        saw = f"it read {MASK_VAR}={view.mask}" if view.mask is not None else "it saw no mask"
        notes.append(f"{MASK_VAR}={now} was set after this process's Level Zero driver loaded ({saw}, once): it "
                     "changes nothing here; it reaches processes started with it (intelrt launch, or a process "
                     "started with plan.child_environment())")
    return tuple(notes)
