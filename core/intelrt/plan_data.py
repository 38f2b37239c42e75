"""The plan: every decision for a run as plain data — printable, serialisable, assertable."""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from .environment import EnvSetting
from .model_source import ModelInfo
from .request import Request
from .types import BackendStatus, Finding, JSONValue

#: Order in which decisions are made and printed.
CONCERNS = ("task", "dtype", "quantization", "placement", "attention", "kernels", "compile", "decode", "batching",
            "collective")


@dataclass(frozen=True)
class PlannedDecision:
    """One decision of a plan: value, why, who decided, and whether the user forced it."""

    name: str
    value: JSONValue
    reason: str
    plugin: str
    forced: bool
    claim: str | None = None
    notes: tuple[str, ...] = ()

    def to_dict(self) -> dict[str, Any]:
        return {"value": self.value, "reason": self.reason, "plugin": self.plugin, "forced": self.forced,
                "claim": self.claim, "notes": list(self.notes)}


@dataclass(frozen=True)
class Plan:
    """What ``intelrt.load`` will do, decided without touching a device or the network."""

    request: Request
    model: ModelInfo
    backend: BackendStatus
    backend_reason: str
    backend_forced: bool
    decisions: Mapping[str, PlannedDecision]
    env: tuple[EnvSetting, ...]
    findings: tuple[Finding, ...] = ()
    detected: tuple[BackendStatus, ...] = ()
    notes: tuple[str, ...] = field(default=())

    @property
    def device(self) -> str:
        """The torch device string of the run (``"xpu"``, ``"hpu"``, ``"cpu"`` …)."""
        return self.backend.device_type

    @property
    def task(self) -> str:
        return str(self.decisions["task"].value)

    def value(self, concern: str) -> Any:
        decision = self.decisions.get(concern)
        return None if decision is None else decision.value

    @property
    def warnings(self) -> tuple[Finding, ...]:
        return tuple(f for f in self.findings if f.severity in ("warning", "error"))

    def env_to_set(self) -> dict[str, str]:
        return {s.name: s.value for s in self.env if s.to_set}

    # -- data ----------------------------------------------------------------------------
    def to_dict(self) -> dict[str, Any]:
        return {
            "backend": {"name": self.backend.name, "device": self.device, "reason": self.backend_reason,
                        "forced": self.backend_forced, "plugin": self.backend.plugin,
                        "device_count": self.backend.device_count,
                        "devices": [d.name for d in self.backend.devices]},
            "model": self.model.to_dict(),
            "request": self.request.to_dict(),
            "decisions": {k: v.to_dict() for k, v in self.decisions.items()},
            "env": [s.to_dict() for s in self.env],
            "findings": [f.to_dict() for f in self.findings],
            "notes": list(self.notes),
            "detected": [b.to_dict() for b in self.detected],
        }

    def to_json(self, indent: int | None = 2) -> str:
        from .redaction import redact

        return json.dumps(redact(self.to_dict()), indent=indent)

    def __str__(self) -> str:
        from .redaction import redact_text

        lines = [f"intelrt plan for {self.model.source}",
                 f"  backend   {self.backend.name} ({self.backend.device_count} device(s)) — {self.backend_reason}"]
        rows = [("decision", "value", "by", "why")]
        for name in CONCERNS:
            d = self.decisions.get(name)
            if d is None:
                continue
            value = _short(d.value)
            by = d.plugin + (" (forced)" if d.forced else "")
            why = d.reason + (f" [{d.claim}]" if d.claim else "")
            rows.append((name, value, by, why))
            rows.extend(("", "", "", f"note: {n}") for n in d.notes)
        widths = [max(len(r[i]) for r in rows) for i in range(3)]
        for r in rows:
            lines.append("  " + "  ".join(r[i].ljust(widths[i]) for i in range(3)) + "  " + r[3])
        if self.env:
            lines.append("  environment of the run:")
            for s in self.env:
                extra = f" (intelrt would set {s.wanted!r})" if s.action == "kept" else ""
                lines.append(f"    {s.name}={s.value}  [{s.action} by {s.plugin}{extra}] {s.reason}")
        for f in self.findings:
            lines.append(f"  {f.severity}: {f.title} — {f.detail}" + (f" Fix: {f.fix}" if f.fix else ""))
        for n in self.notes:
            lines.append(f"  note: {n}")
        return redact_text("\n".join(lines))


def _short(value: JSONValue) -> str:
    if isinstance(value, dict):
        shown = {k: v for k, v in value.items() if v not in (None, False, {})}
        return ", ".join(f"{k}={v}" for k, v in shown.items()) or "off"
    return "none" if value is None else str(value)
