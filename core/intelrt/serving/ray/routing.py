"""Which replica takes a request: Ray Serve's own prefix-aware LLM router.

``ray.serve.llm.request_router.PrefixCacheAffinityRouter`` keeps a prefix tree of the prompts each
replica was sent and sends a request to the replica holding the longest match of its text while
the load is balanced (below a match rate of 10 %: the replica with the smallest tree), otherwise
Ray's power-of-two-choices (the less loaded of two) — the policy of llm-d and SGLang's router,
and the one that makes intelrt's per-replica prefix cache pay off. This subclass, through Ray's
``RequestRouter`` extension point, changes only what that router cannot handle:

- a request without text (``/v1/models``, ``/tokenize`` of token ids, a chat of images) goes to the
  less loaded of two (the parent would divide by its empty text's length);
- a request pinned to a replica (the ingress's ``/metrics`` asks every replica) goes to that one;
- with one replica there is nothing to choose: the parent's two prefix-tree calls per request
  (``ray.get`` on its tree actor, one request after another on the router's loop) are skipped, which
  at 128 requests arriving together is seconds of time to first token on a loaded host.
"""

from __future__ import annotations

import importlib
import logging
from typing import TYPE_CHECKING, Any

from ray.serve._private.request_router import PowerOfTwoChoicesRequestRouter
from ray.serve.request_router import PendingRequest, ReplicaID, ReplicaResult, RunningReplica

from .forwarding import ForwardedRequest


def _imported_keeping_root_logging(module: str) -> Any:
    """``module`` imported, the root logger's handlers left as they were: ray.llm's serve package
    adds a JSON handler to the root logger when first imported (``ray/llm/_internal/serve/
    observability/__init__.py``: ``setup_logging()``), which would reformat every log line of the
    process that imports intelrt's router."""
    kept = list(logging.root.handlers)
    try:
        return importlib.import_module(module)
    finally:
        for handler in [h for h in logging.root.handlers if h not in kept]:
            logging.root.removeHandler(handler)


# The class ray.serve.llm.request_router.PrefixCacheAffinityRouter publishes (a bare subclass of it): that
# public module's package imports vLLM or SGLang at import time (ray/serve/llm/__init__.py), which intelrt
# does not need.
if TYPE_CHECKING:
    from ray.llm._internal.serve.routing_policies.prefix_aware.prefix_aware_router import (
        PrefixCacheAffinityRouter,
    )
else:
    PrefixCacheAffinityRouter = _imported_keeping_root_logging(
        "ray.llm._internal.serve.routing_policies.prefix_aware.prefix_aware_router").PrefixCacheAffinityRouter


def _forwarded(pending: PendingRequest | None) -> ForwardedRequest | None:
    if pending is None or not pending.args:
        return None
    first = pending.args[0]
    return first if isinstance(first, ForwardedRequest) else None


class IntelrtRequestRouter(PrefixCacheAffinityRouter):
    """Ray's ``PrefixCacheAffinityRouter``, plus pinned and text-less requests (see the module)."""

    def _has_text(self, pending: PendingRequest) -> bool:
        return bool(self._extract_text_from_request(pending)) \
            if (forwarded := _forwarded(pending)) is not None and forwarded.prompt is not None else False

    async def choose_replicas(self, candidate_replicas: list[RunningReplica],
                              pending_request: PendingRequest | None = None) -> list[Any]:
        """Ranks of candidate replicas (lists of ``RunningReplica``, best first, as Ray's routers return them)."""
        forwarded = _forwarded(pending_request)
        if forwarded is not None and forwarded.replica is not None:
            return [[r for r in candidate_replicas if r.replica_id.to_full_id_str() == forwarded.replica]]
        if len(candidate_replicas) <= 1:
            return [list(candidate_replicas)]
        if pending_request is None or not self._has_text(pending_request):
            chosen: list[Any] = await PowerOfTwoChoicesRequestRouter.choose_replicas(
                self, candidate_replicas=candidate_replicas, pending_request=pending_request)  # type: ignore[arg-type]
            return chosen
        chosen = await super().choose_replicas(candidate_replicas, pending_request)
        return chosen

    def on_request_routed(self, pending_request: PendingRequest, replica_id: ReplicaID, result: ReplicaResult) -> None:
        forwarded = _forwarded(pending_request)
        if forwarded is not None and forwarded.replica is None and len(self._replicas) > 1 \
                and self._has_text(pending_request):
            super().on_request_routed(pending_request, replica_id, result)


def router_config(**options: Any) -> dict[str, Any]:
    """The deployment's ``request_router_config``: this router, with ``options`` for Ray's
    ``initialize_state`` (``imbalanced_threshold``, ``match_rate_threshold``, eviction …)."""
    return {"request_router_class": f"{__name__}.IntelrtRequestRouter", "request_router_kwargs": options}
