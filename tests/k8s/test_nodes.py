"""Node inventory from Kubernetes nodes: resources, GPU model, readiness, topology, and changes."""

from __future__ import annotations

import json
from typing import Any

import pytest
from kubernetes.client import ApiClient, Configuration, V1Node

from libs.protocol.events import NodeLost, NodeReported
from services.orchestrator.adapters.k8s_nodes import NodeInventory, changes, node_report, topology_of
from tests.support.k8s_api import FakeKubernetes, serving


def node_dict(
    name: str, *, gpus: str | None = "8", ready: str = "True", cordoned: bool = False
) -> dict[str, Any]:
    allocatable = {"cpu": "63500m", "memory": "515830Mi"}
    if gpus is not None:
        allocatable["nvidia.com/gpu"] = gpus
    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {
            "name": name,
            "labels": {
                "nvidia.com/gpu.product": "NVIDIA-A100-SXM4-80GB",
                "topology.kubernetes.io/zone": "z1",
                "kubernetes.io/hostname": name,
            },
        },
        "spec": {"unschedulable": cordoned},
        "status": {
            "allocatable": allocatable,
            "addresses": [
                {"type": "Hostname", "address": name},
                {"type": "InternalIP", "address": "10.1.0.7"},
            ],
            "conditions": [
                {
                    "type": "Ready",
                    "status": ready,
                    "reason": "KubeletNotReady" if ready != "True" else "",
                    "message": "PLEG is not healthy" if ready != "True" else "",
                }
            ],
        },
    }


def node(name: str, **options: Any) -> V1Node:
    result: V1Node = ApiClient().deserialize(
        json.dumps(node_dict(name, **options)), "V1Node", "application/json"
    )
    return result


def test_a_gpu_node_is_reported_with_its_allocatable_resources() -> None:
    report = node_report(node("gpu-a"))
    assert (report.name, report.address, report.cpu, report.memory_mb, report.gpus) == (
        "gpu-a",
        "10.1.0.7",
        63,
        515830,
        8,
    )
    assert report.gpu_model == "NVIDIA-A100-SXM4-80GB"
    assert (report.healthy, report.reason) == (True, "")
    assert topology_of(node("gpu-a")) == {"topology.kubernetes.io/zone": "z1"}


@pytest.mark.parametrize(
    ("options", "healthy", "reason"),
    [
        ({}, True, ""),
        ({"ready": "False"}, False, "not ready: KubeletNotReady: PLEG is not healthy"),
        ({"cordoned": True}, False, "cordoned"),
        ({"gpus": None}, True, ""),
    ],
    ids=["ready", "not ready", "cordoned", "cpu only"],
)
def test_readiness_is_mapped(options: dict[str, Any], healthy: bool, reason: str) -> None:
    report = node_report(node("n", **options))
    assert (report.healthy, report.reason) == (healthy, reason)


def test_changes_report_new_and_changed_nodes_and_lose_removed_ones() -> None:
    known, first = changes({}, [node("a"), node("b")])
    assert sorted(e.name for e in first) == ["a", "b"]
    same, none = changes(known, [node("a"), node("b")])
    assert none == []
    _, events = changes(same, [node("a", ready="False")])
    assert [(type(e).__name__, e.name) for e in events] == [("NodeReported", "a"), ("NodeLost", "b")]
    assert isinstance(events[0], NodeReported)
    assert not events[0].healthy
    assert isinstance(events[1], NodeLost)


async def test_the_inventory_reads_nodes_through_the_api() -> None:
    fake = FakeKubernetes()
    await fake.put(("api/v1", "nodes", None), node_dict("gpu-a"))
    async with serving(fake) as url:
        config = Configuration()
        config.host = url
        inventory = NodeInventory(ApiClient(config))
        events = await inventory.refresh()
        assert [(e.name, e.gpus) for e in events if isinstance(e, NodeReported)] == [("gpu-a", 8)]
        assert await inventory.refresh() == []
        await fake.remove(("api/v1", "nodes", None), "gpu-a")
        lost = await inventory.refresh()
        assert [type(e).__name__ for e in lost] == ["NodeLost"]
