"""Attempt 0 and its tasks answer from the moment a submission's 202 is sent.

No scheduler runs here, so no event ever reaches the projection for these jobs unless the
test publishes one: what is read right after the 202 is exactly what a client polling at
once would read, however slow the scheduler.
"""

from __future__ import annotations

from typing import Any

from aiohttp.test_utils import TestClient

from libs.backbone.connecting import Bus
from libs.backbone.topology import publish_event
from libs.protocol.events import JobScheduled, TaskPlacement
from tests.rest.jobs import job_yaml
from tests.support.waiting import eventually

Client = TestClient[Any, Any]
JOB = "/rest-server/api/v2/jobs/admin~first"
TASK = JOB + "/attempts/0/taskRoles/worker/taskIndex/{index}/attempts"


async def get(api: Client, path: str, headers: dict[str, str]) -> tuple[int, Any]:
    response = await api.get(path, headers=headers)
    return response.status, await response.json()


async def test_attempt_zero_reads_at_once_then_follows_the_projection(
    api: Client, admin_headers: dict[str, str], bus: Bus
) -> None:
    submitted = await api.post(
        "/api/v2/jobs", data=job_yaml("first"), headers={**admin_headers, "Content-Type": "text/yaml"}
    )
    assert submitted.status == 202
    job_id = (await submitted.json())["jobId"]

    status, attempt = await get(api, JOB + "/attempts/0", admin_headers)
    assert status == 200, attempt
    assert (attempt["jobStatus"]["attemptId"], attempt["jobStatus"]["attemptState"]) == (0, "WAITING")
    assert [t["taskState"] for t in attempt["taskRoles"]["worker"]["taskStatuses"]] == ["WAITING", "WAITING"]
    status, history = await get(api, JOB + "/job-attempts/0", admin_headers)
    assert status == 200, history
    assert (history["attemptIndex"], history["state"], history["isLatest"]) == (0, "WAITING", True)
    status, listed = await get(api, JOB + "/job-attempts", admin_headers)
    assert [item["attemptIndex"] for item in listed] == [0]
    status, task = await get(api, TASK.format(index=1), admin_headers)
    assert status == 200, task
    assert (task["taskIndex"], task["taskState"], task["jobAttemptId"]) == (1, "WAITING", 0)
    # What the config does not have stays unknown.
    assert (await get(api, TASK.format(index=2), admin_headers))[0] == 404
    assert (await get(api, JOB + "/attempts/1", admin_headers))[0] == 404

    # The scheduler's decision reaches the read model: its row replaces the one read from the job.
    placements = tuple(
        TaskPlacement(role="worker", index=i, node="node-1", node_address="10.0.0.1", gpu_indices=(i,))
        for i in range(2)
    )
    await publish_event(bus.js, JobScheduled(job_id=job_id, attempt=0, placements=placements))

    async def scheduled() -> Any:
        return (await get(api, TASK.format(index=1), admin_headers))[1]

    task = await eventually(scheduled, lambda found: found["attempts"][0]["containerIp"] == "10.0.0.1")
    assert task["taskState"] == "WAITING"
    status, listed = await get(api, JOB + "/job-attempts", admin_headers)
    assert [item["attemptIndex"] for item in listed] == [0]
    assert listed[0]["attemptStartedTime"] is not None


async def test_a_job_stopped_while_queued_has_a_stopped_attempt_zero(
    api: Client, admin_headers: dict[str, str]
) -> None:
    submitted = await api.post(
        "/api/v2/jobs", data=job_yaml("first"), headers={**admin_headers, "Content-Type": "text/yaml"}
    )
    assert submitted.status == 202
    stop = await api.put(JOB + "/executionType", json={"value": "STOP"}, headers=admin_headers)
    assert stop.status == 202

    async def attempt() -> Any:
        return (await get(api, JOB + "/job-attempts/0", admin_headers))[1]

    # No orchestrator here: the job stays STOPPING or becomes STOPPED; attempt 0 says the same.
    found = await eventually(attempt, lambda body: body["state"] != "WAITING")
    job = (await get(api, JOB, admin_headers))[1]
    assert found["state"] == job["jobStatus"]["state"]
