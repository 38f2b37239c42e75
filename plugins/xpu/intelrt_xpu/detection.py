"""X1: is there an Intel GPU that stock PyTorch can use? (No IPEX: it is neither needed nor imported.)"""

from __future__ import annotations

from collections.abc import Mapping

from intelrt.plugin import BackendStatus, DeviceInfo, at_least, hookimpl, parse_device_list

from .facts import ACCELERATE_TORCH_FLOOR, MASK_VAR, NAME, PRIORITY, TRANSFORMERS_TORCH_FLOOR

XPU_INDEX = "https://download.pytorch.org/whl/xpu"


def torch_floor_notes(torch_version: str) -> list[str]:
    """The torch floors of transformers (>= 2.6) and accelerate (> 2.6) that ``torch_version`` misses."""
    notes = []
    if not at_least(torch_version, TRANSFORMERS_TORCH_FLOOR):
        notes.append(f"torch {torch_version} < {TRANSFORMERS_TORCH_FLOOR}: transformers does not use XPU "
                     f"(is_torch_xpu_available() needs torch >= {TRANSFORMERS_TORCH_FLOOR})")
    if not at_least(torch_version, ACCELERATE_TORCH_FLOOR):
        notes.append(f"torch {torch_version} is not > 2.6: accelerate does not use XPU (is_xpu_available() "
                     f"needs torch >= {ACCELERATE_TORCH_FLOOR}), so Trainer and device_map='auto' miss it")
    return notes


@hookimpl
def intelrt_detect(env: Mapping[str, str]) -> list[BackendStatus]:
    """X1: available when ``torch.xpu.is_available()`` and ``torch.xpu.device_count() > 0``.

    Reports torch's XPU build, every visible device's name and memory, bf16 support, and the torch
    floors of transformers and accelerate that are not met.
    """
    try:
        import torch
    except ImportError:
        return [BackendStatus(NAME, "xpu", False, "torch is not installed", PRIORITY)]
    version = str(torch.__version__)
    build = getattr(torch.version, "xpu", None)
    versions = {"torch": version, "xpu_build": str(build)}
    if build is None:
        return [BackendStatus(NAME, "xpu", False,
                              f"torch {version} is not an XPU build (torch.version.xpu is None); install torch "
                              f"from the XPU index: pip install torch --index-url {XPU_INDEX}",
                              PRIORITY, versions=versions)]
    mask = env.get(MASK_VAR)
    if not torch.xpu.is_available() or torch.xpu.device_count() == 0:
        problems = parse_device_list(MASK_VAR, mask, subdevices=True).problems if mask is not None else ()
        why = (f"{MASK_VAR}={mask} selects no device the driver knows" if mask is not None
               else "check the driver with xpu-smi") + "".join(f"; {p}" for p in problems)
        return [BackendStatus(NAME, "xpu", False,
                              f"torch.xpu.is_available() is False: no Intel GPU visible ({why})",
                              PRIORITY, versions=versions, notes=tuple(torch_floor_notes(version)))]
    bf16 = bool(torch.xpu.is_bf16_supported())
    devices = tuple(DeviceInfo(i, torch.xpu.get_device_name(i), int(torch.xpu.get_device_properties(i).total_memory),
                               bf16) for i in range(torch.xpu.device_count()))
    names = sorted({d.name for d in devices})
    reason = f"{len(devices)} Intel GPU(s) visible: {', '.join(names)}; bf16 {'supported' if bf16 else 'not supported'}"
    if mask is not None:
        reason += f" (through {MASK_VAR}={mask})"
    return [BackendStatus(NAME, "xpu", True, reason, PRIORITY, devices=devices, versions=versions,
                          notes=tuple(torch_floor_notes(version)))]
