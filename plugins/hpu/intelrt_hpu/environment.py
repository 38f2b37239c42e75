"""Environment of a Gaudi run: int64 support (SPEC H3), device selection and tenants (SPEC H5), the
stack's own values (C2), lazy collectives for multi-card lazy runs (H10)."""

from __future__ import annotations

import os
import socket
import sys
from collections.abc import Mapping, Sequence

from intelrt.plugin import (
    Backend,
    DeviceId,
    EnvVar,
    Finding,
    Plan,
    PlanError,
    Request,
    environment_at_import,
    parse_device_list,
)

from .facts import (
    DEVICES_VAR,
    FIRST_GENERATION,
    GENERATION_NAMES,
    HL_SMI_MAP,
    INT64_VAR,
    LAZY_COLLECTIVES_VAR,
    MODULE_ID_VAR,
    MODULES_VAR,
    STACK_LOADED_MODULE,
    STACK_WRITTEN,
    execution_mode,
    format_ids,
    generation,
    is_supported_set,
    lazy_mode,
    parse_ids,
    stack_version,
    supported_sets_text,
)
from .probe import stack_loaded

INT64_REASON = ("token ids are int64: the Gaudi stack needs int64 support, read once when habana_frameworks.torch "
                "is imported")
EAGER_INT64 = ("the bridge turns int64 on by default in eager mode except on first-generation Gaudi "
               "(gaudi-pytorch-bridge 1.19 common/eager/utils.cpp l.29-42; scripts/env_flags.yaml l.624-635: "
               "'For the PT_HPU_LAZY_MODE=0 the default value is true'); in lazy mode it is off unless the "
               "variable is set (common/lazy/utils.cpp l.33-35)")


def int64_items(backend: Backend, env: Mapping[str, str]) -> list[EnvVar | Finding]:
    """H3: ``PT_ENABLE_INT64_SUPPORT=1`` unless the user set it; a warning when it cannot take effect
    and int64 is off without it (lazy mode, or first-generation Gaudi), a note when eager mode has it
    on anyway."""
    items: list[EnvVar | Finding] = [EnvVar(INT64_VAR, "1", INT64_REASON, claim="H3")]
    user = env.get(INT64_VAR)
    if user is not None and user != "1":
        items.append(Finding("warning", f"{INT64_VAR}={user} disables int64 on Gaudi",
                             f"your {INT64_VAR}={user!r} is kept, but transformers uses int64 token ids, which then "
                             "fail or are truncated on Gaudi", fix=f"export {INT64_VAR}=1 (or unset it and let intelrt "
                             "set it)", claim="H3"))
    if stack_loaded() and os.environ.get(INT64_VAR) is None:
        lazy, mode = execution_mode(backend, env)
        first = generation(backend) == FIRST_GENERATION
        if not lazy and not first:
            kind = GENERATION_NAMES.get(generation(backend) or "", "this Gaudi")
            items.append(Finding("info", "int64 is on by default in eager mode",
                                 f"the Gaudi stack is already loaded in this process (in eager mode `import torch` "
                                 f"loads it) without {INT64_VAR}; int64 is on by default in eager mode on {kind} "
                                 f"({mode}): {EAGER_INT64}. Nothing to fix; {INT64_VAR}=1 is still set for the "
                                 "processes intelrt starts, which may run lazy", claim="H3"))
        else:
            why = "first-generation Gaudi has int64 off by default" if first else f"lazy mode ({mode})"
            items.append(Finding("warning", f"the Gaudi stack was loaded before {INT64_VAR}=1",
                                 f"habana_frameworks.torch is already imported in this process (an earlier import, or "
                                 f"`import torch` autoloading it) without {INT64_VAR}=1, and {why}: setting it now "
                                 f"only reaches processes intelrt starts ({EAGER_INT64})",
                                 fix=f"export {INT64_VAR}=1 before starting Python, call intelrt.setup_env() before "
                                     "`import torch`, or start the run with `intelrt launch`", claim="H3"))
    return items


def held_module(env: Mapping[str, str]) -> tuple[bool, str | None]:
    """(whether this process holds a Gaudi, its module id when known): the stack acquires one at its
    first device use (``_lazy_init``), for good; asked only of a stack already loaded (never imported here)."""
    if not stack_loaded():
        return False, None
    hpu = sys.modules.get(f"{STACK_LOADED_MODULE}.hpu")
    initialized = getattr(hpu, "is_initialized", None)
    if not callable(initialized) or not initialized():
        return False, None
    return True, env.get(MODULE_ID_VAR)


def written_by_stack(env: Mapping[str, str]) -> list[str]:
    """C2: the variables of ``env`` the loaded Gaudi stack wrote into this process (its rendezvous
    defaults, compile threads, profiling, a rank's module id): not in the environment at
    ``import intelrt``, and — for those with a fixed default — holding that default."""
    if not stack_loaded():
        return []
    at_import = environment_at_import()
    return [name for name, default in STACK_WRITTEN.items()
            if name in env and name not in at_import and (not default or env[name] == default)]


def visibility_var(env: Mapping[str, str]) -> str | None:
    """The variable that selects this process's Gaudis (modules win over device indices), if any."""
    return next((name for name in (MODULES_VAR, DEVICES_VAR) if env.get(name) is not None), None)


def malformed_visibility(env: Mapping[str, str], visible: int | None) -> Finding | None:
    """H5: a warning naming each entry of the selecting variable that the Gaudi stack skips."""
    name = visibility_var(env)
    if name is None:
        return None
    problems = parse_device_list(name, env[name]).summary(visible)
    if not problems:
        return None
    seen = f"; this process sees {visible} Gaudi(s)" if visible is not None else ""
    if name == MODULES_VAR:  # gaudi-pytorch-bridge hpu/_utils.py reads it with int() of each entry
        seen += "; torch.hpu.set_device() reads each entry with int() and raises ValueError on one that is not a number"
    return Finding("warning", f"{name} has entries the driver ignores", f"{name}={env[name]!r}: "
                   f"{'; '.join(problems)}{seen}", fix=f"correct or unset {name} (module ids as `{HL_SMI_MAP}` "
                   "shows them, e.g. 0,1), or pass devices= to intelrt", claim="H5")


def known_module_ids(backend: Backend, env: Mapping[str, str]) -> tuple[int, ...] | None:
    """Module ids visible to this process, when they can be known without hl-smi."""
    if env.get(MODULES_VAR) is not None:
        return parse_device_list(MODULES_VAR, env[MODULES_VAR]).ids  # what the stack keeps of it
    if env.get(DEVICES_VAR) is not None or not backend.devices:
        return None  # index-based selection: module ids unknown without hl-smi
    return tuple(range(backend.device_count))


PARTIAL_SERVER_FIX = "pick one of those sets (or the whole server) for multi-Gaudi work"


def _partial_server_message(ids: tuple[int, ...], what: str) -> str | None:
    if is_supported_set(ids):
        return None
    return (f"{what} selects Gaudi modules {format_ids(ids)}: on part of a server, distributed work is supported "
            f"only for 2 or 4 Gaudis with module ids {supported_sets_text()}")


def partial_server_item(ids: tuple[int, ...], request: Request, what: str) -> Finding | None:
    """H5: distributed work on part of a server is supported only for listed module-id sets."""
    message = _partial_server_message(ids, what)
    if message is None:
        return None
    return request.warn_or_refuse(Finding("warning", "unsupported Gaudi set for distributed work", message,
                                          fix=PARTIAL_SERVER_FIX, claim="H5"))


def group_problem(devices: Sequence[DeviceId]) -> str | None:
    """H5: a group of Gaudis working together (a serving replica's tensor-parallel ranks) must be a
    supported module set; the message says which sets are."""
    ids = tuple(int(d) for d in devices)
    message = _partial_server_message(ids, "the group")
    return None if message is None else f"{message}; {PARTIAL_SERVER_FIX}"


def _this_process_module(ids: tuple[int, ...], request: Request, env: Mapping[str, str]) -> list[EnvVar | Finding]:
    """H5 in this process: the bridge acquires the module ``HLS_MODULE_ID`` names at the first device
    use (``device.cpp`` l.393-443), so ``devices=`` lands there; a list of module ids would change
    nothing once the stack counted. A process that already holds another Gaudi cannot move: refused
    for one module (a load here), a warning for several (a launch, whose ranks are new processes)."""
    module = str(ids[0])
    items: list[EnvVar | Finding] = []
    held, which = held_module(env)
    if held and which != module:
        holding = f"module {which}" if which is not None else "a Gaudi (its module id is not in HLS_MODULE_ID)"
        message = (f"devices={list(ids)}: this process already holds {holding} — the Gaudi stack acquires one device "
                   f"per process, for good, at its first device use — so a load here cannot move to module {module}")
        fix = f"start a new process, or run it with `intelrt launch --devices {format_ids(ids)}`"
        if len(ids) == 1:
            raise PlanError(f"{message}. Fix: {fix}")
        items.append(request.warn_or_refuse(Finding("warning", "this process already holds a Gaudi", message + (
            "; the processes the run starts get the modules, and a rank that needs the held module fails to "
            "acquire it"), fix=fix, claim="H5")))
    reason = (f"devices={list(ids)}: this process drives Gaudi module {module}; the Gaudi stack acquires the module "
              f"{MODULE_ID_VAR} names at the first device use (gaudi-pytorch-bridge device.cpp l.393-443)")
    if len(ids) > 1:
        reason += (f"; one process drives one Gaudi (H6): the other modules take the ranks of intelrt launch, each "
                   f"rank its {MODULES_VAR} entry at LOCAL_RANK")
    items.append(EnvVar(MODULE_ID_VAR, module, reason, claim="H5", overwrite_user=True, started=False))
    return items


def run_environment(backend: Backend, request: Request, env: Mapping[str, str]) -> list[EnvVar | Finding]:
    """H3 int64 support; H5 ``devices=`` are module ids: ``HLS_MODULE_ID`` for this process (the module
    the stack acquires) and ``HABANA_VISIBLE_MODULES`` for the processes the run starts."""
    items = int64_items(backend, env)
    if request.devices is not None:
        ids = tuple(int(d) for d in request.devices)  # whole module ids: card.tile ids were refused (tile_ids)
        known = known_module_ids(backend, env)
        if known is not None and not set(ids) <= set(known):
            outside = format_ids(sorted(set(ids) - set(known)))
            where = (f"{MODULES_VAR}={env[MODULES_VAR]} in your environment" if env.get(MODULES_VAR) is not None
                     else f"{backend.device_count} Gaudi(s) visible")
            raise PlanError(f"devices={list(ids)}: Gaudi module id(s) {outside} are not visible ({where}; visible "
                            f"module ids: {format_ids(known)}). devices= takes module ids as `{HL_SMI_MAP}` shows "
                            f"them; pick from the visible ones" + (f", or unset {MODULES_VAR}" if env.get(MODULES_VAR)
                                                                   is not None else ""))
        items += _this_process_module(ids, request, env)
        items.append(EnvVar(MODULES_VAR, format_ids(ids), "devices= selects these Gaudi modules (module ids are stable "
                            "across reboots and driver reinstalls) for the processes the run starts, each rank taking "
                            f"its entry at LOCAL_RANK; in this process it stops the bridge from taking another Gaudi "
                            f"when module {ids[0]} is held (without it the bridge proceeds without the module id: "
                            "device.cpp l.433-441)", claim="H5", overwrite_user=True))
        if env.get(DEVICES_VAR) is not None:
            items.append(Finding("info", f"{DEVICES_VAR} left in place",
                                 f"{DEVICES_VAR}={env[DEVICES_VAR]} (device indices) stays in the environment; inside "
                                 f"the process {MODULES_VAR}={format_ids(ids)} selects the modules", claim="H5"))
        partial = partial_server_item(ids, request, f"devices={list(ids)}")
        if partial is not None:
            items.append(partial)
    else:
        malformed = malformed_visibility(env, backend.device_count)
        if malformed is not None:
            items.append(request.warn_or_refuse(malformed))
    if request.devices is None and env.get(DEVICES_VAR) is not None and env.get(MODULES_VAR) is None:
        items.append(Finding("warning", f"{DEVICES_VAR} selects Gaudis by index",
                             f"{DEVICES_VAR}={env[DEVICES_VAR]} takes effect only when a container starts "
                             "(habanalabs-container-runtime mounts those devices; the Gaudi stack in a process never "
                             "reads it), and its indices can change after a reboot or driver reinstall",
                             fix=f"use {MODULES_VAR} with module ids instead (`{HL_SMI_MAP}`, or `intelrt doctor "
                                 "--probe`, maps indices to module ids), or pass devices= to intelrt", claim="H5"))
    return items


def free_port() -> int:
    """A TCP port free on this host now (bound to 127.0.0.1:0 and released)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def launch_environment(backend: Backend, plan: Plan, nproc: int, env: Mapping[str, str]) -> list[EnvVar | Finding]:
    """H5: a free ``MASTER_PORT`` per tenant, supported module sets; H10: one process per Gaudi."""
    items: list[EnvVar | Finding] = [
        EnvVar("MASTER_PORT", str(free_port()), "each tenant of a shared Gaudi server needs its own rendezvous port "
               "(torchrun's default 29500 would collide); this one is free on this host", claim="H5")]
    chosen = {s.name: s.value for s in plan.env}.get(MODULES_VAR) or env.get(MODULES_VAR)
    modules = parse_ids(chosen)
    count = len(modules) if modules is not None else backend.device_count
    if count and nproc > count:
        raise PlanError(f"nproc={nproc}: HCCL runs one process per Gaudi and only {count} Gaudi(s) are selected; "
                        f"use nproc={count} (the default) or select more Gaudis with devices=")
    if count and nproc < count:
        if modules is not None:
            # Habana: "the number of elements in the list must be equal to the number of devices used"
            items.append(plan.request.warn_or_refuse(Finding(
                "warning", f"{MODULES_VAR} lists more Gaudis than processes",
                f"{MODULES_VAR}={chosen} names {count} module(s) for {nproc} process(es); Habana's Gaudi-to-process "
                "assignment requires the list to match the devices used (each process takes the module at its "
                "local rank), so the extra modules are held by no process and cannot serve another tenant",
                fix=f"select exactly {nproc} module(s) with --devices (e.g. {format_ids(modules[:nproc])}), or "
                    f"launch {count} processes", claim="H5")))
        else:
            items.append(Finding("info", f"{nproc} process(es) on {count} visible Gaudis",
                                 f"one process per Gaudi: ranks take Gaudis in order and {count - nproc} stay idle",
                                 claim="H10"))
    # a devices= set was already checked by intelrt_setup_env; an inherited one is checked here
    if modules is not None and nproc >= 2 and plan.request.devices is None:
        partial = partial_server_item(modules, plan.request, f"{MODULES_VAR}={chosen}")
        if partial is not None:
            items.append(partial)
    items += lazy_collectives(backend, plan.request, nproc, env)
    return items


def lazy_collectives(backend: Backend, request: Request, nproc: int, env: Mapping[str, str]) -> list[EnvVar | Finding]:
    """H10: ranks that run lazy mode on several Gaudis need the bridge's lazy collectives, which it loads
    only with ``PT_HPU_ENABLE_LAZY_COLLECTIVES=true`` (``distributed/hccl/__init__.py`` l.11-21): HPU graphs
    in a multi-card group hang or compute wrong without them (vllm-gaudi ``docs/configuration/env_variables.md``
    l.81; vllm-gaudi sets it itself in lazy mode, ``platform.py`` l.432-436; Optimum Habana for any
    multi-card run, ``examples/text-generation/utils.py`` l.127-128). Eager mode loads eager collectives."""
    lazy, mode = lazy_mode(env, stack_version(backend))  # the ranks' mode: their environment, their stack
    if nproc < 2 or not lazy:
        return []
    items: list[EnvVar | Finding] = [EnvVar(
        LAZY_COLLECTIVES_VAR, "true", f"{nproc} ranks in lazy mode ({mode}): the Gaudi bridge loads lazy collectives "
        "only with this set, and HPU graphs in a multi-card group need them (vllm-gaudi env_variables.md l.81, "
        "platform.py l.432-436; optimum-habana examples/text-generation/utils.py l.127-128)", claim="H10")]
    user = env.get(LAZY_COLLECTIVES_VAR)
    if user is not None and user.lower() not in ("true", "1"):
        items.append(request.warn_or_refuse(Finding(
            "warning", f"{LAZY_COLLECTIVES_VAR}={user} in a multi-card lazy-mode launch",
            f"your {LAZY_COLLECTIVES_VAR}={user!r} is kept: the {nproc} ranks load no lazy collectives, so HPU graphs "
            "(decode, vLLM-Gaudi, Optimum Habana's --use_hpu_graphs) in their hccl group hang or compute wrong",
            fix=f"unset {LAZY_COLLECTIVES_VAR} (intelrt sets it to true) or export {LAZY_COLLECTIVES_VAR}=true",
            claim="H10")))
    return items
