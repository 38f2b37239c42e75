"""Environment variables for a run: what plugins want, what the user already set, who wins (SPEC C2).

The user's value always wins unless the user asked intelrt for that very variable in the same
call (``devices=``); every variable is reported with where its value came from. Nothing here
writes ``os.environ``: ``runtime/environment.py`` applies a plan's settings.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from ..errors import PluginError
from ..hooks.plan import EnvSetting
from ..hooks.types import EnvVar, Finding


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
        where = {"in_process": var.in_process, "started": var.started}
        if current is None:
            setting = EnvSetting(var.name, var.value, "set", var.reason, plugin, var.claim, None, **where)
        elif current == var.value:
            setting = EnvSetting(var.name, current, "same", var.reason, plugin, var.claim, None, **where)
        elif var.overwrite_user:
            setting = EnvSetting(var.name, var.value, "replaced", var.reason, plugin, var.claim, wanted=var.value,
                                 **where)
            findings.append(Finding("warning", f"{var.name} replaced for this run",
                                    f"the environment had {var.name}={current!r}; this run uses {var.value!r} ({var.reason})",
                                    fix=f"unset {var.name} in your shell if it was a leftover export", claim=var.claim))
        else:
            setting = EnvSetting(var.name, current, "kept", var.reason, plugin, var.claim, wanted=var.value,
                                 **where)
            findings.append(Finding("info", f"kept your {var.name}={current}",
                                    f"intelrt would set {var.value!r} ({var.reason}); your value wins", claim=var.claim))
        settings[var.name] = setting
    return list(settings.values()), findings
