"""The cluster's nodes as the scheduler needs them: NodeReported / NodeLost events from Kubernetes.

On Kubernetes the node inventory comes from the API, not from a monitor on each machine: a node's
allocatable CPU, memory and `nvidia.com/gpu`, its GPU model (the GPU feature discovery label),
its readiness (Ready condition, not cordoned) and its topology labels. `changes` compares two
listings and says what to publish: a report for every new or changed node, a loss for every node
that disappeared. `NodeInventory.nodes` reads the nodes (blocking call in a worker thread).
"""

from __future__ import annotations

import asyncio
from typing import Any

from kubernetes.client import ApiClient, CoreV1Api, V1Node
from kubernetes.utils import parse_quantity

from libs.protocol.events import NodeLost, NodeReported
from libs.protocol.subjects import node_token

GPU_RESOURCE = "nvidia.com/gpu"
GPU_MODEL_LABEL = "nvidia.com/gpu.product"
TOPOLOGY_LABELS = (
    "topology.kubernetes.io/region",
    "topology.kubernetes.io/zone",
    "pai.io/rack",
    "pai.io/cell",
)

_parse: Any = parse_quantity


def _quantity(values: dict[str, str] | None, name: str) -> float:
    raw = (values or {}).get(name)
    return float(_parse(raw)) if raw is not None else 0.0


def _address(node: V1Node) -> str:
    addresses = (node.status.addresses if node.status is not None else None) or []
    for kind in ("InternalIP", "ExternalIP", "Hostname"):
        for address in addresses:
            if address.type == kind:
                return str(address.address)
    return node.metadata.name if node.metadata is not None and node.metadata.name else ""


def _health(node: V1Node) -> tuple[bool, str]:
    if node.spec is not None and node.spec.unschedulable:
        return False, "cordoned"
    conditions = (node.status.conditions if node.status is not None else None) or []
    ready = next((c for c in conditions if c.type == "Ready"), None)
    if ready is None:
        return False, "the node has not reported a Ready condition"
    if ready.status != "True":
        return False, f"not ready: {ready.reason or ready.status}: {ready.message or ''}".rstrip(": ")
    return True, ""


def node_report(node: V1Node) -> NodeReported:
    """One node's inventory: allocatable resources, GPU model, readiness."""
    name = node.metadata.name if node.metadata is not None and node.metadata.name else ""
    allocatable = node.status.allocatable if node.status is not None else None
    labels = (node.metadata.labels if node.metadata is not None else None) or {}
    healthy, reason = _health(node)
    return NodeReported(
        node_id=node_token(name),
        name=name,
        address=_address(node),
        cpu=int(_quantity(allocatable, "cpu")),
        memory_mb=int(_quantity(allocatable, "memory") // (1024 * 1024)),
        gpus=int(_quantity(allocatable, GPU_RESOURCE)),
        gpu_model=labels.get(GPU_MODEL_LABEL),
        healthy=healthy,
        reason=reason,
    )


def topology_of(node: V1Node) -> dict[str, str]:
    """The node's topology labels (region, zone, rack, cell) for topology-aware placement."""
    labels = (node.metadata.labels if node.metadata is not None else None) or {}
    return {k: v for k, v in labels.items() if k in TOPOLOGY_LABELS}


def _same(a: NodeReported, b: NodeReported) -> bool:
    keep = {"node_id", "name", "address", "cpu", "memory_mb", "gpus", "gpu_model", "healthy", "reason"}
    return a.model_dump(include=keep) == b.model_dump(include=keep)


def changes(
    before: dict[str, NodeReported], nodes: list[V1Node]
) -> tuple[dict[str, NodeReported], list[NodeReported | NodeLost]]:
    """The new inventory and the events that move the old one to it."""
    now = {report.name: report for report in map(node_report, nodes) if report.name}
    events: list[NodeReported | NodeLost] = [
        report for name, report in now.items() if name not in before or not _same(before[name], report)
    ]
    events += [
        NodeLost(node_id=old.node_id, name=name, reason="the node was removed from the cluster")
        for name, old in before.items()
        if name not in now
    ]
    return now, events


class NodeInventory:
    """Reads the nodes and remembers the last listing, so each call returns only what changed."""

    def __init__(self, api: ApiClient) -> None:
        self._core = CoreV1Api(api)
        self.known: dict[str, NodeReported] = {}

    async def nodes(self) -> list[V1Node]:
        listed = await asyncio.to_thread(self._core.list_node)
        return list(listed.items)

    async def refresh(self) -> list[NodeReported | NodeLost]:
        self.known, events = changes(self.known, await self.nodes())
        return events
