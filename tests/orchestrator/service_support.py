"""Helpers for service tests: watch a job's events on the stream, publish events, run the service."""

from __future__ import annotations

from libs.backbone.connecting import Bus
from libs.backbone.consuming import subscribe_ordered
from libs.backbone.topology import ensure_topology, publish_event
from libs.protocol.events import (
    EventBase,
    JobScheduled,
    JobSubmitted,
    TaskPlacement,
)
from libs.protocol.jobs import JobConfig
from tests.support.events import JobEvents


async def watch_jobs(bus: Bus) -> JobEvents:
    await ensure_topology(bus.js)
    events = JobEvents()
    await subscribe_ordered(bus.js, "pai.job.>", cb=events.on_msg)
    return events


async def submit(bus: Bus, job_id: str, config: JobConfig, attempt: int = 0) -> None:
    await publish(
        bus, JobSubmitted(job_id=job_id, user="alice", name=job_id, virtual_cluster="default", config=config)
    )
    await schedule(bus, job_id, config, attempt)


async def schedule(
    bus: Bus, job_id: str, config: JobConfig, attempt: int, event_id: str | None = None
) -> None:
    placements = tuple(
        TaskPlacement(role=role, index=i, node="local", node_address="127.0.0.1")
        for role, body in config.task_roles.items()
        for i in range(body.instances)
    )
    event = JobScheduled(job_id=job_id, attempt=attempt, placements=placements)
    if event_id is not None:
        event = event.model_copy(update={"event_id": event_id})
    await publish(bus, event)


async def publish(bus: Bus, event: EventBase) -> None:
    await publish_event(bus.js, event)
