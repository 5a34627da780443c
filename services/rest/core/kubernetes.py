"""Nodes and live tasks in Kubernetes' v1 List shape, for OpenPAI's cluster pages.

OpenPAI's rest-server passes the cluster's NodeList and PodList through; its portal reads
node names, addresses, capacity (cpu, memory, nvidia.com/gpu), the Ready condition and
``spec.unschedulable``, and for pods their node, phase, labels naming the job and the
containers' resource limits. Here nodes come from the monitor's node facts and pods are the
read model's live tasks (tasks are processes, or pods under the Kubernetes executor), in
the namespace ``default`` where OpenPAI's job pods live.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from datetime import UTC, datetime
from typing import Any

from libs.protocol.events import Event, NodeCordoned, NodeLost, NodeReported
from libs.protocol.jobs import JobConfig, stored_job_or_none
from services.rest.core.states import framework_name, task_uid

NAMESPACE = "default"
GPU = "nvidia.com/gpu"


def _time(moment: datetime) -> str:
    return moment.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def _ms_time(epoch_ms: int | None) -> str | None:
    return _time(datetime.fromtimestamp(epoch_ms / 1000, UTC)) if epoch_ms is not None else None


def _list(kind: str, items: list[dict[str, Any]]) -> dict[str, Any]:
    return {"kind": kind, "apiVersion": "v1", "metadata": {"resourceVersion": ""}, "items": items}


def node_list(history: Iterable[tuple[Event, int]]) -> dict[str, Any]:
    """A NodeList from node facts in stream order (the last report, cordon and loss of each)."""
    nodes: dict[str, dict[str, Any]] = {}
    for event, _sequence in history:
        if isinstance(event, NodeReported):
            known = nodes.get(event.node_id, {})
            nodes[event.node_id] = {
                **known,
                "report": event,
                "ready": event.healthy,
                "why": event.reason or ("NodeReported" if event.healthy else "NodeUnhealthy"),
                "since": event.occurred_at,
                "first": known.get("first", event.occurred_at),
            }
        elif isinstance(event, NodeCordoned) and event.node_id in nodes:
            nodes[event.node_id]["cordoned"] = event.cordoned
        elif isinstance(event, NodeLost) and event.node_id in nodes:
            nodes[event.node_id].update(ready=None, why=event.reason or "NodeLost", since=event.occurred_at)
    return _list("NodeList", [_node(node) for _, node in sorted(nodes.items())])


def _node(node: Mapping[str, Any]) -> dict[str, Any]:
    report: NodeReported = node["report"]
    capacity = {
        "cpu": str(report.cpu),
        "memory": f"{report.memory_mb}Mi",
        GPU: str(report.gpus),
        "pods": "110",
    }
    labels = {"kubernetes.io/hostname": report.name, "pai-worker": "true"}
    if report.gpu_model:
        labels["machinetype"] = report.gpu_model
    ready = node["ready"]
    status = "Unknown" if ready is None else ("True" if ready else "False")
    return {
        "metadata": {
            "name": report.name,
            "uid": report.node_id,
            "labels": labels,
            "creationTimestamp": _time(node["first"]),
        },
        "spec": {"unschedulable": bool(node.get("cordoned", False))},
        "status": {
            "capacity": capacity,
            "allocatable": dict(capacity),
            "addresses": [
                {"type": "InternalIP", "address": report.address},
                {"type": "Hostname", "address": report.name},
            ],
            "conditions": [
                {
                    "type": "Ready",
                    "status": status,
                    "reason": node["why"],
                    "message": report.reason if ready is not None else node["why"],
                    "lastHeartbeatTime": _time(report.occurred_at),
                    "lastTransitionTime": _time(node["since"]),
                }
            ],
        },
    }


def _resources(config: JobConfig | None, role: str) -> dict[str, str]:
    spec = config.task_roles.get(role) if config is not None else None
    if spec is None:  # a row whose config does not name the role: what the API said before
        return {"cpu": "1", "memory": "0Mi", GPU: "0"}
    per = spec.resource_per_instance
    return {"cpu": str(per.cpu), "memory": f"{per.memory_mb}Mi", GPU: str(per.gpu)}


def pod_list(tasks: Iterable[Mapping[str, Any]], namespace: str | None = None) -> dict[str, Any]:
    """A PodList of live tasks (rows of ``adapters.running.live_tasks``), optionally one namespace's."""
    if namespace not in (None, NAMESPACE):
        return _list("PodList", [])
    rows = list(tasks)
    configs: dict[str, JobConfig | None] = {}  # each job's config read once, not once per task
    for task in rows:
        if task["job_id"] not in configs:
            configs[task["job_id"]] = stored_job_or_none(task["config"])
    return _list("PodList", [_pod(task, configs[task["job_id"]]) for task in rows])


def _pod(task: Mapping[str, Any], config: JobConfig | None) -> dict[str, Any]:
    frame = framework_name(task["username"], task["job_name"])
    role, index = task["role"], task["task_index"]
    limits = _resources(config, role)
    running = task["launched_time"] is not None
    labels = {
        "type": "kube-launcher-task",
        "userName": task["username"],
        "jobName": task["job_name"],
        "virtualCluster": task["virtual_cluster"],
        "FC_FRAMEWORK_NAME": frame,
        "FC_TASKROLE_NAME": role,
        "FC_TASK_INDEX": str(index),
    }
    annotations = {"FC_TASK_ATTEMPT_ID": str(task["task_attempt"]), "jobAttempt": str(task["job_attempt"])}
    if task["gpus"]:
        annotations["gpuIndices"] = task["gpus"]
    status: dict[str, Any] = {
        "phase": "Running" if running else "Pending",
        "hostIP": task["ip"],
        "podIP": task["ip"],
        "startTime": _ms_time(task["launched_time"]),
        "containerStatuses": [
            {
                "name": role,
                "ready": running,
                "restartCount": task["task_attempt"],
                "state": {"running": {"startedAt": _ms_time(task["launched_time"])}}
                if running
                else {"waiting": {"reason": "ContainerCreating"}},
            }
        ],
    }
    return {
        "metadata": {
            "name": f"{frame}-{role}-{index}",
            "namespace": NAMESPACE,
            "uid": task_uid(task["job_id"], role, index),
            "labels": labels,
            "annotations": annotations,
            "creationTimestamp": _ms_time(task["created_time"]),
        },
        "spec": {
            "nodeName": task["node"],
            "containers": [{"name": role, "resources": {"limits": limits, "requests": dict(limits)}}],
        },
        "status": status,
    }
