"""A job the scheduler can never handle fails at once with a reason, and costs next to nothing.

Such a job reaches the stream only around REST's validation (a job from before the limits, or
a limit raised past the scheduler's own): the core must neither enumerate its tasks nor keep it
waiting forever, and a replay of the stream after a restart must refuse it again just as cheaply.
"""

from __future__ import annotations

import json
import tracemalloc
from typing import Any

import pytest
from pydantic import ValidationError

from libs.protocol.events import (
    JobCompleted,
    JobScheduled,
    JobState,
    JobSubmitted,
    NodeReported,
    decode_event,
)
from services.scheduler.core.hived import HivedPolicy
from services.scheduler.core.queueing import REFUSED_EXIT_CODE, SchedulerCore
from tests.support.jobs import job_dict, job_model


def worker(instances: object, **resources: object) -> dict[str, Any]:
    res = {"cpu": 1, "memoryMB": 100, "gpu": 0, **resources}
    return {"taskRoles": {"worker": {"instances": instances, "resourcePerInstance": res}}}


def submitted(job_id: str, instances: object, **resources: object) -> JobSubmitted:
    config = job_model(worker(instances, **resources))
    return JobSubmitted(job_id=job_id, user="u", name=job_id, virtual_cluster="default", config=config)


def node() -> NodeReported:
    return NodeReported(node_id="n1", name="n1", address="127.0.0.1", cpu=8, memory_mb=4096, gpus=0)


def test_a_billion_instance_job_fails_with_a_reason_in_bounded_memory_and_a_small_job_is_placed() -> None:
    core = SchedulerCore(HivedPolicy())
    core.apply(node())
    tracemalloc.start()
    try:
        core.apply(submitted("huge", 1_000_000_000))
        decisions = core.decide()
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert peak < 1_000_000, f"refusing the job took {peak:,} bytes"
    [refused] = decisions
    assert isinstance(refused, JobCompleted)
    assert (refused.job_id, refused.state, refused.exit_code) == ("huge", JobState.FAILED, REFUSED_EXIT_CODE)
    assert "1,000,000,000 tasks" in refused.diagnostics
    assert refused.failure is not None
    assert refused.failure.type == "permanent"
    assert core.decide() == [], "told once"
    core.apply(refused)  # read back from the stream
    core.apply(submitted("small", 1))
    [placed] = core.decide()
    assert isinstance(placed, JobScheduled)
    assert placed.job_id == "small"


def test_after_a_restart_the_replay_refuses_the_job_again_without_blowing_up() -> None:
    first = SchedulerCore(HivedPolicy())
    first.apply(node())
    first.apply(submitted("huge", 10**30))
    [refused] = first.decide()
    # A new scheduler replays the stream: the submission, then its job.completed, then a new job.
    again = SchedulerCore(HivedPolicy())
    for event in (node(), submitted("huge", 10**30), refused, submitted("small", 1)):
        again.apply(event)
    [placed] = again.decide()
    assert isinstance(placed, JobScheduled)
    # A crash before the job.completed was published: the replay refuses it again, same event id.
    crashed = SchedulerCore(HivedPolicy())
    crashed.apply(submitted("huge", 10**30))
    [repeated] = crashed.decide()
    assert repeated.event_id == refused.event_id, "the bus drops the repeat"


def test_a_job_over_the_schedulers_own_bound_is_failed_not_retried() -> None:
    core = SchedulerCore(HivedPolicy())
    core.apply(node())
    core.apply(submitted("bad", 100_001))
    [refused] = core.decide()
    assert isinstance(refused, JobCompleted)
    assert "100,001 tasks" in refused.diagnostics
    assert core.queued == []


@pytest.mark.parametrize(
    ("instances", "resources", "said"),
    [
        pytest.param(float("inf"), {}, "instances", id="infinite instances"),
        pytest.param("many", {}, "instances", id="instances as text"),
        pytest.param(1.5, {}, "instances", id="half an instance"),
        pytest.param(1, {"cpu": float("inf")}, "resourcePerInstance.cpu", id="infinite cpu"),
        pytest.param(1, {"gpu": "two"}, "resourcePerInstance.gpu", id="gpu as text"),
    ],
)
def test_a_submission_whose_counts_are_not_whole_numbers_never_decodes(
    instances: object, resources: dict[str, object], said: str
) -> None:
    """The scheduler app refuses such a job by its subject (SchedulerCore.refuse_unreadable)."""
    raw = {
        "type": "job.submitted",
        "job_id": "bad",
        "user": "u",
        "name": "bad",
        "virtual_cluster": "default",
        "config": job_dict(worker(instances, **resources)),
    }
    with pytest.raises(ValidationError, match=said.replace(".", r"\.")):
        decode_event(json.dumps(raw, allow_nan=True))


def test_the_bound_is_the_admins_to_set() -> None:
    core = SchedulerCore(HivedPolicy(), max_job_tasks=3)
    core.apply(node())
    core.apply(submitted("four", 4))
    core.apply(submitted("three", 3))
    kinds = sorted(type(event).__name__ for event in core.decide())
    assert kinds == ["JobCompleted", "JobScheduled"]
