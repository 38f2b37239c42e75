"""``intelrt doctor`` findings for Gaudi (SPEC H1, H3, H4, H5)."""

from __future__ import annotations

from collections.abc import Mapping

from intelrt.plugin import BackendStatus, Finding, at_least, package_version

from .detection import mode_note
from .environment import malformed_visibility
from .facts import (
    ACCELERATE_FLOOR,
    DEVICES_VAR,
    HL_SMI_MAP,
    INT64_VAR,
    MODULES_VAR,
    stack_version,
)
from .hlsmi import HlSmiError, module_map


def probe_modules(env: Mapping[str, str]) -> Finding:
    """H5, ``intelrt doctor --probe`` only: the index → module id map from hl-smi."""
    try:
        rows = module_map(env)
    except HlSmiError as exc:
        return Finding("warning", "hl-smi could not map Gaudi indices to module ids", str(exc),
                       fix=f"install the Gaudi driver tools and run `{HL_SMI_MAP}` yourself", claim="H5")
    mapping = ", ".join(f"index {index} is module {module}" for index, module in rows)
    return Finding("info", "Gaudi module ids (hl-smi)",
                   f"`{HL_SMI_MAP}`: {mapping or 'no device'}; {MODULES_VAR} and devices= take module ids",
                   claim="H5")


def diagnose(status: BackendStatus, env: Mapping[str, str], probe: bool) -> list[Finding]:
    """H4: accelerate < 1.5.0 is why transformers reports no Gaudi; H1 mode; H3 int64; H5 visibility;
    with ``probe`` (``intelrt doctor --probe``), hl-smi's index → module id map."""
    if "accelerate" not in status.versions:
        return []  # the Gaudi stack is not installed: nothing to say about Gaudi
    findings: list[Finding] = []
    accelerate = status.versions["accelerate"]
    if not at_least(accelerate, ACCELERATE_FLOOR):
        findings.append(Finding(
            "error", f"accelerate < {ACCELERATE_FLOOR}: transformers reports no Gaudi",
            f"the Gaudi stack is installed but accelerate is {accelerate}; transformers' is_torch_hpu_available() "
            f"needs accelerate >= {ACCELERATE_FLOOR} and answers False even with a Gaudi present, so Trainer, "
            "pipeline() and device_map='hpu' do not use it",
            fix=f"pip install --upgrade 'accelerate>={ACCELERATE_FLOOR}'", claim="H4"))
        return findings
    findings.append(Finding("info", "Gaudi execution mode", mode_note(env, stack_version(status)), claim="H1"))
    value = env.get(INT64_VAR)
    if value is None:
        findings.append(Finding("info", f"{INT64_VAR} is not set",
                                "intelrt sets it to 1 for the runs it starts (load, setup_env, launch)",
                                fix=f"export {INT64_VAR}=1 for scripts that do not go through intelrt", claim="H3"))
    elif value != "1":
        findings.append(Finding("warning", f"{INT64_VAR}={value}",
                                "transformers uses int64 token ids, which need int64 support on Gaudi",
                                fix=f"export {INT64_VAR}=1", claim="H3"))
    malformed = malformed_visibility(env, status.device_count if status.available else None)
    if malformed is not None:
        findings.append(malformed)
    if env.get(DEVICES_VAR) is not None and env.get(MODULES_VAR) is None:
        findings.append(Finding("warning", f"{DEVICES_VAR} selects Gaudis by index",
                                f"{DEVICES_VAR}={env[DEVICES_VAR]} takes effect only when a container starts (the Gaudi "
                                "stack in a process never reads it), and indices can change after a reboot or driver "
                                "reinstall", fix=f"use {MODULES_VAR} (module ids; `{HL_SMI_MAP}` or `intelrt doctor "
                                "--probe` maps them)", claim="H5"))
    if probe:
        findings.append(probe_modules(env))
    if package_version("bitsandbytes") is None:
        findings.append(Finding("info", "bitsandbytes not installed",
                                "4-bit / 8-bit loading on Gaudi 2 and 3 needs it",
                                fix="pip install 'intelrt[bitsandbytes]'", claim="H7"))
    return findings
