"""The scheduler's queue over the HiveD policy: gang, order, release, replay."""

from __future__ import annotations

from typing import Any

from libs.protocol.events import (
    JobCompleted,
    JobPending,
    JobRetrying,
    JobScheduled,
    JobState,
    JobStopRequested,
    JobSubmitted,
    NodeCordoned,
    NodeReported,
)
from services.scheduler.core.hived import HivedPolicy
from services.scheduler.core.placements import Decision, JobDemand
from services.scheduler.core.queueing import SchedulerCore
from tests.support.jobs import job_model


def config(**roles: tuple[int, int, int]) -> dict[str, Any]:
    """taskRoles from role=(instances, cpu, gpu)."""
    return {
        "taskRoles": {
            role: {"instances": n, "resourcePerInstance": {"cpu": cpu, "memoryMB": 100, "gpu": gpu}}
            for role, (n, cpu, gpu) in roles.items()
        }
    }


def submitted(job_id: str, cfg: dict[str, Any], priority: int = 0) -> JobSubmitted:
    return JobSubmitted(
        job_id=job_id,
        user="u",
        name=job_id,
        virtual_cluster="default",
        priority=priority,
        config=job_model(cfg),
    )


def node(name: str = "n1", cpu: int = 8, gpus: int = 2) -> NodeReported:
    return NodeReported(node_id=name, name=name, address="127.0.0.1", cpu=cpu, memory_mb=4096, gpus=gpus)


def core_with(*events: object) -> SchedulerCore:
    core = SchedulerCore(HivedPolicy())
    for event in events:
        core.apply(event)  # type: ignore[arg-type]
    return core


def test_a_gang_that_fits_gets_every_task_placed_at_once() -> None:
    core = core_with(node(), submitted("j1", config(server=(1, 2, 0), worker=(2, 2, 1))))
    [decision] = core.decide()
    assert isinstance(decision, JobScheduled)
    assert sorted((p.role, p.index) for p in decision.placements) == [
        ("server", 0),
        ("worker", 0),
        ("worker", 1),
    ]
    gpus = [i for p in decision.placements for i in p.gpu_indices]
    assert sorted(gpus) == [0, 1]


def test_a_gang_that_does_not_fit_places_no_task_and_says_why() -> None:
    # Six CPUs in all, enough for the three tasks together, but no node holds two of them.
    core = core_with(node("n1", cpu=3), node("n2", cpu=3), submitted("j1", config(worker=(3, 2, 0))))
    [decision] = core.decide()
    assert isinstance(decision, JobPending)
    assert "2 CPU" in decision.reason
    assert "worker-2" in decision.reason, "the task that does not fit is named"
    assert core.decide() == [], "the same reason is announced once"


def test_a_gpu_job_on_a_cluster_without_gpus_waits_and_says_what_it_needs() -> None:
    core = core_with(node(gpus=0), submitted("j1", config(worker=(1, 1, 4))))
    [decision] = core.decide()
    assert isinstance(decision, JobPending)
    assert "needs 4 GPUs" in decision.reason
    assert "pai up --gpus N" in decision.reason, "the way to try it on a machine without GPUs"


def test_one_gpu_and_one_node_are_counted_in_the_singular() -> None:
    core = core_with(node(gpus=0), submitted("j1", config(worker=(1, 1, 1))))
    [decision] = core.decide()
    assert isinstance(decision, JobPending)
    assert "needs 1 GPU " in decision.reason
    assert "1 GPUs" not in decision.reason
    core = core_with(node(cpu=4), submitted("j2", config(worker=(1, 8, 0))))
    [decision] = core.decide()
    assert isinstance(decision, JobPending)
    assert "(1 node known)" in decision.reason


def test_higher_priority_jobs_are_placed_first() -> None:
    core = core_with(
        node(cpu=2), submitted("low", config(w=(1, 2, 0))), submitted("high", config(w=(1, 2, 0)), 100)
    )
    decisions = core.decide()
    assert [type(d).__name__ for d in decisions] == ["JobScheduled", "JobPending"]
    assert decisions[0].job_id == "high"


def test_completion_frees_resources_for_the_next_job() -> None:
    core = core_with(node(cpu=2), submitted("a", config(w=(1, 2, 0))), submitted("b", config(w=(1, 2, 0))))
    first = core.decide()
    for event in first:
        core.apply(event)
    core.apply(JobCompleted(job_id="a", attempt=0, state=JobState.SUCCEEDED, exit_code=0))
    [decision] = core.decide()
    assert isinstance(decision, JobScheduled)
    assert decision.job_id == "b"


def test_a_retrying_job_is_placed_again_for_its_next_attempt() -> None:
    core = core_with(node(), submitted("a", config(w=(1, 2, 0))))
    [scheduled] = core.decide()
    core.apply(scheduled)
    core.apply(JobRetrying(job_id="a", attempt=0, next_attempt=1, kind="user", counted=True))
    [again] = core.decide()
    assert isinstance(again, JobScheduled)
    assert again.attempt == 1
    assert again.event_id != scheduled.event_id


def test_replaying_the_stream_rebuilds_allocations_without_double_allocation() -> None:
    live = core_with(node(cpu=4), submitted("a", config(w=(1, 2, 0))), submitted("b", config(w=(1, 2, 0))))
    history = [node(cpu=4), submitted("a", config(w=(1, 2, 0))), submitted("b", config(w=(1, 2, 0)))]
    for event in live.decide():
        history.append(event)
    history.append(submitted("c", config(w=(1, 2, 0))))
    restarted = core_with(*history)
    [decision] = restarted.decide()
    assert isinstance(decision, JobPending), "a and b still hold all 4 CPUs after the restart"


def test_a_stop_before_placement_removes_the_job_from_the_queue() -> None:
    core = core_with(submitted("a", config(w=(1, 2, 0))), JobStopRequested(job_id="a", by="u"), node())
    assert core.decide() == []


class CountingPolicy(HivedPolicy):
    """HiveD, counting how often the queue asks it to decide."""

    def __init__(self) -> None:
        super().__init__()
        self.asked: list[str] = []

    def decide(self, demand: JobDemand) -> Decision:
        self.asked.append(demand.job_id)
        return super().decide(demand)


def test_waiting_jobs_are_tried_again_only_when_capacity_may_have_grown() -> None:
    policy = CountingPolicy()
    core = SchedulerCore(policy)
    for event in (node(cpu=2), submitted("big", config(w=(1, 4, 0)))):
        core.apply(event)
    core.decide()
    core.apply(submitted("small", config(w=(1, 1, 0))))
    core.apply(node(cpu=2))  # the same report again: nothing changed
    core.decide()
    assert policy.asked == ["big", "small"], "a new job is tried alone; the waiting one is not retried"
    core.apply(node(cpu=8))  # the node grew
    core.decide()
    assert policy.asked[-1] == "big"


def test_a_cordoned_node_takes_no_new_job_until_uncordoned_whatever_it_reports() -> None:
    core = core_with(node(), NodeCordoned(node_id="n1", name="n1", reason="GPU double ECC", by="alerter"))
    core.apply(submitted("a", config(w=(1, 1, 0))))
    [waiting] = core.decide()
    assert isinstance(waiting, JobPending)
    core.apply(node())  # the node's own periodic report
    assert core.decide() == []
    core.apply(NodeCordoned(node_id="n1", name="n1", cordoned=False, by="admin"))
    [placed] = core.decide()
    assert isinstance(placed, JobScheduled)
