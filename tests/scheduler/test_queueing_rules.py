"""The scheduler's queue as the job stream meets it: what a job config asks of the scheduler,
every announcement whole (its event id included, so a repeat after a restart is dropped by the
bus), the order jobs are tried in, and what each event changes for the jobs waiting."""

from __future__ import annotations

import hashlib
from typing import Any

import pytest

from libs.protocol.events import (
    FailureInfo,
    JobCompleted,
    JobPending,
    JobPreempting,
    JobRetrying,
    JobScheduled,
    JobState,
    JobStopRequested,
    JobSubmitted,
    NodeCordoned,
    NodeLost,
    NodeReported,
)
from libs.protocol.events import TaskPlacement as EventPlacement
from services.scheduler.core.hived import HivedPolicy
from services.scheduler.core.placements import JobDemand, Placed, Preempting, TaskDemand, TaskPlacement
from services.scheduler.core.queueing import (
    REFUSED_EXIT_CODE,
    SchedulerCore,
    demand_from_config,
    refusal,
)
from tests.support.jobs import job_model


def roles(**spec: tuple[int, int, int]) -> dict[str, Any]:
    """taskRoles from role=(instances, cpu, gpu), 100 MB each."""
    return {
        "taskRoles": {
            role: {"instances": n, "resourcePerInstance": {"cpu": cpu, "memoryMB": 100, "gpu": gpu}}
            for role, (n, cpu, gpu) in spec.items()
        }
    }


def submitted(job_id: str, config: dict[str, Any], priority: int = 0, vc: str = "default") -> JobSubmitted:
    return JobSubmitted(
        job_id=job_id, user="u", name=job_id, virtual_cluster=vc, priority=priority, config=job_model(config)
    )


def node(name: str = "n1", cpu: int = 8, gpus: int = 0, memory: int = 4096) -> NodeReported:
    return NodeReported(node_id=name, name=name, address=f"{name}.addr", cpu=cpu, memory_mb=memory, gpus=gpus)


def core_with(*events: Any, policy: Any = None) -> SchedulerCore:
    core = SchedulerCore(policy or HivedPolicy())
    for event in events:
        core.apply(event)
    return core


def plain(events: list[Any]) -> list[dict[str, Any]]:
    """The events as published, less the time each was made."""
    return [event.model_dump(exclude={"occurred_at"}) for event in events]


def digest(reason: str) -> str:
    return hashlib.sha256(reason.encode()).hexdigest()[:12]


def reason_of(events: list[Any]) -> str:
    [pending] = events
    assert isinstance(pending, JobPending), pending
    return pending.reason


# -- what a job config asks --------------------------------------------------------------------------


def test_a_config_is_read_into_tasks_with_their_hints_shares_and_defaults() -> None:
    config = {
        "taskRoles": {
            "ps": {"resourcePerInstance": {"cpu": 1, "memoryMB": 512, "gpu": 1}},
            "worker": {"instances": 2, "resourcePerInstance": {"cpu": 4, "memoryMB": 8192, "gpu": 2}},
            "infer": {"instances": 1, "resourcePerInstance": {"cpu": 1, "memoryMB": 512, "gpu": 1}},
        },
        "extras": {
            "hivedScheduler": {
                "jobPriorityClass": "prod",
                "taskRoles": {"worker": {"skuType": "A100", "pinnedCellId": "p3", "affinityGroupName": "g"}},
            },
            "gpuShare": {"taskRoles": {"infer": {"gpuMilli": 250, "gpuMemoryMiB": 2048}}},
        },
    }
    assert demand_from_config("j", "alice", "a", job_model(config)) == JobDemand(
        "j",
        "alice",
        "a",
        100,
        (
            TaskDemand("ps", 0, 1, 512, 1),
            TaskDemand("worker", 0, 4, 8192, 2, "A100", "p3", "g"),
            TaskDemand("worker", 1, 4, 8192, 2, "A100", "p3", "g"),
            TaskDemand("infer", 0, 1, 512, 1, gpu_milli=250, gpu_memory_mib=2048),
        ),
    )


@pytest.mark.parametrize(
    ("name", "number"), [("crit", 1000), ("prod", 100), ("test", 10), ("oppo", -1), ("", 0)]
)
def test_a_priority_class_is_read_as_its_number(name: str, number: int) -> None:
    hived = {"jobPriorityClass": name} if name else {}
    config = {**roles(w=(1, 1, 0)), "extras": {"hivedScheduler": hived}}
    assert demand_from_config("j", "u", "a", job_model(config)).priority == number


def test_a_job_is_refused_with_a_reason_naming_the_bound() -> None:
    assert refusal(job_model(roles(w=(3, 1, 0))), 3) is None
    assert refusal(job_model(roles(w=(4, 1, 0), p=(1, 1, 0))), 4) == (
        "the job asks for 5 tasks, more than the 4 tasks the scheduler places for one job; "
        "submit it with fewer instances"
    )


def test_a_job_whose_submission_cannot_be_read_ends_failed_with_why() -> None:
    core = SchedulerCore(HivedPolicy())
    core.refuse_unreadable("odd", "its submission cannot be read (config.taskRoles.w.instances: bad)")
    why = "The scheduler refused the job: its submission cannot be read (config.taskRoles.w.instances: bad)."
    [completed] = core.decide()
    assert isinstance(completed, JobCompleted)
    assert (completed.event_id, completed.state, completed.diagnostics) == (
        "odd.refused.0",
        JobState.FAILED,
        why,
    )
    assert core.decide() == []
    replayed = SchedulerCore(HivedPolicy())  # after a restart: the submission, then the failure read back
    replayed.refuse_unreadable("odd", "its submission cannot be read")
    replayed.apply(completed)
    assert replayed.decide() == []


def test_a_job_already_queued_is_not_refused_for_an_unreadable_repeat() -> None:
    core = core_with(node(cpu=2), submitted("j", roles(w=(1, 1, 0))))
    core.refuse_unreadable("j", "unreadable")
    [scheduled] = core.decide()
    assert isinstance(scheduled, JobScheduled)


# -- announcements, whole --------------------------------------------------------------------------


def test_a_placed_job_is_announced_with_its_attempt_and_every_placement() -> None:
    core = core_with(node(), submitted("j", roles(w=(2, 2, 0))))
    assert plain(core.decide()) == plain(
        [
            JobScheduled(
                event_id="j.scheduled.0",
                job_id="j",
                attempt=0,
                placements=(
                    EventPlacement(role="w", index=0, node="n1", node_address="n1.addr", gpu_indices=()),
                    EventPlacement(role="w", index=1, node="n1", node_address="n1.addr", gpu_indices=()),
                ),
            )
        ]
    )


def test_a_waiting_job_is_told_why_once_per_reason() -> None:
    core = core_with(node(cpu=2), submitted("j", roles(w=(1, 4, 0))))
    reason = "no healthy node has 4 CPU and 100 MB memory free for w-0 (1 node known)"
    [pending] = core.decide()
    assert plain([pending]) == plain(
        [JobPending(event_id=f"j.pending.0.{digest(reason)}", job_id="j", reason=reason)]
    )
    assert len(pending.event_id) == len("j.pending.0.") + 12
    assert core.waiting_reasons() == {"j": reason}
    core.apply(node(cpu=3))
    assert core.decide() == []  # the same reason, not told again
    core.apply(node("n2", cpu=1))
    assert reason_of(core.decide()) == reason.replace("1 node known", "2 nodes known")
    other = core_with(node(cpu=2), submitted("j", roles(w=(1, 5, 0))))
    assert reason_of(other.decide()) != reason
    assert other.waiting_reasons()["j"].startswith("no healthy node has 5 CPU")


def test_a_reason_read_back_from_the_stream_is_not_told_again() -> None:
    core = core_with(node(cpu=2), submitted("j", roles(w=(1, 4, 0))))
    [pending] = core.decide()
    again = core_with(node(cpu=2), submitted("j", roles(w=(1, 4, 0))), pending)
    assert again.decide() == []


def test_a_refused_job_ends_failed_with_the_whole_failure() -> None:
    core = SchedulerCore(HivedPolicy(), max_job_tasks=3)
    core.apply(submitted("big", roles(w=(4, 1, 0))))
    core.apply(submitted("big", roles(w=(4, 1, 0))))  # a repeat changes nothing
    why = (
        "The scheduler refused the job: the job asks for 4 tasks, more than the 3 tasks the scheduler "
        "places for one job; submit it with fewer instances."
    )
    assert plain(core.decide()) == plain(
        [
            JobCompleted(
                event_id="big.refused.0",
                job_id="big",
                attempt=0,
                state=JobState.FAILED,
                exit_code=REFUSED_EXIT_CODE,
                diagnostics=why,
                failure=FailureInfo(
                    code=REFUSED_EXIT_CODE,
                    phrase="JobRefusedByScheduler",
                    type="permanent",
                    reason=why,
                    solution="Submit the job again within the cluster's limits (GET /api/v2/info).",
                    issuer="PAI_SCHEDULER",
                    causer="USER_JOB",
                ),
            )
        ]
    )
    assert core.queued == []


class Preempts(HivedPolicy):
    """HiveD, except that "high" must first preempt low1 and low2."""

    def decide(self, demand: JobDemand) -> Any:
        if demand.job_id == "high":
            return Preempting("high", ("low1", "low2"), "waiting for 2 lower-priority job(s) to stop")
        return super().decide(demand)


def test_a_preemption_is_announced_per_victim_and_the_preemptor_waits_for_them() -> None:
    core = core_with(node(cpu=8), submitted("high", roles(w=(1, 1, 0))), policy=Preempts())
    reason = "waiting for 2 lower-priority job(s) to stop"
    assert plain(core.decide()) == plain(
        [
            JobPreempting(event_id="low1.preempting.high.0", job_id="low1", by_job_id="high", reason=reason),
            JobPreempting(event_id="low2.preempting.high.0", job_id="low2", by_job_id="high", reason=reason),
        ]
    )
    core.apply(JobCompleted(job_id="low1", attempt=0, state=JobState.STOPPED, exit_code=0))
    assert core.decide() == []  # low2 still runs


# -- order and events ----------------------------------------------------------------------------------


def test_jobs_are_tried_by_priority_then_in_the_order_they_came() -> None:
    core = core_with(
        node(cpu=2),
        submitted("first", roles(w=(1, 1, 0))),
        submitted("urgent", roles(w=(1, 1, 0)), priority=5),
        submitted("second", roles(w=(1, 1, 0))),
    )
    assert core.queued == ["urgent", "first", "second"]
    placed = [e.job_id for e in core.decide() if isinstance(e, JobScheduled)]
    assert placed == ["urgent", "first"]
    assert core.waiting_reasons() == {
        "second": "no healthy node has 1 CPU and 100 MB memory free for w-0 (1 node known)"
    }


def test_new_jobs_alone_are_tried_in_priority_order() -> None:
    core = core_with(node(cpu=1))
    core.decide()
    core.apply(submitted("plain", roles(w=(1, 1, 0))))
    core.apply(submitted("urgent", roles(w=(1, 1, 0)), priority=5))
    [first, second] = core.decide()
    assert (first.job_id, type(first), second.job_id, type(second)) == (
        "urgent",
        JobScheduled,
        "plain",
        JobPending,
    )


def test_a_config_priority_class_wins_over_the_events_priority() -> None:
    config = {**roles(w=(1, 1, 0)), "extras": {"hivedScheduler": {"jobPriorityClass": "test"}}}
    core = core_with(submitted("a", config, priority=50), submitted("b", roles(w=(1, 1, 0)), priority=20))
    assert core.demands()["a"].priority == 10
    assert core.demands()["b"].priority == 20
    assert core.queued == ["b", "a"]


def test_a_scheduled_event_read_back_holds_the_job_and_an_older_attempt_is_ignored() -> None:
    core = core_with(node(cpu=2), submitted("j", roles(w=(1, 2, 0))))
    [scheduled] = core.decide()
    restarted = core_with(node(cpu=2), submitted("j", roles(w=(1, 2, 0))), scheduled)
    assert restarted.running() == [
        (restarted.demands()["j"], Placed("j", (TaskPlacement("w", 0, "n1", "n1.addr", ()),)))
    ]
    assert restarted.decide() == []
    retried = core_with(
        node(cpu=2),
        submitted("j", roles(w=(1, 2, 0))),
        JobRetrying(job_id="j", attempt=0, next_attempt=1, kind="user", counted=True),
        scheduled,  # attempt 0's placement, read after the retry: stale
    )
    [again] = retried.decide()
    assert isinstance(again, JobScheduled)
    assert (again.event_id, again.attempt) == ("j.scheduled.1", 1)


def test_a_retry_frees_the_jobs_place_for_its_next_attempt_and_is_ignored_when_stale() -> None:
    core = core_with(node(cpu=2), submitted("a", roles(w=(1, 2, 0))), submitted("b", roles(w=(1, 2, 0))))
    for event in core.decide():
        core.apply(event)
    core.apply(JobRetrying(job_id="a", attempt=0, next_attempt=1, kind="platform", counted=False))
    assert core.waiting_reasons() == {
        "a": "",
        "b": "no healthy node has 2 CPU and 100 MB memory free for w-0 (1 node known)",
    }
    [placed] = core.decide()
    assert isinstance(placed, JobScheduled)
    assert (placed.job_id, placed.attempt) == ("a", 1)
    core.apply(placed)
    core.apply(JobRetrying(job_id="a", attempt=0, next_attempt=1, kind="platform", counted=False))
    core.apply(JobRetrying(job_id="zz", attempt=0, next_attempt=1, kind="user", counted=True))
    assert core.decide() == []
    assert [d.job_id for d, _ in core.running()] == ["a"]


def test_a_preemptor_is_not_tried_again_until_its_victims_end() -> None:
    for end in (
        JobCompleted(job_id="v", attempt=0, state=JobState.STOPPED, exit_code=0),
        JobRetrying(job_id="v", attempt=0, next_attempt=1, kind="user", counted=True),
    ):
        core = core_with(node(cpu=2), submitted("v", roles(w=(1, 2, 0))))
        for event in core.decide():
            core.apply(event)
        core.apply(submitted("p", roles(w=(1, 2, 0)), priority=5))
        core.apply(JobPreempting(job_id="v", by_job_id="p", reason="r"))
        assert core.decide() == []
        core.apply(end)
        first, *_ = core.decide()
        assert (first.job_id, type(first)) == ("p", JobScheduled)
    unknown = core_with(node(cpu=2))
    unknown.apply(JobPreempting(job_id="v", by_job_id="nobody", reason="r"))
    unknown.apply(JobPending(job_id="nobody", reason="r"))
    assert unknown.decide() == []


def test_a_lost_node_takes_no_new_job() -> None:
    core = core_with(node("n1"), node("n2"), submitted("a", roles(w=(1, 8, 0))))
    core.apply(NodeLost(node_id="n1", name="n1", reason="no heartbeat"))
    core.apply(NodeLost(node_id="n9", name="n9", reason="never seen"))
    [placed] = core.decide()
    assert isinstance(placed, JobScheduled)
    assert placed.placements[0].node == "n2"
    assert [(n.name, n.healthy) for n in core.nodes] == [("n1", False), ("n2", True)]


def test_cordoning_twice_or_uncordoning_a_node_never_cordoned_changes_nothing() -> None:
    core = core_with(node(), submitted("a", roles(w=(1, 1, 0))))
    core.apply(NodeCordoned(node_id="n1", name="n9", cordoned=False, by="admin"))
    [placed] = core.decide()
    assert isinstance(placed, JobScheduled)


def test_a_stop_of_a_placed_job_keeps_its_place_until_it_ends() -> None:
    core = core_with(node(cpu=2), submitted("a", roles(w=(1, 2, 0))))
    for event in core.decide():
        core.apply(event)
    core.apply(JobStopRequested(job_id="a", by="u"))
    core.apply(JobStopRequested(job_id="zz", by="u"))
    core.apply(submitted("b", roles(w=(1, 2, 0))))
    assert reason_of(core.decide()).startswith("no healthy node has 2 CPU")
    assert [d.job_id for d, _ in core.running()] == ["a"]


def test_a_new_policy_tells_every_waiting_job_its_reason_again() -> None:
    core = core_with(node(cpu=2), submitted("a", roles(w=(1, 4, 0))))
    [first] = core.decide()
    policy = HivedPolicy()
    policy.set_nodes(core.nodes)
    core.replace_policy(policy)
    assert core.policy is policy
    assert plain(core.decide()) == plain([first])


def test_a_shared_tasks_share_is_announced_and_read_back_after_a_restart() -> None:
    config = {
        **roles(infer=(1, 1, 1)),
        "extras": {"gpuShare": {"taskRoles": {"infer": {"gpuMilli": 500, "gpuMemoryMiB": 2048}}}},
    }
    core = core_with(node(gpus=2), submitted("j", config))
    [scheduled] = core.decide()
    assert isinstance(scheduled, JobScheduled)
    [where] = scheduled.placements
    assert (where.node, where.gpu_milli, where.gpu_memory_mib, len(where.gpu_indices)) == ("n1", 500, 2048, 1)
    restarted = core_with(node(gpus=2), submitted("j", config), scheduled)
    [(_, placed)] = restarted.running()
    assert placed == Placed("j", (TaskPlacement("infer", 0, "n1", "n1.addr", where.gpu_indices, 500, 2048),))
