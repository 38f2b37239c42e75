"""The plan: every decision for a run as plain data — printable, serialisable, assertable."""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from functools import cached_property
from typing import Any

from ..support.environ import child
from ..support.redaction import redact, redact_text
from ..support.tables import plural, table, terminal_width, wrap
from .backend import Backend
from .concerns import CONCERN_NAMES, Decided
from .model import ModelInfo
from .payloads import DecisionValue, Payload
from .request import Request
from .types import BackendStatus, Finding


@dataclass(frozen=True)
class EnvSetting:
    """One variable of the run's environment and its provenance."""

    name: str
    value: str
    """The value the run gets."""
    action: str
    """``set`` (intelrt sets it), ``kept`` (the user's differing value is kept), ``same``
    (the user already set intelrt's value), ``replaced`` (the user asked for a new value in this call)."""
    reason: str
    plugin: str
    claim: str | None = None
    wanted: str | None = None
    """What intelrt would have set, when the user's value was kept."""
    in_process: bool = True
    """False: only for processes started with the plan's environment (see ``EnvVar.in_process``)."""
    started: bool = True
    """False: only for this process; started processes choose their own (see ``EnvVar.started``)."""

    @property
    def to_set(self) -> bool:
        return self.action in ("set", "replaced")

    def to_dict(self) -> dict[str, Any]:
        return {"name": self.name, "value": self.value, "action": self.action, "reason": self.reason,
                "plugin": self.plugin, "claim": self.claim, "wanted": self.wanted, "in_process": self.in_process,
                "started": self.started}




@dataclass(frozen=True)
class PlannedDecision:
    """One decision of a plan: value, why, who decided, and whether the user forced it."""

    name: str
    value: DecisionValue
    """Plain JSON, or the concern's payload (:class:`~intelrt.hooks.payloads.DecodeChoice` …)."""
    reason: str
    plugin: str
    forced: bool
    claim: str | None = None
    notes: tuple[str, ...] = ()

    def to_dict(self) -> dict[str, Any]:
        value = self.value.to_dict() if isinstance(self.value, Payload) else self.value
        return {"value": value, "reason": self.reason, "plugin": self.plugin, "forced": self.forced,
                "claim": self.claim, "notes": list(self.notes)}


@dataclass(frozen=True)
class Plan:
    """What ``intelrt.load`` will do, decided without touching a device or the network."""

    request: Request
    model: ModelInfo
    backend: Backend
    """The chosen backend (its facts, and its detection result as ``backend.status``)."""
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

    def value(self, concern: str) -> DecisionValue:
        """The value of decision ``concern`` by name (``None`` when the plan has none); code that
        knows the concern reads :attr:`decided` instead, typed."""
        decision = self.decisions.get(concern)
        return None if decision is None else decision.value

    @cached_property
    def decided(self) -> Decided:
        """Every decision's value, typed (``plan.decided.dtype``, ``plan.decided.decode`` …; ``None``
        for a concern the plan does not hold)."""
        return Decided.of({name: d.value for name, d in self.decisions.items()})

    @property
    def warnings(self) -> tuple[Finding, ...]:
        return tuple(f for f in self.findings if f.severity in ("warning", "error"))

    def env_to_set(self) -> dict[str, str]:
        """The variables intelrt sets for processes started with the plan's environment (``intelrt
        launch``, :meth:`child_environment`): all but those only this process can use (``started=False``)."""
        return {s.name: s.value for s in self.env if s.to_set and s.started}

    def env_for_this_process(self) -> dict[str, str]:
        """The variables intelrt sets in *this* process (``setup_env()``, ``load()``): all but those only a
        started process can use (``in_process=False``: a device mask this process's driver has already read)."""
        return {s.name: s.value for s in self.env if s.to_set and s.in_process}

    def child_environment(self, base: Mapping[str, str] | None = None) -> dict[str, str]:
        """The environment of a process you start yourself to run this plan (``subprocess``, a job
        script): ``base`` (default: this process's ``os.environ``) with :meth:`env_to_set` applied — device
        masks included, which ``setup_env()`` leaves out of this process because its driver has read them."""
        return child(self.env_to_set(), base)

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
        return json.dumps(redact(self.to_dict()), indent=indent)

    def __str__(self) -> str:
        return self.render()

    def render(self, width: int | None = None) -> str:
        """The plan as a table that fits ``width`` columns (default: the terminal's); reasons wrap."""
        width = width or terminal_width()
        backend = (f"backend: {self.backend.name} ({plural(self.backend.device_count, 'device')})"
                   + (", forced" if self.backend_forced else "") + f" — {self.backend_reason}")
        lines = [f"intelrt plan for {self.model.source}", *wrap(backend, width, "  ", "    ")]
        rows: list[tuple[str, str, str, str]] = []
        for name in CONCERN_NAMES:
            d = self.decisions.get(name)
            if d is None:
                continue
            by = "you (forced)" if d.forced else d.plugin
            rows.append((name, _short(d.value), by, d.reason + (f" [{d.claim}]" if d.claim else "")))
            rows.extend(("", "", "", f"note: {n}") for n in d.notes)
        lines += table(("decision", "value", "by", "why"), rows, width=width, wrappable=(1, 3))
        if self.env:
            lines.append("  environment of the run:")
            env_rows = []
            for s in self.env:
                extra = f" (intelrt would set {s.wanted!r})" if s.action == "kept" else ""
                extra += "" if s.in_process else "; for started processes only"
                extra += "" if s.started else "; for this process only"
                env_rows.append((f"{s.name}={s.value}", f"{s.action} by {s.plugin}{extra}", s.reason))
            lines += table(None, env_rows, width=width, indent="    ", wrappable=(0, 2))
        for f in self.findings:
            lines += wrap(f"{f.severity}: {f.title} — {f.detail}" + (f" Fix: {f.fix}" if f.fix else ""),
                          width, "  ", "    ")
        for n in self.notes:
            lines += wrap(f"note: {n}", width, "  ", "    ")
        if any(d.claim for d in self.decisions.values()):
            lines += wrap("[X…], [H…], [C…]: claims of the behaviour contract (docs/contract.md)", width, "  ")
        return redact_text("\n".join(lines))


def _short(value: DecisionValue) -> str:
    hidden: tuple[str, ...] = ()
    if isinstance(value, Payload):
        hidden = value.not_printed
        value = value.to_dict()
    if isinstance(value, dict):
        shown = {k: v for k, v in value.items() if v not in (None, False, {}) and k not in hidden}
        return ", ".join(f"{k}={v}" for k, v in shown.items()) or "off"
    return "none" if value is None else str(value)
