"""Detection of Intel Gaudi: install checks, devices, execution mode (SPEC H1, H2, H4, H5)."""

from __future__ import annotations

import importlib.util
import sys
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
    AUTOLOAD_VAR,
    BACKEND,
    DEVICES_VAR,
    GENERATION_KEY,
    GENERATION_NAMES,
    HL_SMI_MAP,
    INT64_VAR,
    LAZY_VAR,
    MODE_KEY,
    MODE_SOURCE_KEY,
    MODULES_VAR,
    PRIORITY,
    STACK_DISTRIBUTION,
    STACK_LOADED_MODULE,
    STACK_MODULE,
    lazy_mode,
)
from .probe import probe, stack_loaded


def _unavailable(reason: str, versions: Mapping[str, str] | None = None,
                 notes: tuple[str, ...] = ()) -> BackendStatus:
    return BackendStatus(BACKEND, BACKEND, False, reason, PRIORITY, versions=dict(versions or {}), notes=notes)


def execution_mode(env: Mapping[str, str], stack: str | None) -> tuple[bool, str]:
    """(lazy, why) for this run: what ``PT_HPU_LAZY_MODE`` and the installed stack's default make of
    it — unless the stack is loaded in this process already, which read the variable once, at load
    (``utils.internal.is_lazy()``), and runs the mode it read then."""
    lazy, why = lazy_mode(env, stack)
    internal = sys.modules.get(f"{STACK_LOADED_MODULE}.utils.internal") if stack_loaded() else None
    if internal is not None and callable(getattr(internal, "is_lazy", None)) and bool(internal.is_lazy()) != lazy:
        loaded = bool(internal.is_lazy())
        return loaded, (f"the Gaudi stack loaded in this process runs {'lazy' if loaded else 'eager'} mode: it read "
                        f"{LAZY_VAR} once, when it loaded; {why} reaches only processes started with it")
    return lazy, why


def mode_note(env: Mapping[str, str], stack: str | None) -> str:
    """H1: how the run executes: ``PT_HPU_LAZY_MODE``, or the default of the installed Gaudi software."""
    lazy, why = execution_mode(env, stack)
    if lazy:
        text = (f"lazy ({why}: ops are accumulated into graphs and run at mark_step(); torch.compile does not run "
                "in lazy mode)")
    else:
        text = (f"eager ({why}; the Gaudi stack runs PyTorch eagerly and torch.compile captures graphs; the stack "
                f"loads at `import torch` through torch's backend autoload, {AUTOLOAD_VAR}=0 turns that off)")
    if env.get(LAZY_VAR) is None:
        text += (". transformers treats unset as lazy '1' when deciding to import habana_frameworks.torch in "
                 "is_torch_hpu_available()")
    return text


def _lazy_blame(env: Mapping[str, str], lazy: bool) -> str:
    """The variable behind a stack that failed in lazy mode (the bridge's assertion — "Stock PyTorch
    … is not supported in Lazy mode" — does not name it)."""
    value = env.get(LAZY_VAR)
    if value is None or not lazy:
        return ""
    odd = "" if value == "1" else ", a value that is neither 0 (eager) nor 1 (lazy) and is read as lazy"
    return (f"; {LAZY_VAR}={value!r} asks for lazy mode{odd}: set {LAZY_VAR}=0 (eager, what a stock PyTorch "
            "build runs) or unset it")


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
    lazy, why = execution_mode(env, versions[STACK_DISTRIBUTION])
    versions[MODE_KEY], versions[MODE_SOURCE_KEY] = ("lazy" if lazy else "eager"), why
    notes = [f"execution mode: {mode_note(env, versions[STACK_DISTRIBUTION])}"]
    visibility = visibility_note(env)
    if visibility:
        notes.append(visibility)
    answer = probe(env)
    if answer.how == "child process":
        notes.append(f"devices counted in a child process with {INT64_VAR}=1, so this process does not load the "
                     f"Gaudi stack before {INT64_VAR} is set (H3)")
    if answer.error is not None:
        return _unavailable(f"the Gaudi stack is installed but could not be queried ({answer.how}): {answer.error}"
                            + _lazy_blame(env, lazy), versions, tuple(notes))
    if not answer.available:
        selecting = MODULES_VAR if env.get(MODULES_VAR) is not None else None
        problems = parse_device_list(MODULES_VAR, env[MODULES_VAR]).problems if selecting else ()
        return _unavailable(f"the Gaudi stack sees no device (check `hl-smi`, and {MODULES_VAR})"
                            + "".join(f"; {selecting}: {p}" for p in problems), versions, tuple(notes))
    if answer.generation:
        versions[GENERATION_KEY] = answer.generation
    devices = tuple(DeviceInfo(i, name, answer.total_memory, True) for i, name in enumerate(answer.names))
    kind = GENERATION_NAMES.get(answer.generation or "", "Gaudi")
    notes.append("devices counted without acquiring one (is_available, device_count, _get_device_type: a Gaudi "
                 "belongs to one process, so detection takes none, SPEC H5); "
                 + (f"memory is the nominal HBM of {kind} ({answer.total_memory // 1024**3} GiB)"
                    if answer.total_memory else "memory unknown (the stack did not report the generation)"))
    return BackendStatus(BACKEND, BACKEND, True, f"{len(devices)} {kind} device(s) visible", PRIORITY,
                         devices=devices, versions=versions, notes=tuple(notes))
