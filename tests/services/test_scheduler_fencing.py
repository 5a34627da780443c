"""Fencing by lease epoch on a real nats-server: a deposed scheduler leader's late decision is
ignored by the new leader and by the orchestrator, and never double-allocates."""

from __future__ import annotations

import asyncio
from typing import Any

from nats.aio.msg import Msg

from libs.backbone.connecting import Bus
from libs.backbone.fencing import FenceReader, raise_fence
from libs.backbone.leasing import Lease
from libs.backbone.topology import FENCES, LEASES, ensure_topology, publish_event
from libs.protocol.events import JobCompleted, JobPreempting, JobScheduled, JobState, JobSubmitted
from libs.protocol.fencing import Fence, deposed
from services.orchestrator.handlers import Orchestrator
from services.scheduler.core.hived import HivedPolicy
from services.scheduler.core.queueing import SchedulerCore
from services.scheduler.handlers import SchedulerService
from tests.services.test_scheduler_service import NODE, job, running_scheduler
from tests.support.events import JobEvents


class Recording(Orchestrator):
    """The orchestrator's message handling, with what it would apply recorded instead."""

    def __init__(self, fence: FenceReader) -> None:
        super().__init__(store=None, executor=None, publish=None, fence=fence)  # type: ignore[arg-type]
        self.applied: list[Any] = []

    async def apply(self, job_id: str, message: Any) -> None:
        self.applied.append(message)


async def stalled_leader(bus: Bus) -> Lease:
    """A leader that held the lease and raised its fence; then it stalled, and its lease expired."""
    leases = await bus.js.key_value(LEASES.bucket)
    old = Lease(leases, "scheduler", "old")
    assert await old.acquire(asyncio.Event())
    assert old.epoch is not None
    await raise_fence(bus.js, await bus.js.key_value(FENCES.bucket), old.epoch)
    await leases.purge("scheduler")
    return old


async def deposed_leader_decides(bus: Bus, epoch: int, *events: JobSubmitted) -> None:
    """What a leader of ``epoch`` that knew only the node and ``events`` decides, sent as every
    leader sends its decisions (stamped with its epoch, in its payload and its id)."""
    core = SchedulerCore(HivedPolicy())
    core.apply(NODE)
    for event in events:
        core.apply(event)
    await SchedulerService(bus, core, epoch=epoch)._decide(asyncio.Event())


def test_the_rule_ignores_an_older_epoch_after_a_newer_cut_only() -> None:
    fences = (Fence(5, 100), Fence(9, 200))
    assert deposed(1, 99, fences) is False, "stored before any takeover: it counts"
    assert deposed(1, 150, fences) is True, "after epoch 5 took over: late"
    assert deposed(5, 150, fences) is False
    assert deposed(5, 201, fences) is True
    assert deposed(9, 10_000, fences) is False
    assert deposed(None, 10_000, fences) is False, "a scheduler from before fencing"
    assert deposed(1, 150, (Fence(5, None),)) is None, "a newer fence still being raised: ask again"


async def test_a_deposed_scheduler_leaders_late_decision_is_ignored(bus: Bus, nats_server: Any) -> None:
    await ensure_topology(bus.js)
    seen = JobEvents()
    await bus.js.subscribe("pai.job.>", ordered_consumer=True, cb=seen.on_msg)
    placements: list[Msg] = []

    async def keep(msg: Msg) -> None:
        placements.append(msg)

    await bus.js.subscribe("pai.job.*.job.scheduled", ordered_consumer=True, cb=keep)
    await publish_event(bus.js, NODE)  # 4 CPUs

    old = await stalled_leader(bus)
    assert old.epoch is not None

    async with running_scheduler(nats_server.url, "new"):
        await publish_event(bus.js, job("a", instances=2, cpu=2))  # takes every CPU
        [placed_a] = await seen.wait_for("job.scheduled", "a")
        new_epoch = placed_a.epoch
        assert new_epoch is not None
        assert new_epoch > old.epoch
        await publish_event(bus.js, job("b", instances=1, cpu=1))
        await seen.wait_for("job.pending", "b")

        # The old leader wakes and sends what it had decided before it stalled, as it sends every
        # decision: b on n1. No CPU is free there, since a holds them all under the new leader.
        await deposed_leader_decides(bus, old.epoch, job("b", instances=1, cpu=1))
        await seen.wait_for("job.scheduled", "b", lambda e: e.epoch == old.epoch)

        # The new leader did not count it: once a ends, b is placed by the new leader itself. Its
        # decision is the same decision for the same attempt: only the epoch in its Nats-Msg-Id
        # keeps the stream from dropping it as a repeat of the deposed leader's.
        await publish_event(
            bus.js, JobCompleted(job_id="a", attempt=0, state=JobState.SUCCEEDED, exit_code=0)
        )
        await seen.wait_for("job.scheduled", "b", lambda e: e.epoch == new_epoch, within=20)

    stored = [
        (JobScheduled.model_validate_json(m.data), (m.headers or {}).get("Nats-Msg-Id")) for m in placements
    ]
    assert [(e.job_id, e.epoch, msg_id) for e, msg_id in stored] == [
        ("a", new_epoch, f"a.scheduled.0.e{new_epoch}"),
        ("b", old.epoch, f"b.scheduled.0.e{old.epoch}"),
        ("b", new_epoch, f"b.scheduled.0.e{new_epoch}"),
    ]

    # The orchestrator carries out the new leader's decisions only.
    orchestrator = Recording(await FenceReader.open(bus.js))
    for msg in placements:
        await orchestrator.handle_message(msg)
    carried = [(m.job_id, m.epoch) for m in orchestrator.applied]
    assert carried == [("a", new_epoch), ("b", new_epoch)]


async def test_a_deposed_scheduler_leaders_late_preemption_is_not_counted_by_the_new_leader(
    bus: Bus, nats_server: Any
) -> None:
    """Counted, the preemption would keep its preemptor waiting for a victim that never stops
    (the orchestrator ignores it), though room is free for it elsewhere."""
    await ensure_topology(bus.js)
    seen = JobEvents()
    await bus.js.subscribe("pai.job.>", ordered_consumer=True, cb=seen.on_msg)
    await publish_event(bus.js, NODE)  # 4 CPUs
    old = await stalled_leader(bus)

    async with running_scheduler(nats_server.url, "new"):
        for job_id in ("a", "c"):
            await publish_event(bus.js, job(job_id, instances=1, cpu=2))
            await seen.wait_for("job.scheduled", job_id)
        await publish_event(bus.js, job("b", instances=1, cpu=2))
        await seen.wait_for("job.pending", "b")

        # The old leader had decided to stop a for b; it sends that now, after the new fence.
        late = JobPreempting(
            event_id=f"a.preempting.b.0.e{old.epoch}",
            job_id="a",
            by_job_id="b",
            reason="late",
            epoch=old.epoch,
        )
        await publish_event(bus.js, late)
        await seen.wait_for("job.preempting", "a")

        # c ends: its CPUs fit b, which the new leader places without waiting for a.
        await publish_event(
            bus.js, JobCompleted(job_id="c", attempt=0, state=JobState.SUCCEEDED, exit_code=0)
        )
        [placed_b] = await seen.wait_for("job.scheduled", "b", within=20)
        assert placed_b.epoch is not None
        assert placed_b.epoch > old.epoch
    assert seen.of("job.completed", "a") == []
