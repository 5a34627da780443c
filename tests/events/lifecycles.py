"""A job's life as the platform publishes it, for feeding the bus in gateway tests."""

from __future__ import annotations

from libs.protocol.events import (
    EventBase,
    JobCompleted,
    JobScheduled,
    JobState,
    JobSubmitted,
    TaskCompleted,
    TaskPlacement,
    TaskStarted,
)
from tests.support.jobs import job_model

LIFECYCLE = ["job.submitted", "job.scheduled", "task.started", "task.completed", "job.completed"]


def submitted(job_id: str, user: str, name: str, vc: str = "default") -> JobSubmitted:
    return JobSubmitted(
        job_id=job_id,
        user=user,
        name=name,
        virtual_cluster=vc,
        config=job_model({"name": name, "secrets": {"token": "******"}}),
    )


def rest_of_life(job_id: str) -> list[EventBase]:
    return [
        JobScheduled(
            job_id=job_id,
            attempt=0,
            placements=(TaskPlacement(role="main", index=0, node="n1", node_address="10.0.0.1"),),
        ),
        TaskStarted(job_id=job_id, attempt=0, role="main", index=0, node="n1"),
        TaskCompleted(job_id=job_id, attempt=0, role="main", index=0, exit_code=0),
        JobCompleted(job_id=job_id, attempt=0, state=JobState.SUCCEEDED, exit_code=0),
    ]


def life(job_id: str, user: str, name: str, vc: str = "default") -> list[EventBase]:
    return [submitted(job_id, user, name, vc), *rest_of_life(job_id)]
