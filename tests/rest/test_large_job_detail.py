"""A large job's detail: its taskRoles kept encoded, and never older than what was projected."""

from __future__ import annotations

from typing import Any

from aiohttp.test_utils import TestClient

from libs.backbone.connecting import Bus
from libs.backbone.topology import publish_event
from libs.protocol.events import JobScheduled, TaskCompleted, TaskPlacement, TaskStarted
from services.rest.core.detail_cache import SMALLEST_KEPT
from services.rest.keys import DETAIL_CACHE
from tests.rest.jobs import job_yaml
from tests.support.waiting import eventually

Client = TestClient[Any, Any]
TASKS = 300  # about 1 kB a task status: a taskRoles large enough to be kept


async def detail(api: Client) -> dict[str, Any]:
    response = await api.get("/api/v2/jobs/admin~wide")
    assert response.status == 200
    assert response.content_type == "application/json"
    result: dict[str, Any] = await response.json()
    return result


def statuses(body: dict[str, Any]) -> list[dict[str, Any]]:
    found: list[dict[str, Any]] = body["taskRoles"]["worker"]["taskStatuses"]
    return found


def states(body: dict[str, Any]) -> list[str]:
    return [s["taskState"] for s in statuses(body)]


async def test_a_kept_detail_changes_with_every_projected_event_of_its_job(
    api: Client, admin_headers: dict[str, str], bus: Bus
) -> None:
    response = await api.post(
        "/api/v2/jobs",
        data=job_yaml("wide", instances=TASKS, gpu=0),
        headers={**admin_headers, "Content-Type": "text/yaml"},
    )
    assert response.status == 202, await response.text()
    job_id = (await response.json())["jobId"]
    placements = tuple(
        TaskPlacement(role="worker", index=i, node="node-a", node_address="10.0.0.1") for i in range(TASKS)
    )
    await publish_event(bus.js, JobScheduled(job_id=job_id, attempt=0, placements=placements))
    placed = await eventually(
        lambda: detail(api),
        lambda d: (
            statuses(d)[-1]["containerNodeName"] == "node-a"
            and d["jobStatus"]["subState"] != "AttemptCreationPending"
        ),
        within=60,
    )
    assert states(placed) == ["WAITING"] * TASKS
    cache = api.app[DETAIL_CACHE]
    assert cache.size >= SMALLEST_KEPT, "the taskRoles of this job are kept"
    again = await detail(api)
    assert again == placed

    await publish_event(bus.js, TaskStarted(job_id=job_id, attempt=0, role="worker", index=7, node="node-a"))
    # The detail reads the job's row and its tasks one after the other, not in one snapshot: a
    # commit between the two reads can show the task RUNNING a moment before the job.
    running = await eventually(
        lambda: detail(api),
        lambda d: states(d)[7] == "RUNNING" and d["jobStatus"]["state"] == "RUNNING",
        within=60,
    )
    assert states(running).count("RUNNING") == 1
    await publish_event(bus.js, TaskCompleted(job_id=job_id, attempt=0, role="worker", index=7, exit_code=0))
    ended = await eventually(lambda: detail(api), lambda d: states(d)[7] == "SUCCEEDED", within=60)
    assert statuses(ended)[7]["containerExitCode"] == 0
    assert list(ended) == list(placed), "the same fields in the same order"


async def test_a_task_reported_ended_before_it_was_reported_started_stays_ended(
    api: Client, admin_headers: dict[str, str], bus: Bus
) -> None:
    response = await api.post(
        "/api/v2/jobs",
        data=job_yaml("quick", instances=1, gpu=0),
        headers={**admin_headers, "Content-Type": "text/yaml"},
    )
    job_id = (await response.json())["jobId"]
    placement = (TaskPlacement(role="worker", index=0, node="node-a", node_address="10.0.0.1"),)
    await publish_event(bus.js, JobScheduled(job_id=job_id, attempt=0, placements=placement))
    # The executor saw the process end before the orchestrator recorded its launch.
    await publish_event(bus.js, TaskCompleted(job_id=job_id, attempt=0, role="worker", index=0, exit_code=0))
    await publish_event(
        bus.js, TaskStarted(job_id=job_id, attempt=0, role="worker", index=0, node="node-a", pid=42)
    )

    async def quick() -> dict[str, Any]:
        found = await api.get("/api/v2/jobs/admin~quick")
        body: dict[str, Any] = await found.json()
        return body

    shown = await eventually(
        quick, lambda d: d["taskRoles"]["worker"]["taskStatuses"][0]["launchedTime"], within=60
    )
    task = shown["taskRoles"]["worker"]["taskStatuses"][0]
    assert (task["taskState"], task["containerExitCode"]) == ("SUCCEEDED", 0)
