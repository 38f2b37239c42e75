"""The ``cpu`` backend: always available, the reference every other backend is compared to."""

from __future__ import annotations

import os
import platform
from collections.abc import Mapping

from ..errors import PlanError
from ..plugins import hookimpl
from ..request import Request
from ..types import BackendStatus, DeviceInfo, EnvVar, Finding


@hookimpl
def intelrt_detect(env: Mapping[str, str]) -> list[BackendStatus]:
    name = platform.processor() or platform.machine() or "cpu"
    return [BackendStatus(
        name="cpu", device_type="cpu", available=True, priority=0,
        reason=f"the CPU is always available ({os.cpu_count()} cores)",
        devices=(DeviceInfo(0, name),))]


@hookimpl
def intelrt_setup_env(backend: BackendStatus, request: Request) -> list[EnvVar | Finding] | None:
    if backend.name != "cpu":
        return None
    if request.devices is not None:
        raise PlanError(f"devices={list(request.devices)} selects accelerator devices; the cpu backend "
                        "has none to select. Leave devices unset, or choose an accelerator backend.")
    return None
