"""Which devices each Ray Serve replica gets, what it asks Ray for, and its plan — decided without
Ray and without loading anything, so ``intelrt plan MODEL --replicas N --simulate hpu:8`` shows it
for a machine you do not have.

Replica ``i`` of ``N`` takes the ``i``-th group of ``K`` consecutive device ids (``K``:
``--devices-per-replica``, default 1: a replica per device, as Intel's llm-scaler serves Arc
cards; a group only for a model that needs several devices). It asks Ray for ``K``
of the backend's Ray resource (:attr:`~intelrt.hooks.backend.Backend.ray_resource`: ``GPU`` for
Intel and NVIDIA GPUs, ``HPU`` for Gaudi) and one CPU; Ray then sets the backend's visibility
variable (``ZE_AFFINITY_MASK``, ``HABANA_VISIBLE_MODULES``, ``CUDA_VISIBLE_DEVICES``) to the ids it
assigned before the replica's process imports torch — the variables the replica's plan below
shows. A group the hardware cannot run together is refused with the backend's reason
(:meth:`~intelrt.hooks.backend.Backend.device_group_problem`: Gaudi groups are 2 or 4 modules of a
supported set, or the whole server). Where one process drives one device (Gaudi,
``Backend.indexed_devices`` False), a replica of ``K`` devices is ``K`` tensor-parallel processes.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from ...errors import ConfigurationError, PlanError
from ...hooks.options import DeviceId, normalize_devices
from ...hooks.types import EnvVar
from ..limits import DRAIN_TIMEOUT_S

if TYPE_CHECKING:
    from ...hooks.plan import Plan

TARGET_ONGOING = 32
"""Autoscaling: requests per replica Ray aims at (its default, 2, suits a model answering one at a time)."""


@dataclass(frozen=True)
class Replication:
    """How many replicas, and how Ray treats them."""

    replicas: int = 1
    min_replicas: int | None = None
    """With ``max_replicas``: Ray Serve autoscales between the two (``replicas`` to start with)."""
    max_replicas: int | None = None
    target_ongoing_requests: int = TARGET_ONGOING
    drain_timeout: float = DRAIN_TIMEOUT_S
    """Ray's ``graceful_shutdown_timeout_s``: a stopping replica's requests get this long to finish."""
    router_options: dict[str, Any] = field(default_factory=dict)
    """``PrefixCacheAffinityRouter.initialize_state``'s options."""

    def check(self) -> None:
        if self.replicas < 1:
            raise ConfigurationError(f"replicas={self.replicas}: serve at least one replica")
        if (self.min_replicas is None) != (self.max_replicas is None):
            raise ConfigurationError("autoscaling needs both min_replicas and max_replicas (--min-replicas and "
                                     "--max-replicas), or neither")
        if self.min_replicas is not None and self.max_replicas is not None and not (
                0 <= self.min_replicas <= self.replicas <= self.max_replicas and self.max_replicas >= 1):
            raise ConfigurationError(f"autoscaling bounds {self.min_replicas}..{self.max_replicas} must hold the "
                                     f"{self.replicas} replica(s) it starts with (0 <= min <= replicas <= max, max >= 1)")

    @property
    def most(self) -> int:
        return self.max_replicas if self.max_replicas is not None else self.replicas

    def scaling(self) -> dict[str, Any]:
        if self.max_replicas is None:
            return {"num_replicas": self.replicas}
        return {"autoscaling_config": {"min_replicas": self.min_replicas, "max_replicas": self.max_replicas,
                                       "initial_replicas": self.replicas,
                                       "target_ongoing_requests": self.target_ongoing_requests}}


CPUS_PER_REPLICA = 1
"""CPUs each replica asks Ray for: its event loop and decode thread (a CPU replica computes on it too)."""


@dataclass(frozen=True)
class ReplicaSlot:
    """One replica: its devices, what it asks Ray for, its processes, variables and plan."""

    index: int
    devices: tuple[DeviceId, ...]
    """Device ids in the node's enumeration (empty on the CPU)."""
    actor_options: dict[str, Any]
    """Ray Serve's ``ray_actor_options``: ``num_cpus``, and ``num_gpus`` or ``resources``."""
    processes: int
    """Processes the replica runs: one, or one per device where a process drives one device."""
    env: dict[str, str]
    """The variables its processes get (Ray sets the visibility variable to the same ids)."""
    plan: Plan
    blocked: str | None
    """Why ``intelrt serve --replicas`` cannot run this replica yet (``None``: it can)."""

    def to_dict(self) -> dict[str, Any]:
        return {"index": self.index, "devices": list(self.devices), "actor_options": self.actor_options,
                "processes": self.processes, "env": self.env, "blocked": self.blocked, "plan": self.plan.to_dict()}


@dataclass(frozen=True)
class ReplicaLayout:
    backend: str
    resource: str | None
    per_replica: int
    """Devices per replica (0 on the CPU)."""
    replicas: tuple[ReplicaSlot, ...]
    idle: tuple[DeviceId, ...]
    """Devices no replica takes."""

    @property
    def blocked(self) -> str | None:
        return next((r.blocked for r in self.replicas if r.blocked), None)

    def to_dict(self) -> dict[str, Any]:
        return {"backend": self.backend, "resource": self.resource, "devices_per_replica": self.per_replica,
                "idle": list(self.idle), "replicas": [r.to_dict() for r in self.replicas]}

    def lines(self) -> list[str]:
        """Each replica's devices, Ray resources, processes and variables; its plan's decisions
        where they differ from replica 0's (whose whole plan the caller prints)."""
        first = self.replicas[0]
        where = (f"{self.per_replica} {self.backend} device(s) each" if self.per_replica else "on the CPU")
        out = [f"replicas: {len(self.replicas)} on {self.backend}, {where}; each asks Ray for "
               f"{_resources_text(first.actor_options)}"]
        if self.idle:
            out.append(f"idle devices: {_ids(self.idle)} (no replica takes them)")
        decided = _decisions(first.plan)
        for slot in self.replicas:
            head = f"replica {slot.index}: devices {_ids(slot.devices) or '-'}"
            if slot.processes > 1:
                head += f", {slot.processes} processes (one per device, tensor parallel)"
            out.append(head)
            shown = " ".join(f"{k}={v}" for k, v in sorted(slot.env.items()))
            out.append(f"  variables: {shown or '(none)'}")
            differ = {k: v for k, v in _decisions(slot.plan).items() if decided.get(k) != v}
            out.append("  plan: " + (", ".join(f"{k}={v}" for k, v in differ.items()) + " (differs from replica 0)"
                                     if differ else "as replica 0's" if slot.index else "shown above"))
        if self.blocked:
            out.append(not_yet(self.blocked))
        return out


def _ids(ids: Sequence[DeviceId]) -> str:
    return ",".join(str(i) for i in ids)


def ray_resources(options: dict[str, Any]) -> dict[str, float]:
    """Ray's resource name → amount of a replica's ``ray_actor_options``."""
    return {"CPU": options.get("num_cpus", 0), "GPU": options.get("num_gpus", 0), **options.get("resources", {})}


def _resources_text(options: dict[str, Any]) -> str:
    return ", ".join(f"{k} {v:g}" for k, v in ray_resources(options).items() if v)


def _decisions(plan: Plan) -> dict[str, str]:
    return {name: str(d["value"]) for name, d in plan.to_dict()["decisions"].items()}


def actor_options(resource: str | None, devices: int) -> dict[str, Any]:
    """``ray_actor_options`` for a replica of ``devices`` devices of Ray resource ``resource``
    (``num_gpus`` for ``GPU``: Ray refuses ``GPU`` in ``resources``)."""
    options: dict[str, Any] = {"num_cpus": CPUS_PER_REPLICA}
    if resource == "GPU":
        options["num_gpus"] = devices
    elif resource is not None:
        options["resources"] = {resource: devices}
    return options


def replica_processes(devices: int, indexed_devices: bool) -> int:
    """Processes a replica of ``devices`` devices runs: one per device where a process drives one
    device (``Backend.indexed_devices`` False: Gaudi, H6), else one."""
    return devices if devices > 1 and not indexed_devices else 1


def not_yet(blocked: str) -> str:
    """What ``intelrt serve --replicas`` says of a layout it cannot run yet."""
    return f"intelrt serve --replicas: not yet — {blocked}"


def refuse_blocked(blocked: str | None) -> None:
    """A ``ConfigurationError`` (:func:`not_yet`) when a layout cannot be served yet."""
    if blocked:
        raise ConfigurationError(not_yet(blocked))


def group_blocked(backend: str, devices: int, processes: int) -> str | None:
    """Why ``intelrt serve --replicas`` cannot run such a replica yet (``None``: it can)."""
    if processes <= 1:
        return None
    return (f"a replica of {devices} {backend} devices runs {processes} tensor-parallel processes (one process drives "
            f"one {backend} device), and intelrt serve runs one process per replica; serve with "
            "--devices-per-replica 1 (a replica per device)")


def plan_replicas(model: str | os.PathLike[str], replicas: int, devices_per_replica: int | None = None,
                  **plan_kwargs: Any) -> ReplicaLayout:
    """The layout of ``replicas`` replicas of ``model`` on this machine (or the simulated one):
    each replica's devices, Ray resources, processes, variables and plan. ``plan_kwargs``: the
    options of :func:`intelrt.plan` (``devices=`` is the pool the groups are cut from)."""
    from ...planning.planner import plan

    if replicas < 1:
        raise ConfigurationError(f"replicas={replicas}: serve with at least one replica")
    if devices_per_replica is not None and devices_per_replica < 1:
        raise ConfigurationError(f"devices_per_replica={devices_per_replica}: a replica takes at least one device")
    base = plan(model, **plan_kwargs)
    backend = base.backend
    resource = backend.ray_resource
    if resource is None:
        if devices_per_replica is not None:
            raise ConfigurationError(f"devices_per_replica={devices_per_replica}: the {backend.name} backend has no "
                                     "devices to group; each replica asks Ray for CPUs")
        slots = tuple(ReplicaSlot(i, (), actor_options(None, 0), 1, base.env_to_set(), base, None)
                      for i in range(replicas))
        return ReplicaLayout(backend.name, None, 0, slots, ())
    pool: tuple[DeviceId, ...] = normalize_devices(plan_kwargs.get("devices")) or tuple(range(backend.device_count))
    per = devices_per_replica or 1
    if replicas * per > len(pool):
        raise PlanError(f"{replicas} replica(s) of {per} {backend.name} device(s) need {replicas * per} devices, and "
                        f"{len(pool)} are {'selected' if plan_kwargs.get('devices') else 'visible'} "
                        f"({_ids(pool) or 'none'}): serve fewer replicas, or fewer devices per replica")
    processes = replica_processes(per, backend.indexed_devices)
    slots_list: list[ReplicaSlot] = []
    for index in range(replicas):
        group = pool[index * per:(index + 1) * per]
        problem = backend.device_group_problem(group) if per > 1 else None
        if problem is not None:
            raise PlanError(f"replica {index} would take {backend.name} devices {_ids(group)}: {problem}; choose "
                            f"--replicas / --devices-per-replica so that every group is supported")
        replica_plan = plan(model, **{**plan_kwargs, "devices": list(group)})
        env = replica_plan.env_to_set()
        blocked = group_blocked(backend.name, per, processes)
        if processes > 1:
            launched = backend.launch_environment(replica_plan, processes, replica_plan.child_environment()) or ()
            env.update({item.name: item.value for item in launched if isinstance(item, EnvVar)})
        slots_list.append(ReplicaSlot(index, group, actor_options(resource, per), processes, env, replica_plan,
                                      blocked))
    return ReplicaLayout(backend.name, resource, per, tuple(slots_list), pool[replicas * per:])
