"""A job's events from its facts, job-attempts/healthz, and the cluster's nodes and pods.

Facts are published on the bus as the scheduler and orchestrator would publish them; the
routes read the stream (events, nodes) and the read model (pods).
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

from aiohttp.test_utils import TestClient

from libs.backbone.connecting import Bus
from libs.backbone.topology import ensure_topology, publish_event
from libs.protocol.events import (
    FailureInfo,
    JobCompleted,
    JobPending,
    JobRetrying,
    JobScheduled,
    JobState,
    NodeCordoned,
    NodeLost,
    NodeReported,
    TaskCompleted,
    TaskPlacement,
    TaskStarted,
)
from tests.rest.jobs import job_yaml
from tests.rest.test_list_and_auth import submit
from tests.rest.test_users_groups import create_user
from tests.support.waiting import eventually

Client = TestClient[Any, Any]
# Facts dated after the submission the test makes, whole seconds so timestamps compare exactly.
T0 = datetime.now(UTC).replace(microsecond=0) + timedelta(hours=1)


def at(seconds: int) -> datetime:
    return T0 + timedelta(seconds=seconds)


def placed(job_id: str, attempt: int) -> JobScheduled:
    return JobScheduled(
        job_id=job_id,
        attempt=attempt,
        occurred_at=at(10 * attempt + 2),
        placements=tuple(
            TaskPlacement(role="worker", index=i, node="node-a", node_address="10.1.0.1") for i in range(2)
        ),
    )


async def run_a_job_that_retries(bus: Bus, job_id: str) -> None:
    lost = FailureInfo(code=-1, phrase="ContainerExitAbnormally", type="unknown")
    for event in (
        JobPending(job_id=job_id, reason="VC a has 0 free GPUs, 2 needed", occurred_at=at(1)),
        JobPending(job_id=job_id, reason="VC a has 0 free GPUs, 2 needed", occurred_at=at(1)),
        placed(job_id, 0),
        TaskStarted(job_id=job_id, attempt=0, role="worker", index=0, node="node-a", occurred_at=at(3)),
        TaskCompleted(
            job_id=job_id, attempt=0, role="worker", index=0, exit_code=1, failure=lost, occurred_at=at(4)
        ),
        JobRetrying(job_id=job_id, attempt=0, next_attempt=1, kind="user", counted=True, occurred_at=at(5)),
        placed(job_id, 1),
        TaskStarted(job_id=job_id, attempt=1, role="worker", index=0, node="node-a", occurred_at=at(13)),
        JobCompleted(job_id=job_id, attempt=1, state=JobState.SUCCEEDED, exit_code=0, occurred_at=at(20)),
    ):
        await publish_event(bus.js, event)


async def test_a_jobs_events_come_from_its_facts_newest_first_and_filter_by_type(
    api: Client, admin_headers: dict[str, str], bus: Bus
) -> None:
    job_id = await submit(api, admin_headers, job_yaml("evented"))
    await run_a_job_that_retries(bus, job_id)
    path = "/api/v2/jobs/admin~evented/events"
    response = await api.get(path)
    assert response.status == 200, await response.text()
    body = await response.json()
    events = body["data"]
    assert body["totalCount"] == len(events)
    assert events[0]["reason"] == "Succeeded"
    assert events[0]["type"] == "Normal"
    stamps = [event["lastTimestamp"] for event in events]
    assert stamps == sorted(stamps, reverse=True)
    assert events[0]["lastTimestamp"] == at(20).strftime("%Y-%m-%dT%H:%M:%S.000Z")
    pending = [event for event in events if event["reason"] == "FailedScheduling"]
    assert len(pending) == 1
    assert pending[0]["count"] == 2
    assert pending[0]["type"] == "Warning"
    failed = next(event for event in events if event["reason"] == "Failed")
    assert failed["taskroleName"] == "worker"
    assert failed["taskIndex"] == 0
    assert failed["sourceHost"] == "node-a"
    assert "ContainerExitAbnormally" in failed["message"]
    scheduled = [event for event in events if event["reason"] == "Scheduled"]
    assert len(scheduled) == 4
    assert len({event["uid"] for event in scheduled}) == 4
    assert {event["frameworkName"] for event in events} == {events[0]["frameworkName"]}

    warnings = await (await api.get(path + "?type=Warning")).json()
    assert {event["reason"] for event in warnings["data"]} == {"FailedScheduling", "Failed", "Retrying"}
    assert warnings["totalCount"] == 3
    normal = await (await api.get(path + "?type=Normal")).json()
    assert normal["totalCount"] + warnings["totalCount"] == body["totalCount"]

    bad = await api.get(path + "?type=Error")
    assert bad.status == 400
    assert "Normal, Warning" in (await bad.json())["message"]
    missing = await api.get("/api/v2/jobs/admin~nothing/events")
    assert missing.status == 404
    assert (await missing.json())["code"] == "NoJobError"


async def test_job_attempts_healthz_answers_ok_beside_the_attempt_routes(
    api: Client, admin_headers: dict[str, str]
) -> None:
    await submit(api, admin_headers, job_yaml("healthy"))
    response = await api.get("/rest-server/api/v2/jobs/admin~healthy/job-attempts/healthz")
    assert response.status == 200
    assert await response.text() == "ok"
    attempt = await api.get("/api/v2/jobs/admin~healthy/job-attempts/7")
    assert attempt.status == 404


def report(name: str, gpus: int, healthy: bool = True) -> NodeReported:
    return NodeReported(
        node_id=name, name=name, address=f"10.0.0.{gpus}", cpu=8, memory_mb=16384, gpus=gpus, healthy=healthy
    )


async def test_nodes_and_pods_are_kubernetes_lists_for_admins_only(
    api: Client, admin_headers: dict[str, str], bus: Bus
) -> None:
    await ensure_topology(bus.js)
    for event in (
        report("node-a", 4),
        report("node-b", 2),
        NodeCordoned(node_id="node-b", name="node-b", reason="maintenance"),
        report("node-c", 1),
        NodeLost(node_id="node-c", name="node-c", reason="no report for 60s"),
    ):
        await publish_event(bus.js, event)
    nodes = await (await api.get("/api/v2/kubernetes/nodes", headers=admin_headers)).json()
    assert nodes["kind"] == "NodeList"
    assert nodes["apiVersion"] == "v1"
    by_name = {item["metadata"]["name"]: item for item in nodes["items"]}
    assert sorted(by_name) == ["node-a", "node-b", "node-c"]
    a = by_name["node-a"]
    assert a["status"]["capacity"] == {"cpu": "8", "memory": "16384Mi", "nvidia.com/gpu": "4", "pods": "110"}
    assert {"type": "InternalIP", "address": "10.0.0.4"} in a["status"]["addresses"]
    assert a["status"]["conditions"][0]["status"] == "True"
    assert not a["spec"]["unschedulable"]
    assert by_name["node-b"]["spec"]["unschedulable"] is True
    assert by_name["node-c"]["status"]["conditions"][0]["status"] == "Unknown"

    job_id = await submit(api, admin_headers, job_yaml("podded"))
    await publish_event(bus.js, placed(job_id, 0))
    await publish_event(bus.js, TaskStarted(job_id=job_id, attempt=0, role="worker", index=1, node="node-a"))

    async def pods() -> Any:
        return await (await api.get("/api/v2/kubernetes/pods", headers=admin_headers)).json()

    listed = await eventually(pods, lambda found: "Running" in [p["status"]["phase"] for p in found["items"]])
    assert listed["kind"] == "PodList"
    assert listed["apiVersion"] == "v1"
    phases = {p["metadata"]["labels"]["FC_TASK_INDEX"]: p["status"]["phase"] for p in listed["items"]}
    assert phases == {"0": "Pending", "1": "Running"}
    pod = listed["items"][1]
    assert pod["metadata"]["namespace"] == "default"
    assert pod["spec"]["nodeName"] == "node-a"
    assert pod["metadata"]["labels"]["userName"] == "admin"
    assert pod["metadata"]["labels"]["jobName"] == "podded"
    assert pod["spec"]["containers"][0]["resources"]["limits"]["nvidia.com/gpu"] == "1"
    same = await (await api.get("/api/v2/kubernetes/pods?namespace=default", headers=admin_headers)).json()
    assert len(same["items"]) == 2
    other = await (
        await api.get("/api/v2/kubernetes/pods?namespace=kube-system", headers=admin_headers)
    ).json()
    assert other["items"] == []

    await publish_event(
        bus.js, JobCompleted(job_id=job_id, attempt=0, state=JobState.STOPPED, exit_code=-210)
    )
    await eventually(pods, lambda found: found["items"] == [])

    user = await create_user(api, admin_headers, "bob")
    for route in ("nodes", "pods"):
        refused = await api.get(f"/api/v2/kubernetes/{route}", headers=user)
        assert refused.status == 403
        assert (await refused.json())["code"] == "ForbiddenUserError"
        assert (await api.get(f"/api/v2/kubernetes/{route}")).status == 401
