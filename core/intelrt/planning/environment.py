"""Environment variables for a run: what plugins want, what the user already set, who wins (SPEC C2).

The user's value always wins unless the user asked intelrt for that very variable in the same
call (``devices=``); every variable is reported with where its value came from. Nothing here
writes ``os.environ`` except :func:`apply_env`, which ``setup_env()`` and ``load()`` call.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Iterable, Mapping, MutableMapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from ..errors import PluginError
from ..hooks.types import EnvVar, Finding

if TYPE_CHECKING:
    from .plan import Plan

log = logging.getLogger(__name__)


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

    @property
    def to_set(self) -> bool:
        return self.action in ("set", "replaced")

    def to_dict(self) -> dict[str, Any]:
        return {"name": self.name, "value": self.value, "action": self.action, "reason": self.reason,
                "plugin": self.plugin, "claim": self.claim, "wanted": self.wanted, "in_process": self.in_process}


def resolve_env(wanted: Iterable[tuple[str, EnvVar]], env: Mapping[str, str],
                describe: Any = str) -> tuple[list[EnvSetting], list[Finding]]:
    """Merge what plugins want with what ``env`` already holds."""
    settings: dict[str, EnvSetting] = {}
    findings: list[Finding] = []
    for plugin, var in wanted:
        if var.name in settings and settings[var.name].wanted != var.value and settings[var.name].value != var.value:
            first = settings[var.name]
            raise PluginError(
                f"{describe(first.plugin)} and {describe(plugin)} both set {var.name} "
                f"({first.wanted or first.value!r} vs {var.value!r}); block one of them with INTELRT_DISABLE_PLUGINS",
                plugin=plugin, distribution=None)
        current = env.get(var.name)
        where = var.in_process
        if current is None:
            setting = EnvSetting(var.name, var.value, "set", var.reason, plugin, var.claim, in_process=where)
        elif current == var.value:
            setting = EnvSetting(var.name, current, "same", var.reason, plugin, var.claim, in_process=where)
        elif var.overwrite_user:
            setting = EnvSetting(var.name, var.value, "replaced", var.reason, plugin, var.claim, wanted=var.value,
                                 in_process=where)
            findings.append(Finding("warning", f"{var.name} replaced for this run",
                                    f"the environment had {var.name}={current!r}; this run uses {var.value!r} ({var.reason})",
                                    fix=f"unset {var.name} in your shell if it was a leftover export", claim=var.claim))
        else:
            setting = EnvSetting(var.name, current, "kept", var.reason, plugin, var.claim, wanted=var.value,
                                 in_process=where)
            findings.append(Finding("info", f"kept your {var.name}={current}",
                                    f"intelrt would set {var.value!r} ({var.reason}); your value wins", claim=var.claim))
        settings[var.name] = setting
    return list(settings.values()), findings


def apply_env(settings: Iterable[EnvSetting], environ: MutableMapping[str, str] | None = None) -> list[str]:
    """Write the settings intelrt owns into ``environ`` (default ``os.environ``); return the names set."""
    target = os.environ if environ is None else environ
    changed = []
    for s in settings:
        if s.to_set and target.get(s.name) != s.value:
            target[s.name] = s.value
            changed.append(s.name)
            log.info("set %s=%s (%s)", s.name, s.value, s.reason)
    return changed


def setup_env(plan: Plan, environ: MutableMapping[str, str] | None = None) -> list[str]:
    """Write the plan's environment into ``environ`` (default ``os.environ``); returns the names set.

    Call it before ``import torch`` touches a device: visibility masks only take effect before the
    driver loads (SPEC C2). Values the user already set are kept.
    """
    return apply_env(plan.env, environ)


def apply_in_process(plan: Plan) -> list[str]:
    """Write the plan's environment into ``os.environ`` for running the plan in *this* process
    (``load()``, ``training_arguments()``): everything but the variables only a started process
    can use (``in_process=False``: a device mask this process's driver has already read)."""
    return apply_env([s for s in plan.env if s.in_process])


def child_env(settings: Iterable[EnvSetting], base: Mapping[str, str] | None = None) -> dict[str, str]:
    """The environment of a launched process: ``base`` plus what intelrt sets."""
    env = dict(os.environ if base is None else base)
    apply_env(settings, env)
    return env
