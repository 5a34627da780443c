"""Nodes and live tasks in Kubernetes' v1 List shape, as OpenPAI's cluster pages read them:
whole documents for a healthy, an unhealthy, a cordoned and a lost node, a running and a
pending task, and another namespace."""

from __future__ import annotations

import time
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from libs.protocol.events import Event, NodeCordoned, NodeLost, NodeReported
from services.rest.core.kubernetes import node_list, pod_list
from services.rest.core.states import framework_name, task_uid
from tests.support.jobs import job_dict

T0 = datetime(2026, 11, 1, 8, 0, 0, tzinfo=UTC)


def report(node_id: str, minutes: int, **fields: Any) -> NodeReported:
    values: dict[str, Any] = {
        "node_id": node_id,
        "name": f"host-{node_id}",
        "address": f"10.0.0.{len(node_id)}",
        "cpu": 16,
        "memory_mb": 65536,
        "gpus": 2,
    }
    values.update(fields)
    return NodeReported(occurred_at=T0 + timedelta(minutes=minutes), **values)


def nodes(*events: Event) -> list[dict[str, Any]]:
    listed = node_list((event, position) for position, event in enumerate(events))
    assert {key: value for key, value in listed.items() if key != "items"} == {
        "kind": "NodeList",
        "apiVersion": "v1",
        "metadata": {"resourceVersion": ""},
    }
    items: list[dict[str, Any]] = listed["items"]
    return items


def test_a_healthy_node_reads_as_kubernetes_shows_it() -> None:
    (node,) = nodes(report("a", 0, gpu_model="V100"), report("a", 5, gpu_model="V100"))
    capacity = {"cpu": "16", "memory": "65536Mi", "nvidia.com/gpu": "2", "pods": "110"}
    assert node == {
        "metadata": {
            "name": "host-a",
            "uid": "a",
            "labels": {"kubernetes.io/hostname": "host-a", "pai-worker": "true", "machinetype": "V100"},
            "creationTimestamp": "2026-11-01T08:00:00Z",
        },
        "spec": {"unschedulable": False},
        "status": {
            "capacity": capacity,
            "allocatable": capacity,
            "addresses": [
                {"type": "InternalIP", "address": "10.0.0.1"},
                {"type": "Hostname", "address": "host-a"},
            ],
            "conditions": [
                {
                    "type": "Ready",
                    "status": "True",
                    "reason": "NodeReported",
                    "message": "",
                    "lastHeartbeatTime": "2026-11-01T08:05:00Z",
                    "lastTransitionTime": "2026-11-01T08:05:00Z",
                }
            ],
        },
    }


def test_an_unhealthy_node_says_why() -> None:
    node, other = nodes(report("a", 0, healthy=False), report("b", 0, healthy=False, reason="disk full"))
    assert "machinetype" not in node["metadata"]["labels"]
    condition = node["status"]["conditions"][0]
    assert (condition["status"], condition["reason"], condition["message"]) == ("False", "NodeUnhealthy", "")
    condition = other["status"]["conditions"][0]
    assert (condition["status"], condition["reason"], condition["message"]) == (
        "False",
        "disk full",
        "disk full",
    )


def test_a_cordoned_node_is_unschedulable_until_uncordoned() -> None:
    cordon = NodeCordoned(node_id="a", name="host-a")
    uncordon = NodeCordoned(node_id="a", name="host-a", cordoned=False)
    assert nodes(report("a", 0), cordon)[0]["spec"] == {"unschedulable": True}
    assert nodes(report("a", 0), cordon, uncordon)[0]["spec"] == {"unschedulable": False}
    assert nodes(cordon, report("a", 0))[0]["spec"] == {"unschedulable": False}, "a node not yet known"


def test_a_lost_node_is_unknown_since_it_was_lost() -> None:
    lost = NodeLost(
        node_id="a", name="host-a", reason="no report for 60 s", occurred_at=T0 + timedelta(minutes=9)
    )
    (node,) = nodes(report("a", 0), lost, NodeLost(node_id="zz", name="x", reason="r"))
    assert node["status"]["conditions"] == [
        {
            "type": "Ready",
            "status": "Unknown",
            "reason": "no report for 60 s",
            "message": "no report for 60 s",
            "lastHeartbeatTime": "2026-11-01T08:00:00Z",
            "lastTransitionTime": "2026-11-01T08:09:00Z",
        }
    ]
    (node,) = nodes(report("a", 0), NodeLost(node_id="a", name="host-a", reason=""))
    assert node["status"]["conditions"][0]["reason"] == "NodeLost"
    (node,) = nodes(report("a", 0), lost, report("a", 10))
    assert node["status"]["conditions"][0]["status"] == "True"
    assert node["metadata"]["creationTimestamp"] == "2026-11-01T08:00:00Z"


def test_nodes_are_listed_by_id() -> None:
    assert [node["metadata"]["uid"] for node in nodes(report("c", 0), report("a", 0), report("b", 0))] == [
        "a",
        "b",
        "c",
    ]


TASK: dict[str, Any] = {
    "job_id": "j1",
    "username": "alice",
    "job_name": "mnist",
    "virtual_cluster": "vc1",
    "role": "worker",
    "task_index": 1,
    "task_attempt": 2,
    "job_attempt": 1,
    "gpus": "0,1",
    "ip": "10.0.0.7",
    "node": "host-a",
    "launched_time": 1_761_984_000_000,
    "created_time": 1_761_983_940_000,
    "config": job_dict(
        {"taskRoles": {"worker": {"resourcePerInstance": {"cpu": 4, "memoryMB": 8192, "gpu": 2}}}}
    ),
}


def test_a_running_task_reads_as_a_pod() -> None:
    listed = pod_list([TASK])
    assert {key: value for key, value in listed.items() if key != "items"} == {
        "kind": "PodList",
        "apiVersion": "v1",
        "metadata": {"resourceVersion": ""},
    }
    frame = framework_name("alice", "mnist")
    limits = {"cpu": "4", "memory": "8192Mi", "nvidia.com/gpu": "2"}
    assert listed["items"] == [
        {
            "metadata": {
                "name": f"{frame}-worker-1",
                "namespace": "default",
                "uid": task_uid("j1", "worker", 1),
                "labels": {
                    "type": "kube-launcher-task",
                    "userName": "alice",
                    "jobName": "mnist",
                    "virtualCluster": "vc1",
                    "FC_FRAMEWORK_NAME": frame,
                    "FC_TASKROLE_NAME": "worker",
                    "FC_TASK_INDEX": "1",
                },
                "annotations": {"FC_TASK_ATTEMPT_ID": "2", "jobAttempt": "1", "gpuIndices": "0,1"},
                "creationTimestamp": "2025-11-01T07:59:00Z",
            },
            "spec": {
                "nodeName": "host-a",
                "containers": [{"name": "worker", "resources": {"limits": limits, "requests": limits}}],
            },
            "status": {
                "phase": "Running",
                "hostIP": "10.0.0.7",
                "podIP": "10.0.0.7",
                "startTime": "2025-11-01T08:00:00Z",
                "containerStatuses": [
                    {
                        "name": "worker",
                        "ready": True,
                        "restartCount": 2,
                        "state": {"running": {"startedAt": "2025-11-01T08:00:00Z"}},
                    }
                ],
            },
        }
    ]


def test_a_task_not_launched_yet_is_a_pending_pod_and_its_resources_default() -> None:
    pending = {**TASK, "launched_time": None, "gpus": "", "config": None}
    (pod,) = pod_list([pending], namespace="default")["items"]
    assert pod["metadata"]["annotations"] == {"FC_TASK_ATTEMPT_ID": "2", "jobAttempt": "1"}
    assert pod["spec"]["containers"][0]["resources"]["limits"] == {
        "cpu": "1",
        "memory": "0Mi",
        "nvidia.com/gpu": "0",
    }
    assert pod["status"]["phase"] == "Pending"
    assert pod["status"]["startTime"] is None
    assert pod["status"]["containerStatuses"][0]["ready"] is False
    assert pod["status"]["containerStatuses"][0]["state"] == {"waiting": {"reason": "ContainerCreating"}}
    other_role = {**TASK, "role": "ps", "config": {"taskRoles": {"worker": {}, "ps": None}}}
    (pod,) = pod_list([other_role])["items"]
    assert pod["spec"]["containers"][0]["resources"]["limits"] == {
        "cpu": "1",
        "memory": "0Mi",
        "nvidia.com/gpu": "0",
    }
    no_roles = {**TASK, "config": {"taskRoles": None}}
    assert pod_list([no_roles])["items"][0]["spec"]["containers"][0]["resources"]["limits"]["cpu"] == "1"


def test_another_namespace_has_no_pods() -> None:
    assert pod_list([TASK], namespace="kube-system")["items"] == []


def test_a_pods_times_are_utc_whatever_the_machines_zone(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TZ", "Asia/Tokyo")
    time.tzset()
    try:
        (pod,) = pod_list([TASK])["items"]
    finally:
        monkeypatch.undo()
        time.tzset()
    assert (pod["metadata"]["creationTimestamp"], pod["status"]["startTime"]) == (
        "2025-11-01T07:59:00Z",
        "2025-11-01T08:00:00Z",
    )
