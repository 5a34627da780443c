"""A waiting job's reason never gives false comfort: free devices are named as free only where a
task of the job could have them together, in one cell of its VC on one node."""

from __future__ import annotations

from typing import Any

from libs.protocol.vc_fit import demand_of_config, never_fits
from services.rest.core.node_fit import rooms_in_status, sizes_in_status
from services.scheduler.core.hived import HivedPolicy
from services.scheduler.core.placements import JobDemand, NodeInventory, Placed, TaskDemand, Waiting
from services.scheduler.core.user_limits import UserLimitedPolicy
from services.scheduler.core.vc_status import status_report


def nodes(count: int, gpus: int) -> list[NodeInventory]:
    return [NodeInventory(f"n{i}", f"10.0.0.{i}", 16, 65536, gpus, "GPU") for i in range(count)]


def job(job_id: str, gpus: int, tasks: int = 1) -> JobDemand:
    return JobDemand(
        job_id, "alice", "default", 0, tuple(TaskDemand("w", i, 1, 1024, gpus) for i in range(tasks)), True
    )


def test_a_task_wider_than_every_cell_is_told_no_cell_holds_it_on_one_node() -> None:
    policy = HivedPolicy()
    policy.set_nodes(nodes(2, 1))  # cells of 1 GPU each: 2 GPUs free in all
    decision = policy.decide(job("wide", 2))
    assert isinstance(decision, Waiting)
    assert decision.reason.startswith(
        "VC default has no cell of 2 GPUs on one node (its largest: 1 GPU); "
        "a task of the job needs 2 on one node"
    ), decision.reason
    assert "2 of its 2 GPU devices free" not in decision.reason
    # Two tasks of one GPU each fit the same cells.
    assert isinstance(policy.decide(job("narrow", 1, tasks=2)), Placed)


def test_free_devices_spread_over_nodes_are_said_to_be_spread() -> None:
    policy = HivedPolicy()
    policy.set_nodes(nodes(2, 2))
    placed = {}
    for i in range(4):
        decision = policy.decide(job(f"one-{i}", 1))
        assert isinstance(decision, Placed)
        placed[f"one-{i}"] = decision.tasks[0].node
    # One job leaves each node: two devices free, one on each.
    for node in ("n0", "n1"):
        policy.release(next(j for j, n in placed.items() if n == node))
    decision = policy.decide(job("pair", 2))
    assert isinstance(decision, Waiting)
    assert decision.reason.startswith(
        "VC default has 2 of its 4 GPU devices free, at most 1 of them together on one node; "
        "the job needs 2 at once as [2] per task"
    ), decision.reason
    # A job that the free devices do fit is told nothing of the kind.
    decision = policy.decide(job("busy", 1, tasks=3))
    assert isinstance(decision, Waiting)
    assert decision.reason.startswith("VC default has 2 of its 4 GPU devices free; the job needs 3"), (
        decision.reason
    )


def test_such_a_job_is_refused_at_submission_from_the_schedulers_own_report() -> None:
    # What REST judges a submission by: the VC's room in the scheduler's status answer.
    cluster = nodes(2, 1)
    policy = UserLimitedPolicy(HivedPolicy())
    policy.set_nodes(cluster)
    report = status_report(policy, [], {}, {}, cluster, "test")
    sizes = sizes_in_status(report)
    assert sizes is not None
    rooms = rooms_in_status(report, sizes)
    config: dict[str, Any] = {
        "taskRoles": {"w": {"instances": 1, "resourcePerInstance": {"cpu": 1, "memoryMB": 512, "gpu": 2}}}
    }
    why = never_fits(demand_of_config(config), rooms["default"])
    assert why is not None
    assert why.message.startswith("VC default has no cell of 2 GPUs on one node (its largest: 1 GPU)")
    config["taskRoles"]["w"].update(instances=2, resourcePerInstance={"cpu": 1, "memoryMB": 512, "gpu": 1})
    assert never_fits(demand_of_config(config), rooms["default"]) is None
