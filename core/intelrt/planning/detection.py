"""Which backends exist here, which one a run gets, and why (SPEC C1: no silent fallback)."""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from ..errors import BackendUnavailableError, ConfigurationError, PluginError
from ..hooks.backend import Backend
from ..host.manager import PluginHost, get_host

BACKEND_VAR = "INTELRT_BACKEND"


@dataclass(frozen=True)
class Detection:
    """Every backend seen, the one chosen, and why."""

    backends: tuple[Backend, ...]
    chosen: Backend
    reason: str
    forced: bool

    def get(self, name: str) -> Backend | None:
        return next((b for b in self.backends if b.name == name), None)

    def to_dict(self) -> dict[str, Any]:
        return {"chosen": self.chosen.name, "reason": self.reason, "forced": self.forced,
                "backends": [b.status.to_dict() for b in self.backends]}


def detect_backends(host: PluginHost, env: Mapping[str, str]) -> tuple[Backend, ...]:
    """Every contributed backend, detected; two plugins contributing one backend is an error."""
    seen: dict[str, Backend] = {}
    for backend in host.detect(env):
        if backend.name in seen:
            other, plugin = seen[backend.name].plugin, backend.plugin
            raise PluginError(
                f"backend {backend.name!r} is claimed by two plugins: {host.describe(other)} and "
                f"{host.describe(plugin)}. Keep one: block the other with INTELRT_DISABLE_PLUGINS.",
                plugin=plugin, distribution=host.distribution_of(plugin))
        seen[backend.name] = backend
    return tuple(sorted(seen.values(), key=lambda b: (-b.status.priority, b.name)))


def _listing(backends: tuple[Backend, ...]) -> str:
    return "\n".join(f"  - {b.name} ({b.plugin}): {'available' if b.available else 'unavailable'} — {b.reason}"
                     for b in backends)


def skipped_plugins(host: PluginHost, env: Mapping[str, str]) -> list[str]:
    """Installed plugins the allow-list or the block-list kept from loading, each with the variable
    that did (their backends are never detected: a choice without them must say so)."""
    from ..host.settings import ALLOW_VAR, BLOCK_VAR

    why = {"blocked": f"blocked by {BLOCK_VAR}={env.get(BLOCK_VAR, '')}",
           "not allowed": f"left out by {ALLOW_VAR}={env.get(ALLOW_VAR, '')}"}
    return [f"plugin {r.name!r} ({r.distribution}) is not loaded: {why[r.status]}" for r in host.records
            if r.status in why]


def choose_backend(backends: tuple[Backend, ...], requested: str,
                   env: Mapping[str, str], skipped: list[str] | tuple[str, ...] = ()) -> tuple[Backend, str, bool]:
    """Pick the backend for ``requested`` (``"auto"`` or a name); return (status, reason, forced).
    ``skipped``: plugins not loaded (:func:`skipped_plugins`), named where they may be the cause."""
    unloaded = "".join(f"; {line}" for line in skipped)
    source = "backend="
    if requested == "auto" and env.get(BACKEND_VAR):
        requested, source = env[BACKEND_VAR].strip().lower(), f"{BACKEND_VAR}"
    if requested != "auto":
        status = next((b for b in backends if b.name == requested), None)
        if status is None:
            raise ConfigurationError(
                f"{source}{'=' if source == BACKEND_VAR else ''}{requested!r} is not a backend intelrt knows"
                f"{unloaded}. Known backends:\n{_listing(backends)}\nInstall the plugin that provides it "
                "(e.g. pip install intelrt-xpu), let it load, or pick one of the names above.")
        if not status.available:
            raise BackendUnavailableError(
                f"backend {requested!r} was asked for ({source}) but is not available: {status.reason}.\n"
                f"Every backend seen:\n{_listing(backends)}\nintelrt does not fall back to another "
                "backend silently (SPEC C1); fix the cause above or ask for another backend.")
        return status, f"forced by {source}", True
    accelerators = [b for b in backends if b.available and b.device_type != "cpu"]
    if accelerators:
        best = accelerators[0]
        others = [b.name for b in accelerators[1:]]
        extra = f" (also available: {', '.join(others)})" if others else ""
        return best, f"highest-priority available accelerator{extra}", False
    cpu = next((b for b in backends if b.name == "cpu" and b.available), None)
    if cpu is None:
        raise BackendUnavailableError(f"no backend is available:\n{_listing(backends)}")
    why = "; ".join(f"{b.name}: {b.reason}" for b in backends if b.device_type != "cpu") or "no accelerator plugin"
    if skipped:
        return cpu, (f"no accelerator found among the backends of the plugins loaded, running on the CPU ({why}"
                     f"{unloaded})"), False
    return cpu, f"no accelerator found, running on the CPU ({why})", False


def detect(backend: str = "auto", *, env: Mapping[str, str] | None = None,
           host: PluginHost | None = None) -> Detection:
    """Detect every backend and choose one, as ``plan`` would."""
    env = dict(os.environ) if env is None else env
    host = host or get_host()
    backends = detect_backends(host, env)
    chosen, reason, forced = choose_backend(backends, backend.lower(), env, skipped_plugins(host, env))
    return Detection(backends=backends, chosen=chosen, reason=reason, forced=forced)
