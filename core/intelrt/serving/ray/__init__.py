"""``intelrt serve MODEL --replicas N``: the same OpenAI server as plain ``intelrt serve``, as
replicas on Ray Serve — one per device or device group, on one machine or several.

Ray Serve does the replicas' placement (each asks Ray for its devices: ``GPU`` for Intel and
NVIDIA GPUs, ``HPU`` for Gaudi, and Ray sets the visibility variable), supervision (health checks,
restarts, rolling updates that drain), routing (its prefix-aware LLM router) and HTTP ingress;
intelrt writes none of them. Modules: ``layout.py`` (each replica's devices, resources, variables
and plan; no Ray needed), ``replica.py`` (the deployment that loads the model and runs its
FastAPI app), ``forwarding.py`` (a request from the ingress to a replica), ``routing.py`` (Ray's
``PrefixCacheAffinityRouter`` through the ``RequestRouter`` extension point), ``ingress.py``
(the HTTP ingress: forwarding, retries when a replica dies, ``/metrics`` of every replica),
``metrics.py``, ``application.py`` (the application and the launcher). Needs the ``ray`` extra
(``pip install 'intelrt[ray]'``); importing this package alone needs none of it.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from ...errors import ConfigurationError
from .layout import Replication, refuse_blocked

if TYPE_CHECKING:
    from .layout import ReplicaLayout

RAY_INSTALL = "pip install 'intelrt[ray]'"
"""How to install the extra (``ray[serve]`` in the tested range)."""


def require_ray_extra(what: str = "intelrt serve --replicas") -> None:
    """Refuse clearly when Ray Serve is not installed."""
    try:
        import ray.serve  # noqa: F401
    except ImportError as exc:
        raise ConfigurationError(f"{what} runs the replicas on Ray Serve, which is not installed ({exc}): "
                                 f"{RAY_INSTALL}") from None


def plan_replicas(model: str, replicas: int, devices_per_replica: int | None = None, **plan_options: Any) -> ReplicaLayout:
    """Each replica's devices, Ray resources, variables and plan (see :mod:`.layout`; Ray not needed)."""
    from .layout import plan_replicas as layout

    return layout(model, replicas, devices_per_replica, **plan_options)


def build_application(model: str, replication: Replication, *, devices_per_replica: int | None = None,
                      plan_options: dict[str, Any] | None = None, app_options: dict[str, Any] | None = None) -> Any:
    """The Ray Serve application serving ``model`` (``serve.run(app, name="intelrt")`` runs it)."""
    require_ray_extra("intelrt.serving.ray")
    from .application import build_application as build

    layout = plan_replicas(model, replication.most, devices_per_replica, **(plan_options or {}))
    refuse_blocked(layout.blocked)
    return build(model, layout.replicas[0].actor_options, replication, plan_options=plan_options,
                 app_options=app_options)


def serve_replicas(model: str, replication: Replication, **options: Any) -> int:
    """Serve ``model`` as replicas until ``SIGTERM``/``SIGINT`` (see :func:`.application.serve_replicas`)."""
    require_ray_extra()
    from .application import serve_replicas as run

    return run(model, replication, **options)


__all__ = ["RAY_INSTALL", "Replication", "build_application", "plan_replicas", "require_ray_extra", "serve_replicas"]
