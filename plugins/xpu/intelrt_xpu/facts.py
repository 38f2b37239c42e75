"""What the XPU hooks share: the backend's name, version floors, and small readers of the facts
detection recorded (so most hooks never import torch)."""

from __future__ import annotations

from packaging.version import InvalidVersion, Version

from intelrt.plugin import Backend, BackendStatus, at_least

Detected = Backend | BackendStatus
"""The facts readers below take the backend object or its detection result (both carry them)."""

NAME = "xpu"
PRIORITY = 60

#: transformers' ``is_torch_xpu_available()`` is False below torch 2.6 (SPEC X1).
TRANSFORMERS_TORCH_FLOOR = "2.6"
#: accelerate's ``is_xpu_available()`` is False when ``is_torch_version("<=", "2.6")``
#: (``accelerate/utils/imports.py`` l.451), which compares ``packaging.version.parse`` of the torch
#: distribution's full version (``accelerate/utils/versions.py`` l.23, l.46-56): the local label is
#: kept, and packaging orders ``2.6.0+xpu`` above ``2.6`` while ``2.6.0`` is not (SPEC X1). Read it
#: with :func:`accelerate_uses_xpu`, never with ``at_least`` (whose ``parse`` drops the label).
ACCELERATE_XPU_OFF_AT_OR_BELOW = "2.6"
#: accelerate asks for ``xccl`` only from torch 2.7 (``accelerate.utils.is_xccl_available``) and
#: then also needs the build to have it: ``torch.distributed.is_xccl_available()`` (SPEC X11).
XCCL_TORCH_FLOOR = "2.7"
#: Intel's XPU wheels ship XCCL from torch 2.8 (USE_XCCL was off in 2.7: intel/torch-xpu-ops#1318).
XCCL_WHEELS_TORCH = "2.8"
#: XPU graph capture is a default only from this torch: vLLM keeps it opt-in before (vllm#38193:
#: "require a specific driver version, it's not stable yet"); torch 2.14 moves XPU graphs to Level
#: Zero graphs (vllm#51600). Below it, intelrt captures only with graphs="on".
XPU_GRAPHS_DEFAULT_TORCH = "2.14"
#: torch >= 2.8 lets SDPA on XPU take grouped-query attention without repeating K/V heads (SPEC X4).
NATIVE_GQA_TORCH = "2.8"

MASK_VAR = "ZE_AFFINITY_MASK"
HIERARCHY_VAR = "ZE_FLAT_DEVICE_HIERARCHY"
PCI_ORDER_VAR = "ZE_ENABLE_PCI_ID_DEVICE_ORDER"
XCCL_KEY = "xccl"
"""Key of ``BackendStatus.versions``: ``"True"`` when this torch build has XCCL (``is_xccl_available()``)."""
HIERARCHY_KEY = "hierarchy"
"""Key of ``BackendStatus.versions``: the Level Zero hierarchy detection ran in (FLAT, COMPOSITE, COMBINED)."""
DRIVER_MASK_KEY = "driver_mask"
"""Key of ``BackendStatus.versions``: the ``ZE_AFFINITY_MASK`` this process's Level Zero driver read when it
loaded (absent: none). The mask in ``os.environ`` now may differ; this one decides this process's devices."""
DRIVER_HIERARCHY_KEY = "driver_hierarchy"
"""Key of ``BackendStatus.versions``: the ``ZE_FLAT_DEVICE_HIERARCHY`` value the driver read (absent: unset)."""
DRIVER_VIEW_KEY = "driver_view"
"""Key of ``BackendStatus.versions``: ``recorded`` (what the driver read is known), ``inferred`` (it was
initialised before intelrt looked) or ``ambiguous`` (one of :data:`DRIVER_CANDIDATES_KEY`):
:mod:`intelrt_xpu.driver_view`."""
AMBIGUOUS_VIEW = "intelrt cannot tell which devices this process has"
"""Ends the detection note of an ``ambiguous`` driver view (the refusals quote that note)."""
DRIVER_CANDIDATES_KEY = "driver_candidates"
"""Key of ``BackendStatus.versions`` when the view is ``ambiguous``: the (mask, hierarchy) pairs the
driver may have read, as JSON (``null``: unset)."""
MARK_VAR = "INTELRT_ZE_AFFINITY_MASK"
"""Set next to a mask intelrt chose for a run, so the run's own processes (ranks, a re-plan in
the launched script) recognise the mask as the run's and do not warn about an inherited export."""


def torch_version(backend: Detected) -> str:
    """The torch version detection saw (``"unknown"`` when detection could not tell)."""
    return str(backend.versions.get("torch") or "unknown")


def accelerate_uses_xpu(version: str) -> bool:
    """Whether accelerate's ``is_xpu_available()`` lets torch ``version`` use XPU, compared as accelerate
    compares it (:data:`ACCELERATE_XPU_OFF_AT_OR_BELOW`); an unreadable version: not known to pass."""
    try:
        return Version(version) > Version(ACCELERATE_XPU_OFF_AT_OR_BELOW)
    except InvalidVersion:
        return False


def torch_at_least(backend: Detected, floor: str) -> bool:
    return at_least(backend.versions.get("torch"), floor)


def xccl_built(backend: Detected) -> bool:
    """Whether detection found the ``xccl`` backend in this torch build."""
    return backend.versions.get(XCCL_KEY) == "True"


def product_line(backend: Detected) -> str | None:
    """``max`` for the Data Center GPU Max series (Xe HPC: FP64, large register files, the kernels
    transformers and torchao build for "Intel Data Center GPU"), ``arc`` for Arc and the other Xe
    HPG / client GPUs (Flex too), from the device names; ``None`` without a device."""
    names = [d.name for d in backend.devices]
    if not names:
        return None
    return "max" if any("Max" in name for name in names) else "arc"


def device_label(backend: Detected, index: int = 0) -> str:
    """``"Intel(R) Data Center GPU Max 1550 (xpu:0)"`` for messages that must name the device."""
    device = next((d for d in backend.devices if d.index == index), None)
    return f"{device.name} (xpu:{index})" if device else f"the Intel GPU xpu:{index}"

