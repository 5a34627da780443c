"""REST's read model follows only the scheduler decisions that count: a deposed leader's late
preemption, placement or pending reason (libs/protocol/fencing.py) changes nothing a user reads,
as it changes nothing the orchestrator does."""

from __future__ import annotations

import asyncio
from types import SimpleNamespace
from typing import Any, cast

import pytest
from aiohttp.test_utils import TestClient
from nats.aio.msg import Msg
from sqlalchemy import select
from sqlalchemy.ext.asyncio import AsyncEngine

from libs.backbone.connecting import Bus
from libs.backbone.errors import TemporaryError
from libs.backbone.fencing import raise_fence
from libs.backbone.topology import FENCES, ensure_topology, publish_event
from libs.protocol.events import (
    EventBase,
    JobPending,
    JobPreempting,
    JobScheduled,
    JobSubmitted,
    TaskCompleted,
    TaskPlacement,
    TaskStarted,
    encode_event,
)
from libs.protocol.fencing import Fence
from services.rest.adapters.jobs_store import find_job
from services.rest.adapters.tables import applied_events
from services.rest.handlers import Projector, projection_handler
from tests.rest.jobs import job_yaml
from tests.support.jobs import job_model
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


@pytest.mark.parametrize("kind", ["preemption", "pending reason", "placement"])
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


# The projector on its own: the fences as a list the test changes, the stream's sequences given.
CUT = 100


def submitted(job_id: str) -> JobSubmitted:
    config = {"taskRoles": {"worker": {"instances": 1, "resourcePerInstance": {"gpu": 0}}}}
    return JobSubmitted(
        job_id=job_id, user="alice", name=job_id, virtual_cluster="default", config=job_model(config)
    )


class Fences:
    """The fences record: the new leader's fence pending until ``finish`` gives it its cut."""

    def __init__(self) -> None:
        self.record: tuple[Fence, ...] = (Fence(NEW_EPOCH, None),)
        self.reads = 0

    async def __call__(self) -> tuple[Fence, ...]:
        self.reads += 1
        await asyncio.sleep(0)  # a read on the bus lets other tasks run
        return self.record

    def finish(self) -> None:
        self.record = (Fence(NEW_EPOCH, CUT),)


async def shown(engine: AsyncEngine, job_id: str) -> tuple[Any, Any]:
    row = await find_job(engine, "alice", job_id)
    assert row is not None
    return row["sub_state"], row["pending_reason"]


async def recorded(engine: AsyncEngine, event_id: str) -> bool:
    async with engine.connect() as conn:
        found = await conn.scalar(
            select(applied_events.c.event_id).where(applied_events.c.event_id == event_id)
        )
    return found is not None


@pytest.mark.parametrize("sequence", [CUT, CUT + 1], ids=["before the cut", "after the cut"])
async def test_a_decision_waits_for_its_fence_and_keeps_its_place_in_the_jobs_order(
    engine: AsyncEngine, sequence: int
) -> None:
    fences = Fences()
    projector = Projector(engine, fences=fences)
    await projector.apply(submitted("j1"), 1)
    # The old leader's pending reason, then (same job, pipelined) the new leader's placement.
    pending = JobPending(job_id="j1", reason="late: no room", epoch=OLD_EPOCH)
    placement = placed("j1", NEW_EPOCH, "node-1", "10.0.0.1")
    applying = [
        asyncio.ensure_future(projector.apply(pending, sequence)),
        asyncio.ensure_future(projector.apply(placement, CUT + 2)),
    ]
    for _ in range(100):  # the writer reads the pending fence again and again
        if fences.reads >= 3:
            break
        await asyncio.sleep(0.05)
    assert fences.reads >= 3
    assert not any(task.done() for task in applying)
    fences.finish()
    counted = sequence <= CUT
    assert await asyncio.gather(*applying) == [counted, True]
    # The placement came after the reason whatever the verdict: the reason is gone.
    assert await shown(engine, "j1") == ("AttemptPreparing", None)
    # Its id is recorded either way: delivered again, it changes nothing.
    assert await recorded(engine, pending.event_id)
    assert await projector.apply(pending, sequence) is False
    assert await shown(engine, "j1") == ("AttemptPreparing", None)
    await projector.close()


async def test_a_fence_undecided_past_the_patience_retries_the_decision_and_its_jobs_later_events(
    engine: AsyncEngine,
) -> None:
    projector = Projector(engine, fences=Fences(), fence_patience=0.3)
    for job_id in ("j1", "j2"):
        await projector.apply(submitted(job_id), 1)
    outcomes = await asyncio.gather(
        projector.apply(JobPending(job_id="j1", reason="late: no room", epoch=OLD_EPOCH), CUT + 1),
        projector.apply(placed("j1", NEW_EPOCH, "node-1", "10.0.0.1"), CUT + 2),
        projector.apply(JobPending(job_id="j2", reason="no room"), CUT + 3),
        return_exceptions=True,
    )
    assert [type(outcome) for outcome in outcomes] == [TemporaryError, TemporaryError, bool]
    # Nothing of j1 was applied past its undecided decision; j2's event was.
    assert await shown(engine, "j1") == ("AttemptCreationPending", None)
    assert await shown(engine, "j2") == ("AttemptCreationPending", "no room")
    await projector.close()


def message(event: EventBase, sequence: int) -> Msg:
    """What the consume loop hands the projection's handler: the event, where the stream stored it."""
    stored = SimpleNamespace(stream=sequence)
    return cast(Msg, SimpleNamespace(data=encode_event(event), metadata=SimpleNamespace(sequence=stored)))


async def test_the_handler_hands_a_decision_in_before_anything_waits_on_its_fence(
    engine: AsyncEngine,
) -> None:
    # The consume loop starts a job's queued messages one after another; the later one (a
    # placement of a scheduler from before fencing) must not overtake the decision being checked.
    fences = Fences()
    projector = Projector(engine, fences=fences)
    handle = projection_handler(projector)
    await handle(message(submitted("j1"), 1))
    handling = [
        asyncio.ensure_future(
            handle(message(JobPending(job_id="j1", reason="no room", epoch=OLD_EPOCH), CUT))
        ),
        asyncio.ensure_future(
            handle(
                message(placed("j1", NEW_EPOCH, "n", "10.0.0.1").model_copy(update={"epoch": None}), CUT + 1)
            )
        ),
    ]
    for _ in range(100):
        if fences.reads:
            break
        await asyncio.sleep(0.05)
    fences.finish()
    await asyncio.gather(*handling)
    assert await shown(engine, "j1") == ("AttemptPreparing", None)
    await projector.close()
