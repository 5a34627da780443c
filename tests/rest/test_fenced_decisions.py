"""REST's read model follows only the scheduler decisions that count: a deposed leader's late
preemption, placement or pending reason (libs/protocol/fencing.py) changes nothing a user reads,
as it changes nothing the orchestrator does."""

from __future__ import annotations

from typing import Any

import pytest
from aiohttp.test_utils import TestClient

from libs.backbone.connecting import Bus
from libs.backbone.fencing import raise_fence
from libs.backbone.topology import FENCES, ensure_topology, publish_event
from libs.protocol.events import (
    JobPending,
    JobPreempting,
    JobScheduled,
    TaskCompleted,
    TaskPlacement,
    TaskStarted,
)
from tests.rest.jobs import job_yaml
from tests.support.waiting import eventually

pytestmark = pytest.mark.parametrize("database_url", ["sqlite"], indirect=True)

Client = TestClient[Any, Any]
JOB = "/api/v2/jobs/admin~fenced"
OLD_EPOCH, NEW_EPOCH = 5, 9


def placed(job_id: str, epoch: int, node: str, address: str) -> JobScheduled:
    return JobScheduled(
        job_id=job_id,
        attempt=0,
        epoch=epoch,
        placements=tuple(
            TaskPlacement(role="worker", index=i, node=node, node_address=address) for i in range(2)
        ),
    )


def late_decision(kind: str, job_id: str) -> JobPreempting | JobPending | JobScheduled:
    """What the deposed leader had decided for the running job, sent after the new fence."""
    if kind == "preemption":
        return JobPreempting(job_id=job_id, by_job_id="vip", reason="late preemption", epoch=OLD_EPOCH)
    if kind == "pending reason":
        return JobPending(job_id=job_id, reason="late: no room", epoch=OLD_EPOCH)
    # Another node, as the old leader saw the cluster; its own id (its epoch's) reaches the stream.
    late = placed(job_id, OLD_EPOCH, "node-9", "10.9.9.9")
    return late.model_copy(update={"event_id": f"{job_id}.scheduled.0.e{OLD_EPOCH}.late"})


def unfenced(shows: str) -> Any:
    return pytest.mark.xfail(
        strict=True,
        reason="REST projects every scheduler decision without reading the fences (services/rest/"
        f"adapters/projecting.py has no FenceReader): {shows}",
    )


@pytest.mark.parametrize(
    "kind",
    [
        pytest.param(
            "preemption",
            marks=unfenced("a running job shows subState AttemptDeletionPending and the late reason"),
        ),
        pytest.param(
            "pending reason",
            marks=unfenced("a running job shows subState AttemptCreationPending and the late reason"),
        ),
        pytest.param(
            "placement",
            marks=unfenced("a running job shows subState AttemptPreparing, its tasks on the late node"),
        ),
    ],
)
async def test_a_deposed_scheduler_leaders_late_decision_changes_nothing_rest_shows(
    api: Client, admin_headers: dict[str, str], bus: Bus, kind: str
) -> None:
    await ensure_topology(bus.js)
    submitted = await api.post(
        "/api/v2/jobs", data=job_yaml("fenced"), headers={**admin_headers, "Content-Type": "text/yaml"}
    )
    assert submitted.status == 202
    job_id = (await submitted.json())["jobId"]
    await publish_event(bus.js, placed(job_id, OLD_EPOCH, "node-1", "10.0.0.1"))
    for index in range(2):
        await publish_event(
            bus.js, TaskStarted(job_id=job_id, attempt=0, role="worker", index=index, node="node-1", pid=10)
        )

    async def detail() -> Any:
        return await (await api.get(JOB, headers=admin_headers)).json()

    running = (await eventually(detail, lambda d: d["jobStatus"]["state"] == "RUNNING"))["jobStatus"]

    # A new leader takes over; then the old one, paused before, sends what it had decided.
    await raise_fence(bus.js, await bus.js.key_value(FENCES.bucket), NEW_EPOCH)
    await publish_event(bus.js, late_decision(kind, job_id))
    # Applied in stream order: once this task's end shows, the late decision was read.
    await publish_event(bus.js, TaskCompleted(job_id=job_id, attempt=0, role="worker", index=1, exit_code=0))

    def tasks(found: Any) -> list[dict[str, Any]]:
        listed: list[dict[str, Any]] = found["taskRoles"]["worker"]["taskStatuses"]
        return listed

    after = await eventually(detail, lambda d: tasks(d)[1]["taskState"] == "SUCCEEDED")
    shown = after["jobStatus"]
    assert (shown["state"], shown["subState"], shown.get("pendingReason")) == (
        "RUNNING",
        running["subState"],
        running.get("pendingReason"),
    )
    assert [t["containerIp"] for t in tasks(after)] == ["10.0.0.1", "10.0.0.1"]
