"""One Ray Serve replica: the model loaded as planned in this process (Ray has set the backend's
visibility variable to the devices it assigned before this process imported torch), the same
FastAPI app as plain ``intelrt serve`` (:func:`intelrt.serving.server.engine_app`), warmed up before
Ray routes it a request.

Ray Serve supervises it: ``check_health`` fails when the decode thread has failed (Ray then
replaces the replica); on a rolling update or a scale-down Ray stops routing to it and waits up to
``graceful_shutdown_timeout_s`` for its requests to finish (the drain) before ``__del__`` stops the
app. A replica that cannot start raises naming itself — node, devices — and the reason; Ray keeps
the other replicas serving and retries it (the deployment's status message carries the reason).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from .forwarding import ForwardedRequest, Message, run_app

if TYPE_CHECKING:
    from fastapi import FastAPI

log = logging.getLogger("intelrt.serving")


@dataclass(frozen=True)
class ReplicaSpec:
    """What every replica loads and serves (pickled by Ray to each replica's process)."""

    model: str
    plan_options: dict[str, Any] = field(default_factory=dict)
    """:func:`intelrt.load`'s options (backend, dtype … — not ``devices``: Ray assigns them)."""
    app_options: dict[str, Any] = field(default_factory=dict)
    """:func:`intelrt.serving.server.engine_app`'s options (model name, limits, API key …)."""


class ReplicaStartError(RuntimeError):
    """This replica could not load or warm up its model; the message names it and says why."""


def where_am_i() -> str:
    """``replica ID on node IP (GPU 2,3)``: this replica as Ray placed it."""
    import ray
    from ray import serve

    context = ray.get_runtime_context()
    try:
        tag = serve.get_replica_context().replica_tag
    except Exception:  # noqa: BLE001 - outside a replica (a test building one by hand)
        tag = "?"
    assigned = {name: ids for name, ids in context.get_accelerator_ids().items() if ids}
    devices = "; ".join(f"{name} {','.join(map(str, ids))}" for name, ids in assigned.items()) or "CPU"
    node = ray.util.get_node_ip_address()
    return f"replica {tag} on node {node} ({devices}, pid {os.getpid()})"


class ReplicaServer:
    """The deployment class of the model's replicas (:func:`intelrt.serving.ray.application.build_application`
    makes it a Ray Serve deployment with the layout's resources)."""

    async def __init__(self, spec: ReplicaSpec) -> None:  # type: ignore[misc]  # Ray Serve awaits it
        self.where = where_am_i()
        self.lifespan = contextlib.AsyncExitStack()
        try:
            self.app = await asyncio.to_thread(_build, spec)
            # the app's lifespan (its decode thread) entered directly, not through uvicorn's LifespanOn as
            # Ray Serve's ingress wrapper does: that one logs a start-up error and leaves only "failed"
            await self.lifespan.enter_async_context(self.app.router.lifespan_context(self.app))
            decode_thread = self.app.state.intelrt.decode_thread
            if decode_thread is not None:
                await asyncio.to_thread(decode_thread.ready.wait)
                if decode_thread.failure is not None:
                    raise RuntimeError(decode_thread.failure)
        except Exception as exc:
            raise ReplicaStartError(f"intelrt {self.where} could not start: {type(exc).__name__}: {exc}") from exc
        log.info("intelrt %s: ready", self.where)

    async def handle_http(self, request: ForwardedRequest) -> AsyncIterator[list[Message]]:
        """One HTTP request through this replica's app, its ASGI messages in batches."""
        async for batch in run_app(self.app, request):
            yield batch

    def check_health(self) -> None:
        """Ray Serve's health check: a replica whose decode thread has failed is replaced."""
        decode_thread = self.app.state.intelrt.decode_thread
        if decode_thread is not None and decode_thread.failure is not None:
            raise RuntimeError(f"intelrt {self.where}: {decode_thread.failure}")

    async def __del__(self) -> None:
        lifespan = getattr(self, "lifespan", None)
        if lifespan is not None:
            await lifespan.aclose()


def _build(spec: ReplicaSpec) -> FastAPI:
    import intelrt

    from ..server import engine_app

    loaded = intelrt.load(spec.model, **spec.plan_options)
    log.info("%s", loaded.plan)
    return engine_app(loaded, **spec.app_options)
