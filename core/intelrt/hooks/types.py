"""Frozen dataclasses that hooks take and return (conda's plugins/types.py style).

Each validates itself on construction, so a plugin that builds a malformed result fails at the
line that built it, and the host can name the plugin (SPEC C6).
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Literal

from .payloads import DecisionValue, JSONValue, Payload

_ENV_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
_SEVERITIES = ("error", "warning", "info")


def _require(condition: bool, message: str) -> None:
    if not condition:
        raise TypeError(message)


def _require_json(value: object, what: str) -> None:
    if isinstance(value, Payload):
        return  # validated when it was built
    try:
        json.dumps(value)
    except (TypeError, ValueError) as exc:
        raise TypeError(f"{what} must be JSON-serialisable (plans are data): {exc}") from None


@dataclass(frozen=True)
class DeviceInfo:
    """One device a backend can see."""

    index: int
    name: str
    total_memory: int | None = None
    """Bytes of device memory, when the runtime reports it."""
    bf16: bool | None = None

    def __post_init__(self) -> None:
        _require(isinstance(self.index, int) and self.index >= 0, "DeviceInfo.index must be an int >= 0")
        _require(isinstance(self.name, str), "DeviceInfo.name must be a str")


@dataclass(frozen=True)
class BackendStatus:
    """What a detection hook reports for one backend it owns (available or not, and why)."""

    name: str
    """Backend name users pass as ``backend=`` (``"xpu"``)."""
    device_type: str
    """torch device type string (``"xpu"``, ``"hpu"``, ``"cuda"``, ``"cpu"``)."""
    available: bool
    reason: str
    """Why it is available or not, in words a user can act on."""
    priority: int = 0
    """``backend="auto"`` picks the available backend with the highest priority; CPU is 0."""
    devices: tuple[DeviceInfo, ...] = ()
    versions: Mapping[str, str] = field(default_factory=dict)
    notes: tuple[str, ...] = ()
    plugin: str = ""
    """Filled in by the host: the plugin that reported this status."""

    def __post_init__(self) -> None:
        _require(isinstance(self.name, str) and bool(self.name), "BackendStatus.name must be a non-empty str")
        _require(isinstance(self.device_type, str) and bool(self.device_type), "BackendStatus.device_type must be a non-empty str")
        _require(isinstance(self.available, bool), "BackendStatus.available must be a bool")
        _require(isinstance(self.reason, str) and bool(self.reason), "BackendStatus.reason must say why")
        _require(isinstance(self.priority, int), "BackendStatus.priority must be an int")
        _require(all(isinstance(d, DeviceInfo) for d in self.devices), "BackendStatus.devices must hold DeviceInfo")
        _require(all(isinstance(n, str) for n in self.notes), "BackendStatus.notes must be strs")

    @property
    def device_count(self) -> int:
        return len(self.devices)

    def to_dict(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "device_type": self.device_type,
            "available": self.available,
            "reason": self.reason,
            "priority": self.priority,
            "device_count": self.device_count,
            "devices": [
                {"index": d.index, "name": d.name, "total_memory": d.total_memory, "bf16": d.bf16}
                for d in self.devices
            ],
            "versions": dict(self.versions),
            "notes": list(self.notes),
            "plugin": self.plugin,
        }


@dataclass(frozen=True)
class Decision:
    """A selection hook's answer: the value and why (the host adds plugin and forced).

    ``value`` is plain JSON for dtype, placement, attention and the collective, and the concern's
    payload (:class:`~intelrt.hooks.payloads.DecodeChoice` …) for the structured ones."""

    value: DecisionValue
    reason: str
    claim: str | None = None
    """SPEC claim id this decision implements (``"X4"``)."""
    notes: tuple[str, ...] = ()
    """Extra facts users should see next to the decision (warnings go here too)."""

    def __post_init__(self) -> None:
        _require_json(self.value, "Decision.value")
        _require(isinstance(self.reason, str) and bool(self.reason), "Decision.reason must say why")
        _require(all(isinstance(n, str) for n in self.notes), "Decision.notes must be strs")


@dataclass(frozen=True)
class EnvVar:
    """An environment variable a backend wants for the run (launched processes and ``setup_env``)."""

    name: str
    value: str
    reason: str
    claim: str | None = None
    overwrite_user: bool = False
    """Only for variables the user asked intelrt to set in this call (e.g. ``devices=``)."""
    in_process: bool = True
    """False for a variable that only a process started with the plan's environment can use (a
    device mask its driver reads once, at load): ``load()`` and ``setup_env()`` leave it out of
    this process, whose driver already enumerated the devices; processes started with the plan's
    environment (``Plan.child_environment()``, ``intelrt launch``) get it."""
    started: bool = True
    """False for a variable that only *this* process can use: processes started with the plan's
    environment choose their own (Gaudi's ``HLS_MODULE_ID``, which the bridge of each launched rank
    takes from ``HABANA_VISIBLE_MODULES`` at its ``LOCAL_RANK`` unless it is already set)."""

    def __post_init__(self) -> None:
        _require(isinstance(self.name, str) and bool(_ENV_NAME.match(self.name)), f"EnvVar.name {self.name!r} is not a valid variable name")
        _require(isinstance(self.value, str), f"EnvVar {self.name}: value must be a str")
        _require(isinstance(self.reason, str) and bool(self.reason), f"EnvVar {self.name}: reason must say why")
        _require(self.in_process or self.started, f"EnvVar {self.name}: a variable for no process at all "
                                                  "(in_process=False and started=False)")


@dataclass(frozen=True)
class Finding:
    """A doctor finding: what is wrong (or worth knowing) and how to fix it."""

    severity: Literal["error", "warning", "info"]
    title: str
    detail: str
    fix: str = ""
    claim: str | None = None

    def __post_init__(self) -> None:
        _require(self.severity in _SEVERITIES, f"Finding.severity must be one of {_SEVERITIES}")
        _require(isinstance(self.title, str) and bool(self.title), "Finding.title must be a non-empty str")
        _require(self.severity == "info" or bool(self.fix), "Finding.fix is required for errors and warnings")

    def to_dict(self) -> dict[str, Any]:
        return {"severity": self.severity, "title": self.title, "detail": self.detail,
                "fix": self.fix, "claim": self.claim}


@dataclass(frozen=True)
class Setting:
    """One ``TrainingArguments`` keyword a backend contributes, with the reason."""

    name: str
    value: JSONValue
    reason: str
    claim: str | None = None

    def __post_init__(self) -> None:
        _require(isinstance(self.name, str) and self.name.isidentifier(), "Setting.name must be a keyword name")
        _require_json(self.value, f"Setting {self.name}")
        _require(isinstance(self.reason, str) and bool(self.reason), f"Setting {self.name}: reason must say why")
