"""Detection of Intel Gaudi: install checks, devices, execution mode (SPEC H1, H2, H4, H5)."""

from __future__ import annotations

import importlib.util
from collections.abc import Mapping

from intelrt.plugin import (
    BackendStatus,
    DeviceInfo,
    at_least,
    package_version,
    parse_device_list,
)

from .facts import (
    ACCELERATE_FLOOR,
    BACKEND,
    DEVICES_VAR,
    GENERATION_KEY,
    GENERATION_NAMES,
    HL_SMI_MAP,
    INT64_VAR,
    LAZY_VAR,
    MODULES_VAR,
    PRIORITY,
    STACK_DISTRIBUTION,
    STACK_MODULE,
    lazy_mode,
)
from .probe import probe


def _unavailable(reason: str, versions: Mapping[str, str] | None = None,
                 notes: tuple[str, ...] = ()) -> BackendStatus:
    return BackendStatus(BACKEND, BACKEND, False, reason, PRIORITY, versions=dict(versions or {}), notes=notes)


def mode_note(env: Mapping[str, str], stack: str | None) -> str:
    """H1: how the run executes: ``PT_HPU_LAZY_MODE``, or the default of the installed Gaudi software."""
    lazy, why = lazy_mode(env, stack)
    if lazy:
        text = f"lazy ({why}: ops are accumulated into graphs and run at mark_step())"
    else:
        text = f"eager ({why}; the Gaudi stack runs PyTorch eagerly and torch.compile captures graphs)"
    if env.get(LAZY_VAR) is None:
        text += (". transformers treats unset as lazy '1' when deciding to import habana_frameworks.torch in "
                 "is_torch_hpu_available()")
    return text


def visibility_note(env: Mapping[str, str]) -> str | None:
    """H5: which variable selects the visible Gaudis, and whether it is stable."""
    if env.get(MODULES_VAR) is not None:
        return f"{MODULES_VAR}={env[MODULES_VAR]} selects Gaudis by module id (stable across reboots)"
    if env.get(DEVICES_VAR) is not None:
        return (f"{DEVICES_VAR}={env[DEVICES_VAR]} selects Gaudis by device index only when a container starts "
                "(habanalabs-container-runtime mounts those devices); inside a process the Gaudi stack never reads "
                f"it, and indices can change after a reboot or driver reinstall: use {MODULES_VAR} (map with "
                f"`{HL_SMI_MAP}`)")
    return None


def detect(env: Mapping[str, str]) -> BackendStatus:
    """H2/H4: the Gaudi stack must be importable and accelerate >= 1.5.0; H1 mode and H5
    visibility are reported. Devices are counted without loading the stack in this process
    before ``PT_ENABLE_INT64_SUPPORT`` is set (H3; see :mod:`intelrt_hpu.probe`)."""
    if importlib.util.find_spec(STACK_MODULE) is None:
        return _unavailable(f"the Intel Gaudi software stack ({STACK_DISTRIBUTION}, module {STACK_MODULE}) is not "
                            "installed; install it with the Intel Gaudi installation guide")
    versions = {STACK_DISTRIBUTION: package_version(STACK_DISTRIBUTION, STACK_MODULE) or "unknown",
                "accelerate": package_version("accelerate") or "not installed"}
    if not at_least(versions["accelerate"], ACCELERATE_FLOOR):
        return _unavailable(f"accelerate {versions['accelerate']} < {ACCELERATE_FLOOR}: transformers' "
                            "is_torch_hpu_available() is False even with a Gaudi present; "
                            f"pip install 'accelerate>={ACCELERATE_FLOOR}'", versions)
    notes = [f"execution mode: {mode_note(env, versions[STACK_DISTRIBUTION])}"]
    visibility = visibility_note(env)
    if visibility:
        notes.append(visibility)
    answer = probe(env)
    if answer.how == "child process":
        notes.append(f"devices counted in a child process with {INT64_VAR}=1, so this process does not load the "
                     f"Gaudi stack before {INT64_VAR} is set (H3)")
    if answer.error is not None:
        return _unavailable(f"the Gaudi stack is installed but could not be queried ({answer.how}): {answer.error}",
                            versions, tuple(notes))
    if not answer.available:
        selecting = MODULES_VAR if env.get(MODULES_VAR) is not None else None
        problems = parse_device_list(MODULES_VAR, env[MODULES_VAR]).problems if selecting else ()
        return _unavailable(f"the Gaudi stack sees no device (check `hl-smi`, and {MODULES_VAR})"
                            + "".join(f"; {selecting}: {p}" for p in problems), versions, tuple(notes))
    if answer.generation:
        versions[GENERATION_KEY] = answer.generation
    devices = tuple(DeviceInfo(i, name, answer.total_memory, True) for i, name in enumerate(answer.names))
    kind = GENERATION_NAMES.get(answer.generation or "", "Gaudi")
    return BackendStatus(BACKEND, BACKEND, True, f"{len(devices)} {kind} device(s) visible", PRIORITY,
                         devices=devices, versions=versions, notes=tuple(notes))
