"""``intelrt doctor``: versions, every backend with reasons, environment in effect, findings —
as data (:func:`diagnose`) and as text (:func:`format_report`)."""

from __future__ import annotations

import os
import platform
import sys
from collections.abc import Mapping
from typing import Any, Literal

from ..errors import IntelrtError
from ..hooks.types import Finding
from ..host.manager import PluginHost
from ..host.settings import ALLOW_VAR, BLOCK_VAR, DEBUG_VAR
from ..support.redaction import MASK, is_secret_name, redact
from ..support.tables import table, terminal_width, wrap
from ..support.versions import FLOORS, at_least, installed_version, package_version
from .detection import BACKEND_VAR, detect_backends

PACKAGES = ("intelrt", "torch", "transformers", "accelerate", "huggingface_hub", "pluggy", "kernels",
            "bitsandbytes", "peft", "datasets")
#: Variables worth showing in a bug report (others are left out to keep the report short).
RELEVANT_PREFIXES = ("INTELRT_", "ZE_", "HABANA_", "PT_HPU_", "PT_ENABLE_", "CUDA_", "HF_", "TRANSFORMERS_",
                     "MASTER_", "LOCAL_RANK", "RANK", "WORLD_SIZE", "ONEAPI_", "SYCL_", "CCL_")


def floor_findings(severity: Literal["error", "warning"] = "error") -> list[Finding]:
    """A finding per dependency below :data:`FLOORS` (not installed is left to the import that needs it)."""
    findings = []
    for name, floor in FLOORS.items():
        version = installed_version(name)
        if version is not None and not at_least(version, floor):
            findings.append(Finding(severity, f"{name} {version} is older than intelrt needs",
                                    f"intelrt needs {name} >= {floor} (see its pyproject dependencies); with "
                                    f"{name} {version}, loading and training fail in ways far from this cause",
                                    fix=f"pip install --upgrade '{name}>={floor}'"))
    return findings


def relevant_env(env: Mapping[str, str]) -> dict[str, str]:
    return {k: (MASK if is_secret_name(k) else v) for k, v in sorted(env.items()) if k.startswith(RELEVANT_PREFIXES)}


def diagnose(env: Mapping[str, str] | None = None, host: PluginHost | None = None, *,
             probe: bool = False) -> dict[str, Any]:
    """The doctor report as data (``intelrt doctor --json`` prints it); ``probe=True``
    (``intelrt doctor --probe``) lets plugins run vendor tools such as ``hl-smi``."""
    env = dict(os.environ) if env is None else dict(env)
    findings: list[Finding] = floor_findings("error")
    host = host or PluginHost(env, on_error="record")
    if host.unknown_allowed:  # every plan refuses such an allow-list: doctor must not say "none"
        findings.append(Finding("error", f"{ALLOW_VAR} names no installed plugin", host.unknown_allowed_message(),
                                fix=f"correct the names in {ALLOW_VAR} (`intelrt plugins` lists them), or unset it",
                                claim="C6"))
    if host.unknown_blocked:
        findings.append(Finding("warning", f"{BLOCK_VAR} names no plugin", host.unknown_blocked_message(),
                                fix=f"correct the names in {BLOCK_VAR} (`intelrt plugins` lists them)", claim="C6"))
    for record in host.records:
        if record.status == "failed":
            findings.append(Finding("error", f"plugin {record.name} failed to load", record.error or "",
                                    fix=f"fix or uninstall {record.distribution}, or set {BLOCK_VAR}={record.name}",
                                    claim="C6"))
    try:
        backends = detect_backends(host, env)
    except IntelrtError as exc:
        backends = ()
        findings.append(Finding("error", "backend detection failed", str(exc), fix="see the message", claim="C6"))
    try:
        for _plugin, finding in host.diagnose(backends, env, probe=probe):
            findings.append(finding)
    except IntelrtError as exc:
        findings.append(Finding("error", "a diagnosis hook failed", str(exc), fix="see the message", claim="C6"))
    report = {
        "python": sys.version.split()[0],
        "platform": platform.platform(),
        "packages": {name: package_version(name) for name in PACKAGES},
        "plugins": [r.to_dict() for r in host.records],
        "backends": [b.status.to_dict() for b in backends],
        "environment": relevant_env(env),
        "intelrt_settings": {v: env.get(v) for v in (ALLOW_VAR, BLOCK_VAR, DEBUG_VAR, BACKEND_VAR)},
        "findings": [f.to_dict() for f in findings],
    }
    return dict(redact(report))


def format_report(report: Mapping[str, Any], width: int | None = None) -> str:
    """The doctor report as text that fits ``width`` columns (default: the terminal's)."""
    width = width or terminal_width()
    lines = [f"intelrt doctor — python {report['python']} on {report['platform']}", "packages:"]
    lines += table(None, [(k, v or "not installed") for k, v in report["packages"].items()], width=width)
    lines.append("plugins:")
    lines += table(("name", "distribution", "version", "status"),
                   [(p["name"], p["distribution"], p["version"], p["status"]) for p in report["plugins"]], width=width)
    lines.append("backends:")
    rows: list[tuple[str, str, str]] = []
    for b in report["backends"]:
        rows.append((b["name"], "available" if b["available"] else "unavailable", b["reason"]))
        rows.extend(("", "", f"note: {n}") for n in b["notes"])
    lines += table(("name", "status", "why"), rows, width=width)
    lines.append("environment in effect:")
    for k, v in report["environment"].items():
        lines += wrap(f"{k}={v}", width, "  ", "    ")
    if not report["environment"]:
        lines.append("  (no intelrt-relevant variables set)")
    lines.append("findings:")
    for f in report["findings"]:
        lines += wrap(f"{f['severity']}: {f['title']}: {f['detail']}", width, "  ", "    ")
        if f["fix"]:
            lines += wrap(f"fix: {f['fix']}", width, "    ", "      ")
    if not report["findings"]:
        lines.append("  none")
    return "\n".join(lines)
