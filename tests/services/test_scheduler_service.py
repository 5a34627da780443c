"""The scheduler service on a real nats-server: places gangs, rebuilds from the stream, leads alone."""

from __future__ import annotations

import asyncio
import functools
import json
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

from libs.backbone.connecting import Bus, patiently
from libs.backbone.consuming import subscribe_ordered
from libs.backbone.topology import ensure_topology, publish_event
from libs.protocol.events import JobCompleted, JobPending, JobScheduled, JobState, JobSubmitted, NodeReported
from services.scheduler.app import SchedulerSettings, main
from tests.support.events import JobEvents
from tests.support.jobs import job_model


def job(job_id: str, instances: int, cpu: int) -> JobSubmitted:
    config: dict[str, Any] = {
        "taskRoles": {
            "worker": {"instances": instances, "resourcePerInstance": {"cpu": cpu, "memoryMB": 64, "gpu": 0}}
        }
    }
    return JobSubmitted(
        job_id=job_id, user="u", name=job_id, virtual_cluster="default", config=job_model(config)
    )


NODE = NodeReported(node_id="n1", name="n1", address="127.0.0.1", cpu=4, memory_mb=1024, gpus=0)


@asynccontextmanager
async def running_scheduler(url: str, instance: str = "s1") -> AsyncIterator[asyncio.Task[None]]:
    stop = asyncio.Event()
    settings = SchedulerSettings(nats_url=url, instance=instance, service_name="scheduler")
    task = asyncio.create_task(main(settings, stop))
    try:
        yield task
    finally:
        stop.set()
        await asyncio.wait_for(task, 20)


async def test_a_job_is_placed_and_a_restarted_scheduler_remembers_what_is_allocated(
    bus: Bus, nats_server: Any
) -> None:
    await ensure_topology(bus.js)
    seen = JobEvents()
    await bus.js.subscribe("pai.job.>", ordered_consumer=True, cb=seen.on_msg)
    await publish_event(bus.js, NODE)
    async with running_scheduler(nats_server.url):
        await publish_event(bus.js, job("a", instances=2, cpu=2))
        [scheduled] = await seen.wait_for("job.scheduled", "a")
        assert isinstance(scheduled, JobScheduled)
        assert {(p.role, p.index, p.node) for p in scheduled.placements} == {
            ("worker", 0, "n1"),
            ("worker", 1, "n1"),
        }

    # The restarted scheduler replays the stream: job a still holds all 4 CPUs.
    async with running_scheduler(nats_server.url):
        await publish_event(bus.js, job("b", instances=1, cpu=1))
        pending = (await seen.wait_for("job.pending", "b"))[-1]
        assert isinstance(pending, JobPending)
        assert "no healthy node has 1 CPU" in pending.reason
    assert sum(isinstance(e, JobScheduled) and e.job_id == "a" for e in seen.events) == 1


async def test_a_second_scheduler_stands_by_while_the_first_holds_the_lease(
    bus: Bus, nats_server: Any
) -> None:
    await ensure_topology(bus.js)
    seen = JobEvents()
    await bus.js.subscribe("pai.job.>", ordered_consumer=True, cb=seen.on_msg)
    await publish_event(bus.js, NODE)
    async with running_scheduler(nats_server.url, "first"):
        await publish_event(bus.js, job("a", instances=1, cpu=1))
        await seen.wait_for("job.scheduled", "a")
        async with running_scheduler(nats_server.url, "second") as standby:
            await publish_event(bus.js, job("b", instances=1, cpu=1))
            await seen.wait_for("job.scheduled", "b")
            assert not standby.done()
    assert sum(isinstance(e, JobScheduled) for e in seen.events) == 2, "each job placed once, by the leader"


async def test_a_job_submitted_after_the_bus_restarted_is_placed_within_seconds(
    bus: Bus, nats_server: Any
) -> None:
    """The scheduler follows the streams with ordered consumers, which live in the server's memory
    and die with it: missed heartbeats (a second apart) make it recreate them from where it was,
    so placing goes on 2-4 s after the restart (with nats-py's 5 s beats it took 10-20 s)."""
    await ensure_topology(bus.js)
    seen = JobEvents()
    await subscribe_ordered(bus.js, "pai.job.>", cb=seen.on_msg)
    await publish_event(bus.js, NODE)
    async with running_scheduler(nats_server.url):
        await publish_event(bus.js, job("a", instances=1, cpu=1))
        await seen.wait_for("job.scheduled", "a")
        await nats_server.restart()
        await patiently(functools.partial(publish_event, bus.js, job("b", instances=1, cpu=1)))
        [scheduled] = await seen.wait_for("job.scheduled", "b", within=9)
        assert isinstance(scheduled, JobScheduled)
    assert sum(isinstance(e, JobScheduled) and e.job_id == "a" for e in seen.events) == 1


async def test_a_job_whose_submission_cannot_be_read_fails_with_why_instead_of_waiting(
    bus: Bus, nats_server: Any
) -> None:
    """A job.submitted no service can decode (its instances are no whole number) is refused by
    the scheduler from its subject, so the job ends FAILED and says why."""
    await ensure_topology(bus.js)
    seen = JobEvents()
    await bus.js.subscribe("pai.job.*.job.completed", ordered_consumer=True, cb=seen.on_msg)
    await publish_event(bus.js, NODE)
    raw = job("odd", instances=1, cpu=1).model_dump(mode="json")
    raw["config"]["taskRoles"]["worker"]["instances"] = 1.5
    async with running_scheduler(nats_server.url):
        await bus.js.publish("pai.job.odd.job.submitted", json.dumps(raw).encode())
        [completed] = await seen.wait_for("job.completed", "odd")
    assert isinstance(completed, JobCompleted)
    assert completed.state == JobState.FAILED
    assert "its submission cannot be read (config.taskRoles.worker.instances" in completed.diagnostics


async def test_a_takeover_the_bus_cuts_short_stands_by_and_leads_again_without_ending_the_service(
    bus: Bus, nats_server: Any, monkeypatch: Any
) -> None:
    """A new leader raising its fence while the bus elects (a NATS server away) gets a timeout or
    "JetStream temporarily unavailable": the turn is not begun, the replica stands by and takes
    the lease again; before, the error ended the service (its supervisor started it again)."""
    import services.scheduler.app as app

    await ensure_topology(bus.js)
    seen = JobEvents()
    await bus.js.subscribe("pai.job.>", ordered_consumer=True, cb=seen.on_msg)
    await publish_event(bus.js, NODE)
    from libs.backbone.fencing import raise_fence

    cut: list[int] = []

    async def electing(*args: Any, **kwargs: Any) -> Any:
        if not cut:
            cut.append(1)
            raise TimeoutError("nats: timeout")
        return await raise_fence(*args, **kwargs)

    monkeypatch.setattr(app, "raise_fence", electing)
    async with running_scheduler(nats_server.url) as scheduler:
        await publish_event(bus.js, job("a", instances=1, cpu=1))
        await seen.wait_for("job.scheduled", "a")
        assert cut == [1]
        assert not scheduler.done()
