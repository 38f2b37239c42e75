"""Hook implementations for ``xpu`` (SPEC X1–X11)."""

from __future__ import annotations

from collections.abc import Mapping

from intelrt import hookimpl
from intelrt.types import BackendStatus, DeviceInfo
from intelrt.versions import at_least

PRIORITY = 60
#: torch floors for XPU support: transformers needs >= 2.6, accelerate needs > 2.6 (SPEC X1).
TRANSFORMERS_TORCH_FLOOR = "2.6"
ACCELERATE_TORCH_FLOOR = "2.7"


@hookimpl
def intelrt_detect(env: Mapping[str, str]) -> list[BackendStatus]:
    """X1: available when torch.xpu.is_available() and device_count() > 0; no IPEX."""
    try:
        import torch
    except ImportError:
        return [BackendStatus("xpu", "xpu", False, "torch is not installed", PRIORITY)]
    versions = {"torch": str(torch.__version__), "xpu_build": str(getattr(torch.version, "xpu", None))}
    if getattr(torch.version, "xpu", None) is None:
        return [BackendStatus("xpu", "xpu", False,
                              f"torch {torch.__version__} is not an XPU build (torch.version.xpu is None); install "
                              "torch from the XPU index: pip install torch --index-url https://download.pytorch.org/whl/xpu",
                              PRIORITY, versions=versions)]
    if not torch.xpu.is_available() or torch.xpu.device_count() == 0:
        return [BackendStatus("xpu", "xpu", False,
                              "torch.xpu.is_available() is False: no Intel GPU visible (check the driver with xpu-smi, "
                              "and ZE_AFFINITY_MASK)", PRIORITY, versions=versions)]
    bf16 = bool(torch.xpu.is_bf16_supported())
    devices = tuple(DeviceInfo(i, torch.xpu.get_device_name(i), int(torch.xpu.get_device_properties(i).total_memory), bf16)
                    for i in range(torch.xpu.device_count()))
    notes = []
    if not at_least(str(torch.__version__), TRANSFORMERS_TORCH_FLOOR):
        notes.append(f"torch {torch.__version__} < {TRANSFORMERS_TORCH_FLOOR}: transformers does not support XPU")
    if not at_least(str(torch.__version__), ACCELERATE_TORCH_FLOOR):
        notes.append(f"torch {torch.__version__} is not > 2.6: accelerate does not support XPU")
    return [BackendStatus("xpu", "xpu", True, f"{len(devices)} Intel GPU(s) visible", PRIORITY,
                          devices=devices, versions=versions, notes=tuple(notes))]
