"""Fair share inside a VC: among jobs of one priority, the user holding the least of the VC goes
first, and a waiting job knows its place in its VC's queue; a job its VC could never hold is
told so instead of waiting for room that never comes."""

from __future__ import annotations

from typing import Any

import pytest

from libs.protocol.events import JobCompleted, JobPending, JobScheduled, JobState, JobSubmitted, NodeReported
from services.scheduler.core.fair_share import Candidate, Share, fair_order
from services.scheduler.core.hived import HivedPolicy
from services.scheduler.core.queueing import SchedulerCore
from tests.support.jobs import job_model

# One node of four GPUs: VC small holds one of them, VC team-b two, VC default the last.
CLUSTER: dict[str, Any] = {
    "physicalCluster": {
        "cellTypes": {
            "G-2": {"childCellType": "G", "childCellNumber": 2},
            "G-NODE4": {"childCellType": "G-2", "childCellNumber": 2, "isNodeLevel": True},
        },
        "physicalCells": [{"cellType": "G-NODE4", "cellAddress": "n0"}],
    },
    "virtualClusters": {
        "default": {"virtualCells": [{"cellType": "G-NODE4.G", "cellNumber": 1}]},
        "small": {"virtualCells": [{"cellType": "G-NODE4.G", "cellNumber": 1}]},
        "team-b": {"virtualCells": [{"cellType": "G-NODE4.G-2", "cellNumber": 1}]},
    },
}


def job(job_id: str, user: str, vc: str = "small", gpus: int = 1, priority: str = "") -> JobSubmitted:
    extras = {"hivedScheduler": {"jobPriorityClass": priority}} if priority else {}
    config = {
        "taskRoles": {"w": {"instances": 1, "resourcePerInstance": {"cpu": 1, "memoryMB": 100, "gpu": gpus}}},
        "extras": extras,
    }
    return JobSubmitted(job_id=job_id, user=user, name=job_id, virtual_cluster=vc, config=job_model(config))


def done(job_id: str) -> JobCompleted:
    return JobCompleted(job_id=job_id, attempt=0, state=JobState.SUCCEEDED, exit_code=0)


def core_on(cluster: dict[str, Any] = CLUSTER) -> SchedulerCore:
    core = SchedulerCore(HivedPolicy(cluster))
    core.apply(
        NodeReported(node_id="n0", name="n0", address="n0", cpu=64, memory_mb=65536, gpus=4, gpu_model="G")
    )
    return core


def placed(announcements: list[Any]) -> list[str]:
    return [a.job_id for a in announcements if isinstance(a, JobScheduled)]


def run(core: SchedulerCore) -> list[str]:
    """Decide, and feed the announcements back as the stream would."""
    out = core.decide()
    for announcement in out:
        core.apply(announcement)
    return placed(out)


def test_a_user_with_nothing_running_goes_before_the_queue_another_user_filled() -> None:
    core = core_on()
    for i in range(5):
        core.apply(job(f"bob-{i}", "bob"))
    assert run(core) == ["bob-0"]
    core.apply(job("alice-0", "alice"))
    assert run(core) == [], "the VC's one GPU is bob's"
    core.apply(done("bob-0"))
    # Both hold nothing now; bob was served last, so alice's job is next, ahead of bob's older ones.
    assert run(core) == ["alice-0"]
    core.apply(done("alice-0"))
    assert run(core) == ["bob-1"]


def test_a_higher_priority_goes_first_whoever_holds_what() -> None:
    core = core_on()
    core.apply(job("bob-0", "bob"))
    assert run(core) == ["bob-0"]
    core.apply(job("alice-0", "alice"))
    core.apply(job("bob-urgent", "bob", priority="prod"))
    # bob holds the VC, yet his prod job goes before alice's: it takes the VC's cell, and bob's
    # running job goes on without its guarantee (HiveD's lazy preemption).
    assert run(core) == ["bob-urgent"]


@pytest.mark.parametrize(
    ("shares", "expected"),
    [
        # bob's first job goes first by arrival; then he holds a GPU and his second waits.
        pytest.param({}, ["b1", "a1", "c1", "b2"], id="nobody-holds-anything-then-turns"),
        pytest.param(
            {("v", "bob"): Share(gpus=2, served=5)}, ["a1", "c1", "b1", "b2"], id="the-holder-goes-last"
        ),
        pytest.param(
            {("v", "bob"): Share(served=7), ("v", "alice"): Share(served=3)},
            ["c1", "a1", "b1", "b2"],
            id="equal-holdings-least-recently-served-first",
        ),
        pytest.param(
            {("other", "alice"): Share(gpus=8, served=9)},
            ["b1", "a1", "c1", "b2"],
            id="what-a-user-holds-in-another-vc-does-not-count",
        ),
    ],
)
def test_the_fair_order_of_one_priority(shares: dict[tuple[str, str], Share], expected: list[str]) -> None:
    waiting = [
        Candidate("b1", "v", "bob", 0, 1, 1, 1),
        Candidate("b2", "v", "bob", 0, 2, 1, 1),
        Candidate("a1", "v", "alice", 0, 3, 1, 1),
        Candidate("c1", "v", "carol", 0, 4, 1, 1),
    ]
    assert [c.job_id for c in fair_order(waiting, shares)] == expected


def test_priority_before_fair_share_in_the_order() -> None:
    waiting = [Candidate("a", "v", "alice", 0, 1, 1, 1), Candidate("b", "v", "bob", 100, 2, 1, 1)]
    shares = {("v", "bob"): Share(gpus=4, served=1)}
    assert [c.job_id for c in fair_order(waiting, shares)] == ["b", "a"]


def test_a_waiting_job_knows_its_place_in_its_vcs_queue() -> None:
    core = core_on()
    for i in range(6):
        core.apply(job(f"bob-{i}", "bob"))
    run(core)  # bob-0 runs
    core.apply(job("alice-0", "alice"))
    core.apply(job("elsewhere", "carol", vc="team-b", gpus=2))
    run(core)
    assert core.queue_position("bob-0") is None, "a running job has no place in a queue"
    assert core.queue_position("alice-0") == (1, 6, "small")
    assert core.queue_position("bob-1") == (2, 6, "small")
    assert core.queue_position("bob-5") == (6, 6, "small")
    assert core.queue_position("nobody") is None


def test_a_replay_rebuilds_the_same_turns() -> None:
    live = core_on()
    events: list[Any] = []

    def feed(core: SchedulerCore, event: Any) -> None:
        events.append(event)
        core.apply(event)

    for i in range(3):
        feed(live, job(f"bob-{i}", "bob"))
    for announcement in live.decide():
        feed(live, announcement)
    feed(live, job("alice-0", "alice"))
    feed(live, done("bob-0"))
    replayed = core_on()
    for event in events:
        replayed.apply(event)
    assert placed(live.decide()) == placed(replayed.decide()) == ["alice-0"]


def test_a_job_larger_than_its_vc_is_told_it_could_never_start() -> None:
    core = core_on()
    core.apply(job("big", "bob", vc="team-b", gpus=4))
    [pending] = core.decide()
    assert isinstance(pending, JobPending)
    assert pending.reason.startswith(
        "VC team-b holds 2 GPUs in all; the job needs 4 at once, so it could never start there."
    )
    assert "pai vc set team-b --gpus 4" in pending.reason


def test_a_job_that_fits_its_vc_but_not_now_is_told_the_vc_is_busy() -> None:
    core = core_on()
    core.apply(job("first", "bob", vc="team-b", gpus=2))
    core.apply(job("second", "bob", vc="team-b", gpus=2))
    decided = core.decide()
    [pending] = [a for a in decided if isinstance(a, JobPending)]
    assert pending.reason.startswith("VC team-b has 0 of its 2 GPU devices free")


def test_a_task_larger_than_every_cell_of_its_vc_is_told_it_could_never_start() -> None:
    two_singles = {
        **CLUSTER,
        "virtualClusters": {"pairs": {"virtualCells": [{"cellType": "G-NODE4.G", "cellNumber": 2}]}},
    }
    core = core_on(two_singles)
    core.apply(job("wide", "bob", vc="pairs", gpus=2))
    [pending] = core.decide()
    assert isinstance(pending, JobPending)
    assert pending.reason.startswith(
        "VC pairs has no cell of 2 GPUs on one node (its largest: 1 GPU); a task of the job needs 2 "
        "on one node, so it could never start there."
    )


def test_an_opportunistic_job_is_judged_against_the_cluster() -> None:
    core = core_on()
    core.apply(job("oppo", "bob", vc="small", gpus=3, priority="oppo"))
    assert placed(core.decide()) == ["oppo"], "opportunistic jobs use any free cell"
    core.apply(job("huge", "bob", vc="small", gpus=5, priority="oppo"))
    [pending] = core.decide()
    assert isinstance(pending, JobPending)
    assert "more than the cluster's 4 GPUs" in pending.reason
