"""`HivedPolicy` places whole jobs, explains waits, preempts whole jobs and fits CPU-only tasks."""

from __future__ import annotations

from services.scheduler.core.hived import HivedPolicy
from services.scheduler.core.placements import (
    JobDemand,
    NodeInventory,
    Placed,
    PlacementPolicy,
    Preempting,
    Rejected,
    TaskDemand,
    Waiting,
)
from tests.scheduler.clusters import two_rack_config


def job(
    job_id: str,
    gpus: int,
    tasks: int = 1,
    vc: str = "default",
    priority: int = 0,
    cpu: int = 2,
    lazy: bool = True,
) -> JobDemand:
    return JobDemand(
        job_id,
        "alice",
        vc,
        priority,
        tuple(TaskDemand("worker", i, cpu, 1024, gpus) for i in range(tasks)),
        lazy,
    )


def gpu_nodes(count: int = 4, gpus: int = 8) -> list[NodeInventory]:
    return [NodeInventory(f"node{i}", f"10.0.0.{i}", 32, 131072, gpus, "V100") for i in range(count)]


def test_it_is_a_placement_policy() -> None:
    policy: PlacementPolicy = HivedPolicy()
    assert policy.virtual_clusters() == []


def test_a_gang_lands_on_whole_nodes_of_the_default_vc() -> None:
    policy = HivedPolicy()
    policy.set_nodes(gpu_nodes())
    decision = policy.decide(job("j1", gpus=8, tasks=2))
    assert isinstance(decision, Placed)
    assert len({t.node for t in decision.tasks}) == 2
    assert all(t.gpu_indices == tuple(range(8)) for t in decision.tasks)
    [vc] = policy.virtual_clusters()
    assert (vc.name, vc.capacity_gpus, vc.used_gpus) == ("default", 32, 16)


def test_waiting_names_the_vc_the_type_and_free_versus_needed() -> None:
    policy = HivedPolicy()
    policy.set_nodes(gpu_nodes(2))
    assert isinstance(policy.decide(job("big", gpus=8)), Placed)
    decision = policy.decide(job("j2", gpus=8, tasks=2))
    assert isinstance(decision, Waiting)
    assert "VC default has 8 of its 16 GPU devices free" in decision.reason
    assert "needs 16" in decision.reason


def test_unknown_vc_is_rejected_with_the_known_ones() -> None:
    policy = HivedPolicy(two_rack_config())
    decision = policy.decide(job("j", gpus=1, vc="nope"))
    assert isinstance(decision, Rejected)
    assert "['a', 'b']" in decision.reason


def test_zero_gpu_tasks_fit_by_cpu_and_memory_on_a_gpu_less_machine() -> None:
    policy = HivedPolicy()
    policy.set_nodes([NodeInventory("laptop", "127.0.0.1", 8, 16384, 0)])
    first = policy.decide(job("web", gpus=0, tasks=3, cpu=2))
    assert isinstance(first, Placed)
    assert {t.node for t in first.tasks} == {"laptop"}
    second = policy.decide(job("more", gpus=0, tasks=2, cpu=2))
    assert isinstance(second, Waiting)
    assert "2 CPU" in second.reason
    policy.release("web")
    assert isinstance(policy.decide(job("more", gpus=0, tasks=2, cpu=2)), Placed)


def test_gpu_job_on_a_gpu_less_cluster_waits_with_a_reason() -> None:
    policy = HivedPolicy()
    policy.set_nodes([NodeInventory("laptop", "127.0.0.1", 8, 16384, 0)])
    decision = policy.decide(job("train", gpus=1))
    assert isinstance(decision, Waiting)
    assert "no GPU nodes" in decision.reason


def test_higher_priority_job_preempts_whole_lower_jobs_then_runs() -> None:
    policy = HivedPolicy(two_rack_config())
    policy.set_nodes([NodeInventory(f"n{i}", f"10.0.0.{i}", 16, 65536, 4, "A100") for i in range(4)])
    assert isinstance(policy.decide(job("low", gpus=4, tasks=2, vc="a", lazy=False)), Placed)
    decision = policy.decide(job("high", gpus=4, vc="a", priority=10))
    assert isinstance(decision, Preempting)
    assert decision.victims == ("low",)
    policy.release("low")
    assert isinstance(policy.decide(job("high", gpus=4, vc="a", priority=10)), Placed)


def test_bad_nodes_are_avoided() -> None:
    policy = HivedPolicy()
    nodes = gpu_nodes(2)
    policy.set_nodes([nodes[0].__class__(**{**nodes[0].__dict__, "healthy": False}), nodes[1]])
    decision = policy.decide(job("j", gpus=2))
    assert isinstance(decision, Placed)
    assert decision.tasks[0].node == "node1"


def test_restore_keeps_a_running_job_and_its_devices() -> None:
    policy = HivedPolicy()
    policy.set_nodes(gpu_nodes(2))
    demand = job("j", gpus=8)
    placed = policy.decide(demand)
    assert isinstance(placed, Placed)
    again = HivedPolicy()
    again.set_nodes(gpu_nodes(2))
    again.restore(demand, placed)
    assert again.decide(demand) == placed
    other = again.decide(job("k", gpus=8, tasks=2))
    assert isinstance(other, Waiting)


def test_restart_on_a_smaller_vc_keeps_jobs_running_and_says_which_lost_their_guarantee() -> None:
    nodes = [NodeInventory(f"n{i}", f"10.0.0.{i}", 16, 65536, 4, "A100") for i in range(4)]
    before = HivedPolicy(two_rack_config())
    before.set_nodes(nodes)
    demands = [job("one", gpus=4, vc="a"), job("two", gpus=4, vc="a")]
    placed = [before.decide(d) for d in demands]
    smaller = two_rack_config()
    smaller["virtualClusters"]["a"]["virtualCells"][0]["cellNumber"] = 1
    after = HivedPolicy(smaller)
    after.set_nodes(nodes)
    for d, p in zip(demands, placed, strict=True):
        assert isinstance(p, Placed)
        after.restore(d, p)
    demoted = after.demoted_jobs()
    assert list(demoted) == ["two"]
    assert "no longer fit VC a" in demoted["two"]
    assert isinstance(after.decide(demands[1]), Placed)


def test_a_job_whose_later_gang_cannot_fit_waits_holding_no_gpu() -> None:
    # Two affinity groups: "ps" (one 8-GPU task) fits, "workers" (two 8-GPU tasks) does not while
    # another job holds a node. The job waits, and the cells its first gang was given go back.
    policy = HivedPolicy()
    policy.set_nodes(gpu_nodes(3))
    assert isinstance(policy.decide(job("holder", gpus=8)), Placed)
    gangs = JobDemand(
        "gangs",
        "alice",
        "default",
        0,
        (
            TaskDemand("ps", 0, 2, 1024, 8, affinity_group="ps"),
            TaskDemand("worker", 0, 2, 1024, 8, affinity_group="workers"),
            TaskDemand("worker", 1, 2, 1024, 8, affinity_group="workers"),
        ),
    )
    decision = policy.decide(gangs)
    assert isinstance(decision, Waiting)
    [vc] = policy.virtual_clusters()
    assert (vc.used_gpus, vc.nodes) == (8, {"node0": 8})  # the holder's node, and nothing of the waiting job
    policy.release("holder")
    [vc] = policy.virtual_clusters()
    assert vc.used_gpus == 0
    whole = policy.decide(job("whole-cluster", gpus=8, tasks=3))
    assert isinstance(whole, Placed), whole
    assert len({t.node for t in whole.tasks}) == 3
