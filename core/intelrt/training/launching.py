"""``intelrt launch``: one process per device through ``torchrun`` or ``accelerate launch``, with
the environment the backend's hooks ask for (SPEC X2, X11, H3, H5, H10, C2).

intelrt is not a distributed engine: it decides the command line and the environment, then
hands over to ``python -m torch.distributed.run`` (or ``accelerate launch``). Every rank gets
the same environment — one visibility mask for all, each rank picking its device by
``LOCAL_RANK`` (a per-rank mask hangs XCCL collectives, SPEC X11).
"""

from __future__ import annotations

import logging
import os
import re
import shlex
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from ..errors import ConfigurationError, PlanError, PluginError
from ..hooks.options import AUTO
from ..hooks.plan import EnvSetting, Plan
from ..hooks.types import EnvVar, Finding
from ..host.manager import PluginHost, get_host
from ..planning.environment import resolve_env
from ..planning.planner import plan_backend
from ..support.environ import child as child_environment
from ..support.tables import plural
from .rank_watch import DEFAULT_HANG_TIMEOUT_S, HEARTBEATS_VAR, watch

log = logging.getLogger(__name__)

VIA = ("torchrun", "accelerate")
_ENDPOINT = re.compile(r"^(?P<host>\[[0-9a-fA-F:]+\]|[A-Za-z0-9_.-]+):(?P<port>\d{1,5})$")
#: Shown by ``--dry-run``: what the launcher itself adds to each rank's environment.
PER_RANK = "RANK, LOCAL_RANK, WORLD_SIZE, MASTER_ADDR, MASTER_PORT"


@dataclass(frozen=True)
class LaunchCommand:
    """The exact launcher command and the environment every rank shares."""

    argv: tuple[str, ...]
    nproc: int
    """Processes per node."""
    nnodes: int
    via: str
    plan: Plan
    env: tuple[EnvSetting, ...]
    """intelrt-managed variables: the plan's (``intelrt_setup_env``) and the launch's (``intelrt_launch_env``)."""
    findings: tuple[Finding, ...] = ()
    returncode: int | None = None
    """The launcher's exit status once it ran (``None`` for a dry run)."""
    left_out: tuple[str, ...] = ()
    """Variables of this process the backend's vendor stack wrote (``Backend.written_by_stack``): the
    ranks do not inherit them."""
    hang_timeout: float = DEFAULT_HANG_TIMEOUT_S
    """Seconds a rank may keep the others waiting in a collective before the job is stopped (0: never)."""
    hang: str | None = None
    """Once it ran: why the job was stopped as hung, naming the ranks (``None``: it was not)."""

    def env_to_set(self) -> dict[str, str]:
        return {s.name: s.value for s in self.env if s.to_set and s.started}

    def environment(self, base: Mapping[str, str] | None = None) -> dict[str, str]:
        """The launcher's full environment: ``base`` (default ``os.environ``, less what the vendor stack
        wrote into it: :attr:`left_out`) plus what intelrt sets."""
        source = os.environ if base is None else base
        return child_env(self.env, {k: v for k, v in source.items() if k not in self.left_out})

    def start(self, **popen: Any) -> tuple[subprocess.Popen[str], Path | None]:
        """Start the launcher (the port checked first), with a new heartbeat directory for the ranks
        when hangs are watched; the process and that directory."""
        env = self.environment()
        check_master_port(env, self.nnodes)
        beats = Path(tempfile.mkdtemp(prefix="intelrt-heartbeats-")) if self.hang_timeout > 0 else None
        if beats is not None:
            env[HEARTBEATS_VAR] = str(beats)
        return subprocess.Popen(list(self.argv), env=env, text=True, errors="replace", **popen), beats  # noqa: S603

    def watch(self, process: subprocess.Popen[str], beats: Path | None,
              on_hang: Callable[[Any], None] | None = None) -> str | None:
        """Wait for ``process`` (see :meth:`start`); stop it when a rank hangs (``on_hang`` told first).
        Why it was stopped, or ``None``."""
        try:
            hang = watch(process, beats, self.hang_timeout, self.nproc, on_hang) if beats is not None else None
            process.wait()
        finally:
            if beats is not None:
                shutil.rmtree(beats, ignore_errors=True)
        return None if hang is None else str(hang)

    def shell(self) -> str:
        """The command as one shell line, with the variables intelrt sets in front of it."""
        assignments = [f"{k}={shlex.quote(v)}" for k, v in self.env_to_set().items()]
        return " ".join(assignments + [shlex.quote(a) for a in self.argv])

    @property
    def collective(self) -> str | None:
        value = self.plan.decided.collective
        return None if value is None else str(value)

    def to_dict(self) -> dict[str, Any]:
        decision = self.plan.decisions.get("collective")
        return {
            "via": self.via, "nproc": self.nproc, "nnodes": self.nnodes, "command": list(self.argv),
            "shell": self.shell(),
            "backend": {"name": self.plan.backend.name, "device": self.plan.device,
                        "devices": list(self.plan.request.devices) if self.plan.request.devices else None,
                        "reason": self.plan.backend_reason},
            "collective": None if decision is None else {"value": decision.value, "reason": decision.reason,
                                                         "plugin": decision.plugin, "claim": decision.claim},
            "env": {s.name: s.value for s in self.env},
            "env_settings": [s.to_dict() for s in self.env],
            "per_rank": PER_RANK.split(", "),
            "findings": [f.to_dict() for f in self.findings],
            "returncode": self.returncode,
            "hang_timeout": self.hang_timeout,
            "hang": self.hang,
        }

    def __str__(self) -> str:
        devices = self.plan.request.devices
        where = f"{self.plan.backend.name}" + (f" devices {','.join(map(str, devices))}" if devices else "")
        decision = self.plan.decisions.get("collective")
        collective = (f"collective {decision.value} ({decision.reason})" if decision is not None
                      else "collective chosen by torch.distributed (no plugin decided one)")
        nodes = f" on each of {self.nnodes} nodes" if self.nnodes > 1 else ""
        lines = [f"intelrt launch: {plural(self.nproc, 'process', 'processes')}{nodes} on {where} via {self.via}; "
                 f"{collective}",
                 f"  every rank gets the environment below; {self.via} adds {PER_RANK} per rank, "
                 "and each rank picks its device by LOCAL_RANK"]
        if self.env:
            lines.append("environment (shared by every rank):")
            for s in self.env:
                extra = f" (intelrt would set {s.wanted!r})" if s.action == "kept" else ""
                claim = f" [{s.claim}]" if s.claim else ""
                lines.append(f"  {s.name}={s.value}  [{s.action} by {s.plugin}{extra}] {s.reason}{claim}")
        else:
            lines.append("environment: nothing to add (the launcher's own environment is used as is)")
        for f in self.findings:
            lines.append(f"{f.severity}: {f.title} — {f.detail}" + (f" Fix: {f.fix}" if f.fix else ""))
        lines.append(f"a rank that keeps the others waiting in a collective for {self.hang_timeout:g} s stops the job, "
                     "named (--hang-timeout)" if self.hang_timeout > 0 else "hung ranks are not watched (--hang-timeout 0)")
        lines.append("command:")  # last: the line to copy and paste
        lines.append(f"  {self.shell()}")
        return "\n".join(lines)


def _check_int(name: str, value: object, minimum: int) -> int:
    if not isinstance(value, int) or isinstance(value, bool) or value < minimum:
        raise ConfigurationError(f"{name} must be a whole number >= {minimum}, got {value!r}")
    return value


def _endpoint(endpoint: str) -> tuple[str, str]:
    match = _ENDPOINT.match(endpoint.strip())
    if match is None or not 0 < int(match["port"]) < 65536:
        raise ConfigurationError(f"--rdzv-endpoint {endpoint!r}: give HOST:PORT of the rank-0 node, "
                                 "e.g. node0.example:29400")
    return match["host"], match["port"]


def child_env(settings: Sequence[EnvSetting], base: Mapping[str, str] | None = None) -> dict[str, str]:
    """The environment of a launched process: ``base`` plus what intelrt sets for started processes."""
    return child_environment({s.name: s.value for s in settings if s.to_set and s.started}, base)


def _merge_env(first: Sequence[EnvSetting], second: Sequence[EnvSetting], host: PluginHost) -> list[EnvSetting]:
    merged = {s.name: s for s in first}
    for s in second:
        other = merged.get(s.name)
        if other is not None and other.value != s.value:
            raise PluginError(f"{host.describe(other.plugin)} (setup env) and {host.describe(s.plugin)} (launch env) "
                              f"both set {s.name} ({other.value!r} vs {s.value!r}); block one of them with "
                              "INTELRT_DISABLE_PLUGINS", plugin=s.plugin, distribution=host.distribution_of(s.plugin))
        merged.setdefault(s.name, s)
    return list(merged.values())


def _torchrun_argv(nproc: int, nnodes: int, node_rank: int | None, endpoint: str | None, rdzv_id: str,
                   master: tuple[str, str] | None) -> list[str]:
    argv = [sys.executable, "-m", "torch.distributed.run", "--nproc-per-node", str(nproc)]
    if endpoint is not None:
        argv += ["--nnodes", str(nnodes), "--rdzv-backend", "c10d", "--rdzv-endpoint", endpoint,
                 "--rdzv-id", rdzv_id]
        if node_rank is not None:
            argv += ["--node-rank", str(node_rank)]
    elif master is not None:  # torchrun ignores MASTER_PORT in its environment: pass it on
        argv += ["--master-addr", master[0], "--master-port", master[1]]
    else:
        argv.append("--standalone")  # single node, a free port chosen by torchrun
    return argv


def _accelerate_argv(nproc: int, nnodes: int, node_rank: int | None, endpoint: str | None,
                     master: tuple[str, str] | None) -> list[str]:
    total = nproc * nnodes  # accelerate counts processes over all machines
    argv = [sys.executable, "-m", "accelerate.commands.launch", "--num_processes", str(total),
            "--num_machines", str(nnodes)]
    if total > 1:
        argv.append("--multi_gpu")  # accelerate's switch for one process per device (any device type)
    if endpoint is not None:
        if node_rank is None:
            raise ConfigurationError("accelerate launch on several nodes needs --node-rank (0 on the node "
                                     "at --rdzv-endpoint, 1.. on the others)")
        ip, port = _endpoint(endpoint)
        argv += ["--machine_rank", str(node_rank), "--main_process_ip", ip, "--main_process_port", port]
    elif master is not None:
        argv += ["--main_process_port", master[1]]
    return argv


def check_master_port(env: Mapping[str, str], nnodes: int = 1) -> None:
    """A ``MASTER_PORT`` another process listens on (another job, another tenant of the machine) makes
    torchrun fail with a ``DistNetworkError`` traceback: refuse it first, on a one-node job, where this
    machine is the one torchrun binds the port on."""
    port = (env.get("MASTER_PORT") or "").strip()
    if not port or nnodes > 1:
        return
    if not (port.isascii() and port.isdigit()) or not 0 < int(port) < 65536:
        raise ConfigurationError(f"MASTER_PORT={port!r} is not a port number (1-65535); pick a free port, or unset "
                                 "MASTER_PORT and torchrun picks one")
    import errno
    import socket

    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # a port in TIME_WAIT is free to torchrun too
        try:
            probe.bind(("", int(port)))
        except OSError as exc:
            if exc.errno != errno.EADDRINUSE:
                raise
            raise ConfigurationError(
                f"MASTER_PORT={port} is in use on this machine (another job, or another tenant of this server: each "
                "needs its own port); pick a free one (e.g. MASTER_PORT=29600), or unset MASTER_PORT and torchrun "
                "picks one") from None


def launch_command(script: str | os.PathLike[str], args: Sequence[str] = (), *, nproc: int | None = None,
                   devices: object = None, nnodes: int = 1, node_rank: int | None = None,
                   rdzv_endpoint: str | None = None, rdzv_id: str = "intelrt", via: str = "torchrun",
                   module: bool = False, backend: str = AUTO, strict: bool = False,
                   env: Mapping[str, str] | None = None, host: PluginHost | None = None,
                   hang_timeout: float = DEFAULT_HANG_TIMEOUT_S) -> LaunchCommand:
    """Decide the launcher command and environment for ``script`` without running anything.
    ``hang_timeout``: seconds a rank may keep the others waiting in a collective before the job is
    stopped, naming it (:mod:`intelrt.training.rank_watch`); 0 runs the script unwatched."""
    if isinstance(hang_timeout, bool) or not isinstance(hang_timeout, (int, float)) or not hang_timeout >= 0 \
            or hang_timeout == float("inf"):
        raise ConfigurationError(f"hang_timeout must be a finite number of seconds >= 0 (0: not watched), got "
                                 f"{hang_timeout!r}")
    if via not in VIA:
        raise ConfigurationError(f"via={via!r}: use one of {', '.join(VIA)}")
    nnodes = _check_int("nnodes", nnodes, 1)
    if node_rank is not None:
        node_rank = _check_int("node_rank", node_rank, 0)
        if node_rank >= nnodes:
            raise ConfigurationError(f"node_rank {node_rank} is not below nnodes {nnodes}")
    if nnodes > 1 and not rdzv_endpoint:
        raise ConfigurationError(f"nnodes={nnodes}: several nodes meet at a rendezvous; pass --rdzv-endpoint "
                                 "HOST:PORT of the first node")
    if rdzv_endpoint:
        _endpoint(rdzv_endpoint)
    script = os.fspath(script)
    if not module and not Path(script).is_file():
        raise ConfigurationError(f"{script}: no such script (pass -m/--module to run a module by name)")
    if not all(isinstance(a, str) for a in args):
        raise ConfigurationError("script arguments must be strings")
    env = dict(os.environ) if env is None else dict(env)
    host = host or get_host()
    plan = plan_backend(backend=backend, devices=devices, strict=strict, env=env, host=host)
    visible = len(plan.request.devices) if plan.request.devices else max(plan.backend.device_count, 1)
    if nproc is None:
        nproc = visible
    nproc = _check_int("nproc", nproc, 1)
    if plan.device != "cpu" and nproc > visible:
        raise ConfigurationError(f"nproc={nproc}, but only {visible} {plan.backend.name} device(s) are visible to "
                                 "this run: one process per device. Lower --nproc, or select more --devices.")

    findings = list(plan.findings)
    stacks = sorted(host.written_by_stack(plan.backend, env))
    if stacks:  # the vendor stack's own defaults in this process: not the user's, not for the ranks (C2)
        shown = ", ".join(f"{name}={env[name]}" for name in stacks)
        findings.append(Finding("info", f"left out the {plan.backend.name} stack's own values",
                                f"{shown} appeared in this process after intelrt was imported, written by the "
                                f"{plan.backend.name} software stack when it loaded: they are not yours, so the "
                                "launch does not keep them as your settings nor pass them to the ranks", claim="C2"))
        env = {name: value for name, value in env.items() if name not in stacks}
    wanted: list[tuple[str, EnvVar]] = []
    for plugin, item in host.launch_env(plan.backend, plan, nproc, env):
        if isinstance(item, EnvVar):
            wanted.append((plugin, item))
        else:
            findings.append(item)
    launch_settings, env_findings = resolve_env(wanted, env, host.describe)
    # variables only the planning process can use (started=False) are not the ranks'
    settings = _merge_env([s for s in plan.env if s.started], launch_settings, host)
    findings.extend(env_findings)
    errors = [f for f in findings if f.severity == "error"]
    if errors:
        raise PlanError("refusing to launch: " + "; ".join(f"{f.title} — {f.detail} Fix: {f.fix}" for f in errors))

    final_env = child_env(settings, env)
    master = (final_env.get("MASTER_ADDR") or "127.0.0.1", final_env["MASTER_PORT"]) \
        if final_env.get("MASTER_PORT") else None
    if via == "torchrun":
        argv = _torchrun_argv(nproc, nnodes, node_rank, rdzv_endpoint, rdzv_id, master)
    else:
        argv = _accelerate_argv(nproc, nnodes, node_rank, rdzv_endpoint, master)
    if hang_timeout > 0:  # every rank runs its script under the heartbeat (rank_watch), as a module of the launcher
        argv += ["--module", "intelrt.training.rank_watch"] + (["--module"] if module else [])
    elif module:
        argv.append("--module")
    argv += [script, *args]
    return LaunchCommand(argv=tuple(argv), nproc=nproc, nnodes=nnodes, via=via, plan=plan, env=tuple(settings),
                         findings=tuple(findings), left_out=tuple(stacks), hang_timeout=float(hang_timeout))


def launch(script: str | os.PathLike[str], args: Sequence[str] = (), *, dry_run: bool = False,
           **options: Any) -> LaunchCommand:
    """Run ``script`` with one process per device (see :func:`launch_command` for ``options``).

    ``dry_run=True`` only decides: print the result to see the exact command and environment.
    Otherwise the launcher runs to completion; its exit status is in ``returncode``.
    """
    command = launch_command(script, args, **options)
    if dry_run:
        return command
    for finding in command.findings:
        if finding.severity == "warning":
            log.warning("%s — %s Fix: %s", finding.title, finding.detail, finding.fix)
    log.info("launching: %s", command.shell())
    process, beats = command.start()
    hang = command.watch(process, beats)
    if hang is not None:
        log.error("intelrt launch: %s", hang)
    return replace(command, returncode=process.returncode, hang=hang)
