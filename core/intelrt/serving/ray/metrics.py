"""``GET /metrics`` of a replicated server: each replica's Prometheus exposition (its app's own
``/metrics``) parsed with ``prometheus_client``'s parser and merged into one, every sample with a
``replica`` label (Ray Serve's replica id, as Ray's own metrics label replicas), plus
``intelrt_replica_up``. Sum over ``replica`` in PromQL for the server's totals."""

from __future__ import annotations

from collections.abc import Iterator, Mapping

from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.metrics_core import Metric
from prometheus_client.parser import text_string_to_metric_families

from ..metrics import CONTENT_TYPE

__all__ = ["CONTENT_TYPE", "merge", "replica_ids", "replica_label"]

REPLICA_LABEL = "replica"
UP = "intelrt_replica_up"


def replica_label(full_id: str) -> str:
    """The replica's own id from Ray's full id (``SERVE_REPLICA::app#deployment#ID`` → ``ID``)."""
    return full_id.rsplit("#", 1)[-1]


def replica_ids(app: str, deployment: str) -> list[str]:
    """The full ids of ``deployment``'s live replicas: the names Ray gives their actors
    (``ReplicaID.to_full_id_str()``, ``ray/serve/_private/deployment_state.py``), in Serve's namespace."""
    import ray
    from ray.serve._private.common import DeploymentID
    from ray.serve._private.constants import SERVE_NAMESPACE
    from ray.serve.request_router import ReplicaID

    prefix = ReplicaID("", DeploymentID(name=deployment, app_name=app)).to_full_id_str()
    return sorted(a["name"] for a in ray.util.list_named_actors(all_namespaces=True)
                  if a.get("namespace") == SERVE_NAMESPACE and a["name"].startswith(prefix))


class _Merged:
    def __init__(self, answers: Mapping[str, bytes | None]) -> None:
        self.answers = answers

    def collect(self) -> Iterator[Metric]:
        families: dict[str, Metric] = {}
        up = Metric(UP, "1 when the replica answered the ingress's metrics request, 0 when it did not", "gauge")
        for full_id, text in sorted(self.answers.items()):
            label = replica_label(full_id)
            up.add_sample(UP, {REPLICA_LABEL: label}, 0.0 if text is None else 1.0)
            if text is None:
                continue
            for family in text_string_to_metric_families(text.decode("utf-8")):
                merged = families.setdefault(family.name, Metric(family.name, family.documentation, family.type))
                for sample in family.samples:
                    merged.add_sample(sample.name, {**sample.labels, REPLICA_LABEL: label}, sample.value,
                                      sample.timestamp, sample.exemplar)
        yield up
        yield from families.values()


def merge(answers: Mapping[str, bytes | None]) -> bytes:
    """One exposition of every replica's (``None``: the replica did not answer)."""
    registry = CollectorRegistry(auto_describe=False)
    registry.register(_Merged(answers))
    return generate_latest(registry)
