"""The projection: lifecycle events on the bus become OpenPAI-shaped job details and lists."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

from aiohttp.test_utils import TestClient

from libs.backbone.connecting import Bus
from libs.backbone.publishing import publish_bytes
from libs.backbone.topology import publish_event
from libs.protocol.events import (
    EventBase,
    FailureInfo,
    JobCompleted,
    JobPending,
    JobRetrying,
    JobScheduled,
    JobState,
    JobSubmitted,
    TaskCompleted,
    TaskPlacement,
    TaskStarted,
    encode_event,
)
from tests.rest.jobs import job_yaml
from tests.support.jobs import job_model
from tests.support.waiting import eventually

Client = TestClient[Any, Any]
T0 = datetime(2026, 1, 2, 3, 4, 5, tzinfo=UTC)


def at(seconds: int) -> datetime:
    return T0 + timedelta(seconds=seconds)


def ms(seconds: int) -> int:
    return int(at(seconds).timestamp() * 1000)


def lifecycle(job_id: str) -> list[EventBase]:
    """Pending, a first attempt failing on a user error, a retry, a second attempt succeeding."""
    placements = (
        TaskPlacement(role="worker", index=0, node="node-a", node_address="10.0.0.1", gpu_indices=(0,)),
        TaskPlacement(role="worker", index=1, node="node-b", node_address="10.0.0.2", gpu_indices=(1,)),
    )
    failure = FailureInfo(
        code=1, phrase="UserError", type="transient", reason="the program exited with 1",
        solution="check the program", matched_line="Traceback", issuer="PAI_RUNTIME", causer="USER",
    )  # fmt: skip
    return [
        JobPending(job_id=job_id, reason="waiting for 2 GPUs in vc default", occurred_at=at(1)),
        JobScheduled(job_id=job_id, attempt=0, placements=placements, occurred_at=at(2)),
        TaskStarted(
            job_id=job_id, attempt=0, role="worker", index=0, node="node-a", pid=11, occurred_at=at(3)
        ),
        TaskStarted(
            job_id=job_id, attempt=0, role="worker", index=1, node="node-b", pid=12, occurred_at=at(3)
        ),
        TaskCompleted(
            job_id=job_id,
            attempt=0,
            role="worker",
            index=0,
            exit_code=1,
            failure=failure,
            diagnostics="worker 0 failed",
            occurred_at=at(4),
        ),
        JobRetrying(
            job_id=job_id,
            attempt=0,
            next_attempt=1,
            kind="user",
            counted=True,
            delay_seconds=2.5,
            reason="worker 0 failed",
            occurred_at=at(5),
        ),
        JobScheduled(job_id=job_id, attempt=1, placements=placements, occurred_at=at(6)),
        TaskStarted(job_id=job_id, attempt=1, role="worker", index=0, node="node-a", occurred_at=at(7)),
        TaskStarted(job_id=job_id, attempt=1, role="worker", index=1, node="node-b", occurred_at=at(7)),
        TaskCompleted(job_id=job_id, attempt=1, role="worker", index=0, exit_code=0, occurred_at=at(8)),
        TaskCompleted(job_id=job_id, attempt=1, role="worker", index=1, exit_code=0, occurred_at=at(9)),
        JobCompleted(
            job_id=job_id,
            attempt=1,
            state=JobState.SUCCEEDED,
            exit_code=0,
            trigger_role="worker",
            trigger_index=1,
            occurred_at=at(10),
        ),
    ]


async def submit(api: Client, headers: dict[str, str], name: str, **kwargs: Any) -> str:
    response = await api.post(
        "/api/v2/jobs", data=job_yaml(name, **kwargs), headers={**headers, "Content-Type": "text/yaml"}
    )
    assert response.status == 202, await response.text()
    job_id: str = (await response.json())["jobId"]
    return job_id


async def detail_of(api: Client, ref: str) -> dict[str, Any]:
    response = await api.get(f"/api/v2/jobs/{ref}")
    assert response.status == 200
    result: dict[str, Any] = await response.json()
    return result


async def test_a_whole_lifecycle_reads_as_openpai_job_detail(
    api: Client, admin_headers: dict[str, str], bus: Bus
) -> None:
    job_id = await submit(api, admin_headers, "life")
    for event in lifecycle(job_id):
        await publish_event(bus.js, event)
    detail = await eventually(
        lambda: detail_of(api, "admin~life"), lambda d: d["jobStatus"]["state"] == "SUCCEEDED"
    )
    st = detail["jobStatus"]
    assert detail["name"] == "life"
    assert st["username"] == "admin"
    assert st["subState"] == "Completed"
    assert st["executionType"] == "START"
    assert st["retries"] == 1
    assert st["retryDetails"] == {"user": 1, "platform": 0, "resource": 0}
    assert st["retryDelayTime"] == 2500
    assert st["launchedTime"] == ms(3)
    assert st["completedTime"] == ms(10)
    assert st["attemptId"] == 1
    assert st["attemptState"] == "SUCCEEDED"
    assert st["appId"] == job_id
    assert (st["appCreatedTime"], st["appLaunchedTime"], st["appCompletedTime"]) == (ms(6), ms(7), ms(10))
    assert st["appExitCode"] == 0
    assert st["appExitSpec"]["code"] == 0
    assert st["appExitSpec"]["type"] == "USER_SUCCESS"
    assert st["appExitTriggerTaskRoleName"] == "worker"
    assert st["appExitTriggerTaskIndex"] == 1
    assert st["pendingReason"] is None
    assert st["virtualCluster"] == "default"
    assert (st["totalGpuNumber"], st["totalTaskNumber"], st["totalTaskRoleNumber"]) == (2, 2, 1)

    tasks = detail["taskRoles"]["worker"]["taskStatuses"]
    assert detail["taskRoles"]["worker"]["taskRoleStatus"] == {"name": "worker"}
    assert [t["taskIndex"] for t in tasks] == [0, 1]
    first = tasks[0]
    assert first["taskState"] == "SUCCEEDED"
    assert first["containerIp"] == "10.0.0.1"
    assert first["containerNodeName"] == "node-a"
    assert first["containerGpus"] == "0"
    assert first["containerPorts"] == {}
    assert first["containerExitCode"] == 0
    assert first["containerExitSpec"]["phrase"] == "Succeeded"
    assert first["launchedTime"] == ms(7)
    assert first["completedTime"] == ms(8)
    assert (
        first["containerLog"]
        == "/api/v2/jobs/admin~life/attempts/1/taskRoles/worker/taskIndex/0/attempts/0/logs"
    )
    assert tasks[1]["containerIp"] == "10.0.0.2"

    history = await (await api.get("/api/v2/jobs/admin~life/job-attempts")).json()
    assert [(a["attemptIndex"], a["state"], a["isLatest"]) for a in history] == [
        (1, "SUCCEEDED", True),
        (0, "FAILED", False),
    ]
    assert history[1]["attemptCompletedTime"] == ms(5)
    assert history[1]["taskRoles"]["worker"]["taskStatuses"][0]["containerExitCode"] == 1

    failed = await detail_of(api, "admin~life/attempts/0")
    spec = failed["taskRoles"]["worker"]["taskStatuses"][0]["containerExitSpec"]
    assert (spec["code"], spec["phrase"], spec["behavior"], spec["type"]) == (
        1,
        "UserError",
        "TRANSIENT",
        "USER_FAILURE",
    )
    assert spec["solution"] == ["check the program"]
    assert spec["repro"] == ["Traceback"]

    task = await (
        await api.get("/api/v2/jobs/admin~life/attempts/0/taskRoles/worker/taskIndex/0/attempts")
    ).json()
    assert (task["taskIndex"], task["taskState"], task["jobAttemptId"], task["taskRoleName"]) == (
        0,
        "FAILED",
        0,
        "worker",
    )
    assert [(a["attemptId"], a["containerExitCode"], a["containerNodeName"]) for a in task["attempts"]] == [
        (0, 1, "node-a")
    ]

    listed = await (await api.get("/api/v2/jobs", headers=admin_headers)).json()
    assert len(listed) == 1
    item = listed[0]
    assert (item["name"], item["username"], item["state"], item["subState"]) == (
        "life",
        "admin",
        "SUCCEEDED",
        "Completed",
    )
    assert (item["retries"], item["retryDetails"]["user"], item["appExitCode"]) == (1, 1, 0)
    assert (item["launchedTime"], item["completedTime"]) == (ms(3), ms(10))
    assert (item["totalGpuNumber"], item["totalTaskNumber"], item["totalTaskRoleNumber"]) == (2, 2, 1)
    assert item["virtualCluster"] == "default"
    assert item["executionType"] == "START"


async def test_a_pending_job_shows_the_reason(api: Client, admin_headers: dict[str, str], bus: Bus) -> None:
    job_id = await submit(api, admin_headers, "queued")
    await publish_event(bus.js, JobPending(job_id=job_id, reason="no free GPU in vc default"))
    detail = await eventually(
        lambda: detail_of(api, "admin~queued"), lambda d: d["jobStatus"]["pendingReason"] is not None
    )
    assert detail["jobStatus"]["pendingReason"] == "no free GPU in vc default"
    assert detail["jobStatus"]["state"] == "WAITING"
    assert [t["taskState"] for t in detail["taskRoles"]["worker"]["taskStatuses"]] == ["WAITING", "WAITING"]


async def test_duplicated_events_change_nothing_twice(
    api: Client, admin_headers: dict[str, str], bus: Bus
) -> None:
    job_id = await submit(api, admin_headers, "twice")
    for event in lifecycle(job_id):
        await publish_event(bus.js, event)
        # The same event again under another message id, so the stream really carries it twice.
        await publish_bytes(bus.js, event.subject(), encode_event(event), msg_id=event.event_id + "-again")
    detail = await eventually(
        lambda: detail_of(api, "admin~twice"), lambda d: d["jobStatus"]["state"] == "SUCCEEDED"
    )
    marker = JobPending(job_id=job_id, reason="marker")
    await publish_event(bus.js, marker)
    last_seq = (await bus.js.stream_info("PAI_JOBS")).state.last_seq
    await eventually(
        lambda: bus.js.consumer_info("PAI_JOBS", "rest-projection"),
        lambda i: i.delivered.stream_seq == last_seq and i.num_ack_pending == 0,
    )
    detail = await detail_of(api, "admin~twice")
    assert detail["jobStatus"]["retries"] == 1
    assert detail["jobStatus"]["retryDetails"] == {"user": 1, "platform": 0, "resource": 0}
    history = await (await api.get("/api/v2/jobs/admin~twice/job-attempts")).json()
    assert len(history) == 2


async def test_a_submission_seen_only_on_the_bus_creates_the_row(
    api: Client, admin_headers: dict[str, str], bus: Bus
) -> None:
    event = JobSubmitted(
        job_id="rebuilt1", user="alice", name="from-stream", virtual_cluster="vc1",
        config=job_model({"taskRoles": {"a": {"instances": 3, "resourcePerInstance": {"gpu": 2}}}}),
    )  # fmt: skip
    await publish_event(bus.js, event)
    detail = await eventually(lambda: api.get("/api/v2/jobs/alice~from-stream"), lambda r: r.status == 200)
    st = (await detail.json())["jobStatus"]
    assert (st["virtualCluster"], st["totalTaskNumber"], st["totalGpuNumber"], st["state"]) == (
        "vc1",
        3,
        6,
        "WAITING",
    )
