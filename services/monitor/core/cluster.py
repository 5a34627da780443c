"""What the leading monitor says for the cluster, and the questions it answers, decided from its
trackers: every node's readiness and every service's heartbeat as samples, a silent node's
`node.lost`, and a metrics history request read and checked.

Pure: the time comes in as a number, the request as the bytes received.
"""

from __future__ import annotations

import json

from libs.protocol.events import NodeLost
from libs.protocol.telemetry import MetricSample
from services.monitor.core.liveness import Liveness


def cluster_samples(liveness: Liveness, now: float) -> list[MetricSample]:
    """`pai_node_count` per node (ready or not) and `pai_service_up` per service heard."""
    samples = [
        MetricSample(name="pai_node_count", labels={"node_name": name, "ready": str(ready).lower()}, value=1)
        for name, ready in liveness.nodes_ready().items()
    ]
    samples += [
        MetricSample(name="pai_service_up", labels={"service": service}, value=1.0 if up else 0.0)
        for service, up in liveness.services_up(now).items()
    ]
    return samples


def node_lost(liveness: Liveness, node_id: str, name: str, silent: float) -> NodeLost:
    """The declaration of a node silent for ``silent`` seconds. Its id is derived from the silence
    (the node's last report), so one declared twice (by a leader replaced while paused) is one event."""
    seen = int(liveness.nodes[node_id][1])
    return NodeLost(
        event_id=f"lost-{node_id}-{seen}",
        node_id=node_id,
        name=name,
        reason=f"no report for {silent:.0f}s (limit {liveness.node_lost_after:g}s)",
    )


def history_request(data: bytes) -> tuple[float, str | None, str | None]:
    """``{"since": seconds, "node": name or null, "job_id": id or null}`` -> (since, node, job id);
    ValueError saying what is wrong."""
    request = json.loads(data or b"{}")
    if not isinstance(request, dict):
        raise ValueError("the request must be a JSON object")
    since, node, job_id = request.get("since", 0), request.get("node"), request.get("job_id")
    if not isinstance(since, int | float) or isinstance(since, bool):
        raise ValueError("since must be a number of seconds since the epoch")
    if not all(v is None or isinstance(v, str) for v in (node, job_id)):
        raise ValueError("node and job_id must be strings or null")
    return float(since), node, job_id
