"""Hook implementations for ``hpu`` (SPEC H1–H11)."""

from __future__ import annotations

import importlib
import importlib.util
from collections.abc import Mapping

from intelrt import hookimpl
from intelrt.types import BackendStatus, DeviceInfo
from intelrt.versions import at_least, package_version

PRIORITY = 60
ACCELERATE_FLOOR = "1.5.0"


@hookimpl
def intelrt_detect(env: Mapping[str, str]) -> list[BackendStatus]:
    """H2/H4: the Gaudi stack must be importable and accelerate >= 1.5.0."""
    if importlib.util.find_spec("habana_frameworks") is None:
        return [BackendStatus("hpu", "hpu", False,
                              "the Intel Gaudi software stack (habana-torch-plugin, module habana_frameworks) "
                              "is not installed", PRIORITY)]
    versions = {"habana-torch-plugin": package_version("habana-torch-plugin", "habana_frameworks") or "unknown",
                "accelerate": package_version("accelerate") or "missing"}
    if not at_least(versions["accelerate"], ACCELERATE_FLOOR):
        return [BackendStatus("hpu", "hpu", False,
                              f"accelerate {versions['accelerate']} < {ACCELERATE_FLOOR}: transformers reports no Gaudi "
                              "(is_torch_hpu_available() is False); pip install 'accelerate>=1.5.0'",
                              PRIORITY, versions=versions)]
    hpu = importlib.import_module("habana_frameworks.torch.hpu")
    if not hpu.is_available() or hpu.device_count() == 0:
        return [BackendStatus("hpu", "hpu", False, "the Gaudi stack sees no device (check hl-smi and HABANA_VISIBLE_MODULES)",
                              PRIORITY, versions=versions)]
    props = hpu.get_device_properties(0)
    devices = tuple(DeviceInfo(i, hpu.get_device_name(i), int(props.total_memory), True)
                    for i in range(hpu.device_count()))
    return [BackendStatus("hpu", "hpu", True, f"{len(devices)} Gaudi device(s) visible", PRIORITY,
                          devices=devices, versions=versions)]
