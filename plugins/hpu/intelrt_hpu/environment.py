"""Environment of a Gaudi run: int64 support (SPEC H3), device selection and tenants (SPEC H5)."""

from __future__ import annotations

import os
import socket
from collections.abc import Mapping

from intelrt.plugin import Backend, EnvVar, Finding, Plan, PlanError, Request, parse_device_list

from .facts import (
    DEVICES_VAR,
    HL_SMI_MAP,
    INT64_VAR,
    MODULES_VAR,
    format_ids,
    is_supported_set,
    parse_ids,
    supported_sets_text,
)
from .probe import stack_loaded

INT64_REASON = ("token ids are int64: the Gaudi stack needs int64 support, read once when habana_frameworks is "
                "imported")


def int64_items(env: Mapping[str, str]) -> list[EnvVar | Finding]:
    """H3: ``PT_ENABLE_INT64_SUPPORT=1`` unless the user set it; a warning when it cannot take effect."""
    items: list[EnvVar | Finding] = [EnvVar(INT64_VAR, "1", INT64_REASON, claim="H3")]
    user = env.get(INT64_VAR)
    if user is not None and user != "1":
        items.append(Finding("warning", f"{INT64_VAR}={user} disables int64 on Gaudi",
                             f"your {INT64_VAR}={user!r} is kept, but transformers uses int64 token ids, which then "
                             "fail or are truncated on Gaudi", fix=f"export {INT64_VAR}=1 (or unset it and let intelrt "
                             "set it)", claim="H3"))
    if stack_loaded() and os.environ.get(INT64_VAR) is None:
        items.append(Finding("warning", f"the Gaudi stack was loaded before {INT64_VAR}=1",
                             f"habana_frameworks is already imported in this process (an earlier import, or "
                             f"`import torch` autoloading it) without {INT64_VAR}=1, so setting it now only reaches "
                             "processes intelrt starts", fix=f"export {INT64_VAR}=1 before starting Python, call "
                             "intelrt.setup_env() before `import torch`, or start the run with `intelrt launch`",
                             claim="H3"))
    return items


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


def partial_server_item(ids: tuple[int, ...], request: Request, what: str) -> Finding | None:
    """H5: distributed work on part of a server is supported only for listed module-id sets."""
    if is_supported_set(ids):
        return None
    message = (f"{what} selects Gaudi modules {format_ids(ids)}: on part of a server, distributed work is supported "
               f"only for 2 or 4 Gaudis with module ids {supported_sets_text()}")
    fix = "pick one of those sets (or the whole server) for multi-Gaudi work"
    return request.warn_or_refuse(Finding("warning", "unsupported Gaudi set for distributed work", message,
                                          fix=fix, claim="H5"))


def run_environment(backend: Backend, request: Request, env: Mapping[str, str]) -> list[EnvVar | Finding]:
    """H3 int64 support; H5 ``devices=`` are module ids → ``HABANA_VISIBLE_MODULES`` of the run."""
    items = int64_items(env)
    if request.devices is not None:
        ids = tuple(request.devices)
        known = known_module_ids(backend, env)
        if known is not None and not set(ids) <= set(known):
            outside = format_ids(sorted(set(ids) - set(known)))
            where = (f"{MODULES_VAR}={env[MODULES_VAR]} in your environment" if env.get(MODULES_VAR) is not None
                     else f"{backend.device_count} Gaudi(s) visible")
            raise PlanError(f"devices={list(ids)}: Gaudi module id(s) {outside} are not visible ({where}; visible "
                            f"module ids: {format_ids(known)}). devices= takes module ids as `{HL_SMI_MAP}` shows "
                            f"them; pick from the visible ones" + (f", or unset {MODULES_VAR}" if env.get(MODULES_VAR)
                                                                   is not None else ""))
        items.append(EnvVar(MODULES_VAR, format_ids(ids), "devices= selects these Gaudi modules (module ids are stable "
                            "across reboots and driver reinstalls)", claim="H5", overwrite_user=True))
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
    return items
