"""Whose decisions the orchestrator carries out, on a real nats-server with real tasks: one replica
leads at a time (the lease `orchestrator`), and a deposed scheduler leader's late preemption
stops nothing, while the new leader's does."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import structlog

from libs.backbone.connecting import Bus
from libs.backbone.fencing import raise_fence
from libs.backbone.leasing import STANDBY_POLL
from libs.backbone.natsserver import EmbeddedNats
from libs.backbone.topology import FENCES, LEASES, publish_event
from libs.protocol.events import (
    JobPreempting,
    JobScheduled,
    JobState,
    JobStopRequested,
    JobSubmitted,
    TaskPlacement,
)
from libs.protocol.subjects import JOBS_STREAM
from services.orchestrator.adapters.specs import attempt_dir
from services.orchestrator.adapters.state import FrameworkStore
from services.orchestrator.app import DURABLE, OrchestratorSettings, main
from services.orchestrator.core.states import AttemptState
from tests.orchestrator.jobs import job_config
from tests.orchestrator.service_support import publish, submit, watch_jobs
from tests.support.events import JobEvents
from tests.support.waiting import eventually

OLD_EPOCH, NEW_EPOCH = 5, 9


@dataclass
class Replica:
    name: str
    data_dir: Path
    ready: asyncio.Event = field(default_factory=asyncio.Event)
    stop: asyncio.Event = field(default_factory=asyncio.Event)
    task: asyncio.Task[None] | None = None

    def ran(self, job_id: str) -> bool:
        """Whether this replica started a task of the job (its directory is under this data dir)."""
        return attempt_dir(self.data_dir, job_id, 0).is_dir()

    async def halt(self) -> None:
        self.stop.set()
        if self.task is not None:
            await asyncio.wait_for(self.task, 30)


@asynccontextmanager
async def replica(
    nats_server: EmbeddedNats, tmp_path: Path, name: str, **lease: Any
) -> AsyncIterator[Replica]:
    settings = OrchestratorSettings(
        nats_url=nats_server.url,
        data_dir=tmp_path / name,
        stop_grace_seconds=2.0,
        adopt_poll_seconds=0.05,
        instance=name,
        **lease,
    )
    one = Replica(name, settings.data_dir)
    one.task = asyncio.create_task(main(settings, one.stop, ready=one.ready))
    try:
        yield one
    finally:
        await one.halt()


@contextlib.contextmanager
def standing_by(key: str) -> Iterator[asyncio.Event]:
    """Set once an instance says it stands by because another holds the lease ``key``."""
    said = asyncio.Event()

    def notice(_logger: Any, _method: str, entry: Any) -> Any:
        if entry.get("event") == "standing by; another instance holds the lease" and entry.get("key") == key:
            said.set()
        return entry

    with structlog.testing.capture_logs(processors=[notice]):
        yield said


async def first_of(*events: asyncio.Event, within: float = 30) -> None:
    waits = [asyncio.ensure_future(e.wait()) for e in events]
    try:
        await asyncio.wait_for(asyncio.wait(waits, return_when=asyncio.FIRST_COMPLETED), within)
    finally:
        for wait in waits:
            wait.cancel()


async def test_only_one_orchestrator_replica_leads_at_a_time_and_the_next_takes_over_when_it_stops(
    bus: Bus, nats_server: EmbeddedNats, tmp_path: Path
) -> None:
    events = await watch_jobs(bus)
    config = job_config({"worker": (1, "echo done")})
    async with replica(nats_server, tmp_path, "o1", leader_lease=True) as first:
        await asyncio.wait_for(first.ready.wait(), 30)
        with standing_by("orchestrator") as waiting:
            async with replica(nats_server, tmp_path, "o2", leader_lease=True) as second:
                await first_of(waiting, second.ready)
                assert not second.ready.is_set(), "a second replica leads beside the first"
                assert (await (await bus.js.key_value(LEASES.bucket)).get("orchestrator")).value == b"o1"

                await submit(bus, "while-o1", config)
                assert (await events.wait_for("job.completed", "while-o1"))[0].state is JobState.SUCCEEDED
                assert (first.ran("while-o1"), second.ran("while-o1")) == (True, False)

                # o1 stops cleanly and lets go of the lease: o2 takes over within its polls.
                await first.halt()
                await asyncio.wait_for(second.ready.wait(), 30 + STANDBY_POLL)
                await submit(bus, "after-o1", config)
                assert (await events.wait_for("job.completed", "after-o1"))[0].state is JobState.SUCCEEDED
                assert (first.ran("after-o1"), second.ran("after-o1")) == (False, True)


def placed(job_id: str, epoch: int) -> JobScheduled:
    return JobScheduled(
        job_id=job_id,
        attempt=0,
        epoch=epoch,
        placements=(TaskPlacement(role="worker", index=0, node="local", node_address="127.0.0.1"),),
    )


async def test_a_deposed_scheduler_leaders_late_preemption_stops_nothing_and_the_new_leaders_does(
    bus: Bus, nats_server: EmbeddedNats, tmp_path: Path
) -> None:
    events: JobEvents = await watch_jobs(bus)
    config = job_config({"worker": (1, "sleep 300")})
    async with replica(nats_server, tmp_path, "o1") as orchestrator:
        await asyncio.wait_for(orchestrator.ready.wait(), 30)
        # Both jobs placed by the old leader before any takeover: those placements count.
        for job_id in ("kept", "preempted"):
            await publish(
                bus,
                JobSubmitted(
                    job_id=job_id,
                    user="alice",
                    name=job_id,
                    virtual_cluster="default",
                    config=config,
                ),
            )
            await publish(bus, placed(job_id, OLD_EPOCH))
            await events.wait_for("task.started", job_id)

        # A new leader takes over: its fence's cut is the job stream's end now.
        await raise_fence(bus.js, await bus.js.key_value(FENCES.bucket), NEW_EPOCH)
        # The old leader, paused before, wakes and sends the preemption it had decided.
        late = await publish_event(
            bus.js, JobPreempting(job_id="kept", by_job_id="vip", reason="late", epoch=OLD_EPOCH)
        )
        await publish(bus, JobPreempting(job_id="preempted", by_job_id="vip", reason="now", epoch=NEW_EPOCH))
        [retried] = await events.wait_for("job.retrying", "preempted")
        assert (retried.kind, retried.counted) == ("resource", False)

        # Once the orchestrator acknowledged the late preemption, what it decided is stored.
        await eventually(
            lambda: bus.js.consumer_info(JOBS_STREAM, DURABLE),
            lambda info: info.ack_floor.stream_seq >= late.seq,
        )
        stored = await (await FrameworkStore.open(bus.js)).get("kept")
        assert stored is not None
        kept = stored.value
        assert kept.current is not None
        assert (kept.current.attempt, kept.preempting) == (0, False), (
            "a deposed leader's preemption was carried out"
        )
        assert kept.current.state in (AttemptState.PREPARING, AttemptState.RUNNING)

        await publish(bus, JobStopRequested(job_id="kept", by="alice"))
        [done] = await events.wait_for("job.completed", "kept")
    assert (done.state, done.exit_code) == (JobState.STOPPED, -210)
    assert events.of("job.retrying", "kept") == []
