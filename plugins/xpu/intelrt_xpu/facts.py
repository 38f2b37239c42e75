"""What the XPU hooks share: the backend's name, version floors, and small readers of the facts
detection recorded (so most hooks never import torch)."""

from __future__ import annotations

from intelrt.plugin import BackendStatus, at_least

NAME = "xpu"
PRIORITY = 60

#: transformers' ``is_torch_xpu_available()`` is False below torch 2.6 (SPEC X1).
TRANSFORMERS_TORCH_FLOOR = "2.6"
#: accelerate's ``is_xpu_available()`` is False for torch <= 2.6, so it needs 2.7 or later (SPEC X1).
ACCELERATE_TORCH_FLOOR = "2.7"
#: torch.distributed has the ``xccl`` backend from 2.7 (accelerate's ``is_xccl_available``) (SPEC X11).
XCCL_TORCH_FLOOR = "2.7"
#: bitsandbytes runs 4-bit and 8-bit on Intel GPUs from 0.47 (SPEC X9).
BITSANDBYTES_FLOOR = "0.47"
#: torch >= 2.8 lets SDPA on XPU take grouped-query attention without repeating K/V heads (SPEC X4).
NATIVE_GQA_TORCH = "2.8"

MASK_VAR = "ZE_AFFINITY_MASK"
PCI_ORDER_VAR = "ZE_ENABLE_PCI_ID_DEVICE_ORDER"
MARK_VAR = "INTELRT_ZE_AFFINITY_MASK"
"""Set next to a mask intelrt chose for a run, so the run's own processes (ranks, a re-plan in
the launched script) recognise the mask as the run's and do not warn about an inherited export."""


def mine(backend: BackendStatus | None) -> bool:
    return backend is not None and backend.name == NAME


def torch_version(backend: BackendStatus) -> str:
    """The torch version detection saw (``"unknown"`` when detection could not tell)."""
    return str(backend.versions.get("torch") or "unknown")


def torch_at_least(backend: BackendStatus, floor: str) -> bool:
    return at_least(backend.versions.get("torch"), floor)


def device_label(backend: BackendStatus, index: int = 0) -> str:
    """``"Intel(R) Data Center GPU Max 1550 (xpu:0)"`` for messages that must name the device."""
    device = next((d for d in backend.devices if d.index == index), None)
    return f"{device.name} (xpu:{index})" if device else f"the Intel GPU xpu:{index}"


def size(n_bytes: float) -> str:
    """``"1.5 GiB"``, ``"3.2 MiB"``: a byte count for messages."""
    for unit, scale in (("GiB", 1024**3), ("MiB", 1024**2), ("KiB", 1024)):
        if n_bytes >= scale:
            return f"{n_bytes / scale:.1f} {unit}"
    return f"{n_bytes:.0f} B"
