"""The Ray Serve application (an ingress and the model's replicas) and ``intelrt serve --replicas``:
start or join Ray, deploy, say where it serves and what each replica is doing, drain on ``SIGTERM``."""

from __future__ import annotations

import logging
import os
import signal
import threading
from collections.abc import Callable
from typing import Any

from ...errors import ConfigurationError
from .layout import ReplicaLayout, Replication, plan_replicas, ray_resources, refuse_blocked
from .replica import ReplicaServer, ReplicaSpec
from .routing import router_config

log = logging.getLogger("intelrt.serving")

APP_NAME = "intelrt"
INGRESS = "IntelrtIngress"
REPLICAS = "IntelrtReplica"
REPLICA_MAX_ONGOING = 1024
"""Requests Ray lets one replica hold at once: past its engine's rows and queue, the replica's app answers
``429`` itself (Ray's default, 5, would queue every request past the fifth in the router)."""
INGRESS_MAX_ONGOING = 100_000
"""Requests the ingress forwards at once (each holds one until its answer ends)."""
STATUS_PERIOD_S = 2.0


def build_application(model: str, actor_options: dict[str, Any], replication: Replication, *,
                      plan_options: dict[str, Any] | None = None, app_options: dict[str, Any] | None = None) -> Any:
    """The Ray Serve application: the ingress (:mod:`.ingress`) bound to the model's deployment
    (:class:`~.replica.ReplicaServer`, each replica asking Ray for ``actor_options``' resources,
    routed by :mod:`.routing`). Run it with ``serve.run(app, name=APP_NAME)``."""
    from ray import serve

    from .ingress import Ingress

    replication.check()
    options = dict(plan_options or {})
    options.pop("devices", None)  # Ray assigns each replica its devices and sets the visibility variable
    spec = ReplicaSpec(model, options, dict(app_options or {}))
    replica = serve.deployment(
        name=REPLICAS, ray_actor_options=actor_options, max_ongoing_requests=REPLICA_MAX_ONGOING,
        graceful_shutdown_timeout_s=replication.drain_timeout,
        request_router_config=router_config(**replication.router_options), **replication.scaling())(ReplicaServer)
    ingress = serve.deployment(name=INGRESS, num_replicas=1, ray_actor_options={"num_cpus": 0},
                               max_ongoing_requests=INGRESS_MAX_ONGOING)(serve.ingress()(Ingress))
    return ingress.bind(replica.bind(spec), REPLICAS)


def app_builder(args: dict[str, Any]) -> Any:
    """The application from a Ray Serve config file (``serve deploy``, KubeRay's ``serveConfigV2``):
    ``import_path: intelrt.serving.ray.application:app_builder`` with ``args``: ``model``, ``backend``
    (``cuda``, ``xpu``, ``hpu`` or ``cpu``: the head node that builds the application may have none of
    the devices, so it is named, not detected), ``replicas``, ``min_replicas``, ``max_replicas``,
    ``devices_per_replica``, ``drain_timeout``, ``plan_options`` (``intelrt.load``'s: ``dtype`` …)
    and ``app_options`` (the server's: ``model_name``, ``max_batch`` …)."""
    from ...host.manager import get_host
    from .layout import actor_options, group_blocked, replica_processes

    unknown = set(args) - {"model", "backend", "replicas", "min_replicas", "max_replicas", "devices_per_replica",
                           "drain_timeout", "plan_options", "app_options"}
    if unknown or "model" not in args or "backend" not in args:
        raise ConfigurationError(f"intelrt's app_builder takes model and backend (and replicas, min_replicas, "
                                 f"max_replicas, devices_per_replica, drain_timeout, plan_options, app_options); got "
                                 f"{sorted(args)}")
    backend = next((cls for _, cls in get_host().backend_classes() if cls.name == args["backend"]), None)
    if backend is None:
        names = sorted(cls.name for _, cls in get_host().backend_classes())
        raise ConfigurationError(f"backend {args['backend']!r} is not one of {', '.join(names)}")
    per = int(args.get("devices_per_replica") or 1)
    refuse_blocked(group_blocked(backend.name, per, replica_processes(per, backend.indexed_devices)))
    replication = Replication(int(args.get("replicas", 1)), args.get("min_replicas"), args.get("max_replicas"),
                              drain_timeout=float(args.get("drain_timeout", Replication.drain_timeout)))
    plan_options = {**dict(args.get("plan_options") or {}), "backend": backend.name}
    return build_application(str(args["model"]), actor_options(backend.ray_resource, per if backend.ray_resource
                                                               else 0), replication, plan_options=plan_options,
                             app_options=dict(args.get("app_options") or {}))


def replica_report(app: str = APP_NAME) -> tuple[int, int, str]:
    """(running replicas, target, the deployment's message: why a replica failed to start)."""
    from ray import serve

    status = serve.status().applications.get(app)
    if status is None:
        return 0, 0, ""
    deployment = status.deployments.get(REPLICAS)
    if deployment is None:
        return 0, 0, status.message
    states = {str(getattr(k, "value", k)): v for k, v in deployment.replica_states.items()}
    running = states.get("RUNNING", 0)
    return running, sum(states.values()), deployment.message or status.message


def serve_replicas(model: str, replication: Replication, *, host: str = "127.0.0.1", port: int = 8000,
                   address: str | None = None, proxy_location: str = "EveryNode",
                   devices_per_replica: int | None = None, plan_options: dict[str, Any] | None = None,
                   app_options: dict[str, Any] | None = None, announce: Callable[[str], None] = log.info) -> int:
    """``intelrt serve MODEL --replicas N``: join the Ray cluster at ``address`` (else start Ray
    here with the devices intelrt detects), deploy, announce ``ready:`` once a replica serves, say
    which replicas fail to start and why, and on ``SIGTERM``/``SIGINT`` delete the application
    (Ray drains each replica) and return 0 (1 when no replica ever started)."""
    import ray
    from ray import serve

    from ..server import url_of

    replication.check()
    plan_options = dict(plan_options or {})
    layout = plan_replicas(model, replication.most, devices_per_replica, **plan_options)
    refuse_blocked(layout.blocked)
    started_ray = not ray.is_initialized() and address is None and "RAY_ADDRESS" not in os.environ
    if not ray.is_initialized():
        # "local": a Ray of its own; ray.init() alone would join any Ray already running on this machine
        ray.init(address="local" if started_ray else address, **(_local_resources(layout) if started_ray else {}))
    _require_resources(layout, replication)
    _require_free_name()
    serve.start(proxy_location=proxy_location, http_options={"host": host, "port": port})
    application = build_application(model, layout.replicas[0].actor_options, replication, plan_options=plan_options,
                                    app_options=app_options)
    deploying = Deploying(application)
    deploying.start()
    stop = threading.Event()
    before = {sig: signal.signal(sig, lambda *_: stop.set()) for sig in (signal.SIGINT, signal.SIGTERM)}
    name = (app_options or {}).get("model_name") or model
    announced, said = False, ""
    try:
        while not stop.wait(STATUS_PERIOD_S if announced else 0.5):
            running, total, message = replica_report()
            if running and not announced:
                announced = True
                announce(f"ready: {url_of(host, port)} — model '{name}' ({running} of {replication.replicas} "
                         "replica(s) running on Ray Serve)")
            if message and message != said and "fail" in message.lower():
                announce(f"intelrt serve: a replica did not start ({running} of {total} running): {message}")
            said = message
            if not deploying.is_alive() and deploying.failure is not None and not running:
                announce(f"intelrt serve: the application failed: {deploying.failure}")
                return 1
    finally:
        for sig, handler in before.items():
            signal.signal(sig, handler)
        announce("intelrt serve: draining: deleting the application (each replica finishes its requests, at most "
                 f"{replication.drain_timeout:g} s)")
        try:
            serve.delete(APP_NAME)
            if started_ray:
                serve.shutdown()
        except Exception as exc:  # noqa: BLE001 - the cluster went first (its head stopped): nothing left to drain
            announce(f"intelrt serve: the Ray cluster could not delete the application ({type(exc).__name__}: {exc})")
        if started_ray:
            ray.shutdown()
    return 0


def _require_free_name() -> None:
    """Refuse to replace an application another launcher deployed on the cluster joined (``serve.run``
    would redeploy it under its users)."""
    from ray import serve

    try:
        running = serve.status().applications
    except Exception:  # noqa: BLE001 - no Serve on this cluster yet: nothing to replace
        return
    if APP_NAME in running:
        raise ConfigurationError(f"this Ray cluster already serves an application named {APP_NAME!r} (another "
                                 "intelrt serve --replicas?): stop it first (`serve shutdown`, or Ctrl-C its "
                                 "launcher), or serve on another cluster")


class Deploying(threading.Thread):
    """``serve.run`` (which returns once every replica runs, or raises when none can start) on a
    thread, while the launcher reports replicas as they come."""

    def __init__(self, application: Any) -> None:
        super().__init__(name="intelrt-ray-deploy", daemon=True)
        self.application = application
        self.failure: str | None = None

    def run(self) -> None:
        from ray import serve

        try:
            serve.run(self.application, name=APP_NAME, route_prefix="/")
        except Exception as exc:  # noqa: BLE001 - reported by the launcher's loop
            self.failure = f"{type(exc).__name__}: {exc}"


def _local_resources(layout: ReplicaLayout) -> dict[str, Any]:
    """``ray.init`` resources for a Ray started here: the devices intelrt detected (Ray finds Intel
    GPUs only through ``dpctl``, and would see none without it)."""
    count = len(layout.replicas[0].plan.backend.devices)
    if layout.resource == "GPU":
        return {"num_gpus": count}
    if layout.resource is not None:
        return {"resources": {layout.resource: count}}
    return {}


def _require_resources(layout: ReplicaLayout, replication: Replication) -> None:
    """Refuse a start the cluster cannot place (Ray would wait for ever for the resources)."""
    import ray

    need_each = layout.replicas[0].actor_options
    wanted = ray_resources(need_each)
    first = replication.min_replicas if replication.min_replicas is not None else replication.replicas
    have = ray.cluster_resources()
    for resource, each in wanted.items():
        if each and have.get(resource, 0) < each * max(first, 1):
            raise ConfigurationError(
                f"{max(first, 1)} replica(s) need {each * max(first, 1):g} {resource} and the Ray cluster has "
                f"{have.get(resource, 0):g}: start Ray with them (ray start --head --num-gpus N for Intel and NVIDIA "
                "GPUs — Ray detects Intel GPUs only with dpctl installed; --resources '{\"HPU\": 8}' for Gaudi), or "
                "serve fewer replicas")
