"""What a job meets in `HivedPolicy`, decision by decision: where its tasks land by the CPU and
memory left on each node, the whole reason it waits or is refused, whom it preempts, what a
restart keeps and what a release gives back."""

from __future__ import annotations

from typing import Any

from services.scheduler.core.hived import HivedPolicy
from services.scheduler.core.placements import (
    JobDemand,
    NodeInventory,
    Placed,
    Preempting,
    Rejected,
    TaskDemand,
    TaskPlacement,
    VirtualClusterStatus,
    Waiting,
)
from tests.scheduler.clusters import two_rack_config


def job(
    job_id: str,
    gpus: int = 1,
    tasks: int = 1,
    vc: str = "default",
    priority: int = 0,
    cpu: int = 2,
    memory: int = 1024,
    sku: str | None = None,
    lazy: bool = True,
) -> JobDemand:
    parts = tuple(TaskDemand("worker", i, cpu, memory, gpus, sku_type=sku) for i in range(tasks))
    return JobDemand(job_id, "alice", vc, priority, parts, lazy)


def shared(
    job_id: str,
    *millis: int,
    vc: str = "a",
    priority: int = 0,
    cpu: int = 1,
    sku: str | None = None,
    lazy: bool = True,
) -> JobDemand:
    parts = tuple(
        TaskDemand("infer", i, cpu, 1024, 1, sku_type=sku, gpu_milli=milli) for i, milli in enumerate(millis)
    )
    return JobDemand(job_id, "alice", vc, priority, parts, lazy)


def node(
    name: str, cpu: int = 32, memory: int = 131072, gpus: int = 8, healthy: bool = True
) -> NodeInventory:
    return NodeInventory(name, f"{name}.addr", cpu, memory, gpus, "V100", healthy)


def rack_nodes() -> list[NodeInventory]:
    return [NodeInventory(f"n{i}", f"10.0.0.{i}", 16, 65536, 4, "A100") for i in range(4)]


def placed(decision: Any) -> Placed:
    assert isinstance(decision, Placed), decision
    return decision


def nodes_of(decision: Any) -> list[str]:
    return [t.node for t in placed(decision).tasks]


def devices(policy: HivedPolicy) -> dict[tuple[str, int], dict[str, int]]:
    out: dict[tuple[str, int], dict[str, int]] = {}
    for host in policy.shares.hosts.values():
        for (job_id, _, _), milli in host.tenants.items():
            per = out.setdefault((host.node, host.device), {})
            per[job_id] = per.get(job_id, 0) + milli
    return out


# -- where a GPU job lands by the CPU and memory its node has left -----------------------------------


def test_a_gpu_task_goes_to_the_node_with_the_cpu_it_needs_and_a_full_node_is_left_alone() -> None:
    policy = HivedPolicy()
    policy.set_nodes([node("node0"), node("node1")])
    assert nodes_of(policy.decide(job("cpu-hog", gpus=0, cpu=30))) == ["node0"]
    # node0 has 2 CPU left: a 4-CPU GPU task goes to node1 however HiveD would pack it.
    assert nodes_of(policy.decide(job("small", cpu=4))) == ["node1"]
    # A task of more CPU than half the smallest node is checked against every node.
    assert nodes_of(policy.decide(job("large", cpu=20))) == ["node1"]


def test_a_gpu_task_fits_a_node_with_exactly_the_cpu_it_needs() -> None:
    policy = HivedPolicy()
    policy.set_nodes([node("node0"), node("node1")])
    assert nodes_of(policy.decide(job("cpu-hog", gpus=0, cpu=28))) == ["node0"]
    assert nodes_of(policy.decide(job("exact", cpu=4))) == ["node0"]
    assert nodes_of(policy.decide(job("exact-large", cpu=0, gpus=1))) == ["node0"]


def test_a_gpu_task_goes_to_the_node_with_the_memory_it_needs() -> None:
    policy = HivedPolicy()
    policy.set_nodes([node("node0"), node("node1")])
    assert nodes_of(policy.decide(job("mem-hog", gpus=0, cpu=1, memory=130000))) == ["node0"]
    assert nodes_of(policy.decide(job("small", cpu=1, memory=2048))) == ["node1"]
    assert nodes_of(policy.decide(job("large", cpu=1, memory=70000))) == ["node1"]


def test_a_gpu_task_fits_a_node_with_exactly_the_memory_it_needs() -> None:
    policy = HivedPolicy()
    policy.set_nodes([node("node0"), node("node1")])
    assert nodes_of(policy.decide(job("mem-hog", gpus=0, cpu=1, memory=131072 - 4096))) == ["node0"]
    assert nodes_of(policy.decide(job("exact", cpu=1, memory=4096))) == ["node0"]


def test_a_released_node_is_whole_again_for_the_next_gpu_job() -> None:
    policy = HivedPolicy()
    policy.set_nodes([node("node0"), node("node1")])
    assert nodes_of(policy.decide(job("cpu-hog", gpus=0, cpu=30))) == ["node0"]
    policy.release("cpu-hog")
    assert nodes_of(policy.decide(job("small", cpu=4))) == ["node0"]
    assert nodes_of(policy.decide(job("large", cpu=20, gpus=7))) == ["node0"]


def test_a_node_reported_again_keeps_what_its_jobs_hold() -> None:
    policy = HivedPolicy()
    nodes = [node("node0"), node("node1")]
    policy.set_nodes(nodes)
    assert nodes_of(policy.decide(job("cpu-hog", gpus=0, cpu=30))) == ["node0"]
    policy.set_nodes(nodes)
    assert nodes_of(policy.decide(job("small", cpu=4))) == ["node1"]
    assert nodes_of(policy.decide(job("hog-2", gpus=0, cpu=28))) == ["node1"]
    over = policy.decide(job("more", gpus=0, cpu=3))
    assert over == Waiting(
        "more", "no healthy node has 3 CPU and 1024 MB memory free for worker-0 (2 nodes known)"
    )


def test_a_gang_whose_tasks_together_overrun_their_node_waits_naming_it() -> None:
    policy = HivedPolicy()
    policy.set_nodes([node("node0")])
    decision = policy.decide(job("pair", gpus=1, tasks=2, cpu=20))
    assert decision == Waiting("pair", "node node0 lacks the CPU (20) or memory (1024 MB) for worker-1")
    assert policy.virtual_clusters()[0].used_gpus == 0
    assert nodes_of(policy.decide(job("after", gpus=8, cpu=32))) == ["node0"]


def test_a_gang_of_one_node_fits_exactly_its_memory() -> None:
    policy = HivedPolicy()
    policy.set_nodes([node("node0", memory=16384)])
    assert nodes_of(policy.decide(job("pair", gpus=1, tasks=2, cpu=1, memory=8192))) == ["node0"] * 2
    assert policy.decide(job("more", gpus=1, cpu=1, memory=1)) == Waiting(
        "more",
        "VC default has 6 of its 8 GPU devices free; the job needs 1 at once as [1] per task "
        "(have to use at least one non-suggested node node0 when scheduling in VC default)",
    )


# -- CPU-only tasks --------------------------------------------------------------------------------


def test_cpu_only_tasks_take_the_node_they_fill_best_and_keep_big_nodes_whole() -> None:
    policy = HivedPolicy()
    policy.set_nodes([node("small", cpu=8, gpus=0), node("big", cpu=32, gpus=0)])
    assert nodes_of(policy.decide(job("web", gpus=0, cpu=1))) == ["small"]
    policy.release("web")
    assert nodes_of(policy.decide(job("batch", gpus=0, cpu=26, memory=1))) == ["big"]
    # big has 6 CPU free, small 8: the 4-CPU task goes where it leaves the least.
    assert nodes_of(policy.decide(job("web", gpus=0, cpu=4))) == ["big"]


def test_cpu_only_tasks_share_the_memory_of_their_node() -> None:
    policy = HivedPolicy()
    policy.set_nodes([node("only", memory=16384, gpus=0)])
    assert policy.decide(job("three", gpus=0, tasks=3, cpu=1, memory=8192)) == Waiting(
        "three", "no healthy node has 1 CPU and 8192 MB memory free for worker-2 (1 node known)"
    )
    assert nodes_of(policy.decide(job("two", gpus=0, tasks=2, cpu=1, memory=8192))) == ["only", "only"]
    assert isinstance(policy.decide(job("one", gpus=0, cpu=1, memory=1)), Waiting)
    policy.release("two")
    assert nodes_of(policy.decide(job("one", gpus=0, cpu=1, memory=16384))) == ["only"]


def test_a_job_of_gpu_and_cpu_only_tasks_places_both_with_their_addresses() -> None:
    policy = HivedPolicy()
    policy.set_nodes([node("gpu0"), node("cpu0", gpus=0)])
    demand = JobDemand(
        "mixed",
        "alice",
        "default",
        0,
        (TaskDemand("trainer", 0, 2, 1024, 2), TaskDemand("board", 0, 1, 512, 0)),
    )
    decision = policy.decide(demand)
    assert decision == Placed(
        "mixed",
        (
            TaskPlacement("trainer", 0, "gpu0", "gpu0.addr", (0, 1)),
            TaskPlacement("board", 0, "gpu0", "gpu0.addr", ()),
        ),
    )


def test_memory_alone_counts_for_a_task_of_no_cpu() -> None:
    policy = HivedPolicy()
    policy.set_nodes([node("only", cpu=4, memory=4096, gpus=0)])
    assert nodes_of(policy.decide(job("mem", gpus=0, cpu=0, memory=4096))) == ["only"]
    assert policy.decide(job("more", gpus=0, cpu=1, memory=1)) == Waiting(
        "more", "no healthy node has 1 CPU and 1 MB memory free for worker-0 (1 node known)"
    )
    assert nodes_of(policy.decide(job("cpu", gpus=0, cpu=4, memory=0))) == ["only"]
    assert policy.decide(job("again", gpus=0, cpu=1, memory=0)) == Waiting(
        "again", "no healthy node has 1 CPU and 0 MB memory free for worker-0 (1 node known)"
    )


# -- the whole reason a job waits, is refused or preempts -----------------------------------------


def test_a_gpu_job_waits_for_gpu_nodes_naming_what_it_needs() -> None:
    policy = HivedPolicy()
    policy.set_nodes([node("laptop", gpus=0)])
    assert policy.decide(job("train", gpus=2, tasks=2)) == Waiting(
        "train",
        "the cluster has no GPU nodes yet; the job needs 4 GPUs "
        "(on a machine without GPUs, declare simulated ones with `pai up --gpus N`)",
    )
    assert policy.decide(shared("infer", 500, 250, vc="default")) == Waiting(
        "infer",
        "the cluster has no GPU nodes yet; the job needs 0.75 GPU shared "
        "(on a machine without GPUs, declare simulated ones with `pai up --gpus N`)",
    )


def test_a_gang_that_does_not_fit_waits_with_the_whole_reason() -> None:
    policy = HivedPolicy()
    policy.set_nodes([node("node0"), node("node1")])
    placed(policy.decide(job("holder", gpus=8)))
    assert policy.decide(job("gang", gpus=8, tasks=2)) == Waiting(
        "gang",
        "VC default has 8 of its 16 GPU devices free; the job needs 16 at once as [8 + 8] per task "
        "(insufficient capacity when scheduling in VC default)",
    )


def test_a_typed_job_waits_naming_its_device_type() -> None:
    policy = HivedPolicy(two_rack_config())
    placed(policy.decide(job("all", gpus=4, tasks=2, vc="a", sku="A100")))
    assert policy.decide(job("one", vc="a", sku="A100")) == Waiting(
        "one",
        "VC a has 0 of its 8 A100 devices free; the job needs 1 at once as [1] per task "
        "(insufficient capacity when scheduling in VC a)",
    )


def test_an_opportunistic_job_waits_naming_the_free_devices_of_the_whole_cluster() -> None:
    policy = HivedPolicy(two_rack_config())
    policy.set_nodes(rack_nodes())
    placed(policy.decide(job("a-all", gpus=4, tasks=2, vc="a")))
    placed(policy.decide(job("b-all", gpus=4, tasks=2, vc="b")))
    assert policy.decide(job("oppo", vc="a", priority=-1)) == Waiting(
        "oppo",
        "the cluster has 0 of 16 GPU devices free for opportunistic jobs; the job needs 1 at once "
        "as [1] per task (insufficient capacity when scheduling in physical cluster)",
    )


def test_an_opportunistic_job_counts_only_healthy_free_devices() -> None:
    policy = HivedPolicy(two_rack_config())
    nodes = rack_nodes()
    policy.set_nodes([nodes[0], nodes[1], nodes[2], NodeInventory("n3", "x", 16, 65536, 4, "A100", False)])
    placed(policy.decide(job("a-all", gpus=4, tasks=2, vc="a")))
    placed(policy.decide(job("b-one", gpus=4, vc="b")))
    decision = policy.decide(job("oppo", gpus=4, tasks=2, vc="a", priority=-1))
    assert isinstance(decision, Waiting)
    assert decision.reason.startswith(
        "the cluster has 0 of 16 GPU devices free for opportunistic jobs; the job needs 8 at once as [4 + 4]"
    )


def test_a_shared_job_waits_naming_its_share() -> None:
    policy = HivedPolicy(two_rack_config())
    placed(policy.decide(job("all", gpus=4, tasks=2, vc="a")))
    assert policy.decide(shared("infer", 500)) == Waiting(
        "infer",
        "VC a has 0 of its 8 GPU devices free; the job needs 1 at once as [0.5] per task "
        "(insufficient capacity when scheduling in VC a)",
    )


def test_a_vc_without_a_device_type_explains_its_wait_over_the_types_it_has() -> None:
    policy = HivedPolicy(two_type_config())
    placed(policy.decide(job("all", gpus=4, tasks=2, vc="a")))
    decision = policy.decide(job("more", vc="a"))
    assert isinstance(decision, Waiting)
    assert decision.reason.startswith("VC a has 0 of its 8 GPU devices free; the job needs 1 at once")


def test_an_unknown_device_type_is_refused_whole_for_whole_and_shared_tasks() -> None:
    policy = HivedPolicy(two_rack_config())
    expected = "pod {pod}: leaf cell type H100 does not exist in the cluster; use one of ['A100']"
    assert policy.decide(job("whole", vc="a", sku="H100")) == Rejected(
        "whole", expected.format(pod="whole/worker-0")
    )
    assert policy.decide(shared("part", 500, sku="H100")) == Rejected(
        "part", expected.format(pod="part/gpu-share-0")
    )
    assert policy.shares.hosts == {}


def test_preemption_names_its_victims_and_the_vc_and_keeps_the_victims_running() -> None:
    policy = HivedPolicy(two_rack_config())
    policy.set_nodes(rack_nodes())
    placed(policy.decide(job("low", gpus=4, tasks=2, vc="a", lazy=False)))
    decision = policy.decide(job("high", gpus=4, vc="a", priority=10))
    assert decision == Preempting("high", ("low",), "waiting for 1 lower-priority job(s) to stop in VC a")
    assert placed(policy.decide(job("low", gpus=4, tasks=2, vc="a", lazy=False))).job_id == "low"


def test_a_placed_job_is_answered_with_its_id() -> None:
    policy = HivedPolicy(two_rack_config())
    decision = policy.decide(job("mine", gpus=2, vc="b"))
    assert decision == Placed("mine", (TaskPlacement("worker", 0, "n0", "n0", (0, 1)),))
    assert policy.decide(job("mine", gpus=2, vc="b")) is decision


# -- shared GPUs -----------------------------------------------------------------------------------


def test_the_largest_shares_of_a_job_are_placed_first_so_they_pack_onto_fewer_devices() -> None:
    policy = HivedPolicy(two_rack_config())
    decision = placed(policy.decide(shared("mix", 300, 300, 700, 700)))
    assert len({(t.node, t.gpu_indices) for t in decision.tasks}) == 2
    assert sorted(sum(v.values()) for v in devices(policy).values()) == [1000, 1000]


def test_a_shared_task_is_placed_with_its_node_address() -> None:
    policy = HivedPolicy()
    policy.set_nodes([node("node0")])
    decision = policy.decide(shared("infer", 500, vc="default"))
    [task] = placed(decision).tasks
    assert (task.node, task.node_address, task.gpu_milli) == ("node0", "node0.addr", 500)


def test_a_share_leaves_the_cpu_its_jobs_other_tasks_took_on_the_node() -> None:
    policy = HivedPolicy()
    policy.set_nodes([node("n0", cpu=4, gpus=2), node("n1", cpu=4, gpus=2)])
    demand = JobDemand(
        "both",
        "alice",
        "default",
        0,
        (TaskDemand("train", 0, 3, 1024, 1), TaskDemand("infer", 0, 2, 1024, 1, gpu_milli=500)),
    )
    decision = placed(policy.decide(demand))
    train, infer = decision.tasks
    assert train.node != infer.node


def test_shares_of_one_job_fill_a_node_to_its_last_cpu_and_no_further() -> None:
    policy = HivedPolicy()
    policy.set_nodes([node("n0", cpu=4, gpus=2), node("n1", cpu=4, gpus=2)])
    decision = placed(policy.decide(shared("four", 250, 250, 250, 250, vc="default", cpu=2)))
    assert sorted(t.node for t in decision.tasks) == ["n0", "n0", "n1", "n1"]


def test_a_share_opens_a_device_on_a_node_with_exactly_the_cpu_it_needs() -> None:
    policy = HivedPolicy()
    policy.set_nodes([node("n0", cpu=4, gpus=2), node("n1", cpu=4, gpus=2)])
    assert nodes_of(policy.decide(job("hog", gpus=0, cpu=2))) == ["n0"]
    assert nodes_of(policy.decide(shared("exact", 500, vc="default", cpu=2))) == ["n0"]


def test_a_restarted_scheduler_fills_the_devices_its_shared_jobs_hold() -> None:
    first = HivedPolicy(two_rack_config())
    demand = shared("p", 500)
    decision = placed(first.decide(demand))
    again = HivedPolicy(two_rack_config())
    again.restore(demand, decision)
    [device] = devices(again)
    after = placed(again.decide(shared("q", 500)))
    assert (after.tasks[0].node, after.tasks[0].gpu_indices) == (device[0], (device[1],))
    assert devices(again) == {device: {"p": 500, "q": 500}}
    again.release("p")
    again.release("q")
    assert again.shares.hosts == {}
    assert [v.used_gpus for v in again.virtual_clusters()] == [0, 0]


def test_a_restored_share_keeps_the_thousandths_its_placement_says() -> None:
    first = HivedPolicy(two_rack_config())
    decision = placed(first.decide(shared("p", 300)))
    again = HivedPolicy(two_rack_config())
    again.restore(shared("p", 600), decision)
    assert list(devices(again).values()) == [{"p": 300}]
    third = HivedPolicy(two_rack_config())
    task = decision.tasks[0]
    bare = Placed(
        "p", (TaskPlacement(task.role, task.index, task.node, task.node_address, task.gpu_indices),)
    )
    third.restore(shared("p", 600), bare)
    assert list(devices(third).values()) == [{"p": 600}]


def test_a_restored_shared_job_is_preempted_whole_or_demoted_as_it_asked() -> None:
    first = HivedPolicy(two_rack_config())
    lazy = shared("lazy", 500, vc="b")
    strict = shared("strict", 500, vc="b", lazy=False)
    decisions = [placed(first.decide(lazy)), placed(first.decide(strict))]
    again = HivedPolicy(two_rack_config())
    again.restore(lazy, decisions[0])
    high = job("high", gpus=4, tasks=2, vc="b", priority=50, lazy=False)
    assert nodes_of(again.decide(high)) == ["n2", "n3"]
    assert again.demoted_jobs() == {
        "lazy": "running without its VC guarantee (preemptible): a higher-priority job took its cells in VC b"
    }
    again = HivedPolicy(two_rack_config())
    again.restore(strict, decisions[1])
    assert again.decide(high) == Preempting(
        "high", ("strict",), "waiting for 1 lower-priority job(s) to stop in VC b"
    )
    again.release("strict")
    assert again.shares.hosts == {}
    assert nodes_of(again.decide(high)) == ["n0", "n1"]


def test_a_restored_gang_is_the_victim_of_a_preemption_by_its_job_name() -> None:
    first = HivedPolicy(two_rack_config())
    first.set_nodes(rack_nodes())
    demand = job("low", gpus=4, tasks=2, vc="a", lazy=False)
    decision = placed(first.decide(demand))
    again = HivedPolicy(two_rack_config())
    again.set_nodes(rack_nodes())
    again.restore(demand, decision)
    assert again.decide(job("high", gpus=4, vc="a", priority=10)) == Preempting(
        "high", ("low",), "waiting for 1 lower-priority job(s) to stop in VC a"
    )
    again.release("low")
    assert isinstance(again.decide(job("high", gpus=4, vc="a", priority=10)), Placed)
    assert [v.used_gpus for v in again.virtual_clusters()] == [4, 0]


def test_a_restored_job_holds_its_cpu_until_released() -> None:
    first = HivedPolicy()
    first.set_nodes([node("only", cpu=8, memory=8192)])
    demand = job("run", gpus=1, cpu=6, memory=6000)
    decision = placed(first.decide(demand))
    again = HivedPolicy()
    again.set_nodes([node("only", cpu=8, memory=8192)])
    again.restore(demand, decision)
    assert again.decide(job("cpu", gpus=0, cpu=3, memory=1)) == Waiting(
        "cpu",
        "no healthy node has 3 CPU and 1 MB memory free for cpu-only-0 (1 node known)".replace(
            "cpu-only-0", "worker-0"
        ),
    )
    assert nodes_of(again.decide(job("fits", gpus=0, cpu=2, memory=2192))) == ["only"]
    again.release("run")
    again.release("fits")
    assert nodes_of(again.decide(job("whole", gpus=0, cpu=8, memory=8192))) == ["only"]


def test_virtual_clusters_report_capacity_use_and_nodes() -> None:
    policy = HivedPolicy(two_rack_config())
    placed(policy.decide(job("j", gpus=4, vc="a")))
    assert policy.virtual_clusters() == [
        VirtualClusterStatus("a", 8, 4, 8, {"n0": 4}),
        VirtualClusterStatus("b", 8, 0, 8, {}),
    ]


def test_the_config_in_force_is_the_one_given_or_the_one_derived_from_the_nodes() -> None:
    given = HivedPolicy(two_rack_config())
    assert given.config_document() == two_rack_config()
    derived = HivedPolicy()
    assert derived.config_document() is None
    derived.set_nodes([node("node0")])
    document = derived.config_document()
    assert document is not None
    assert list(document["virtualClusters"]) == ["default"]


def test_a_cpu_only_job_on_no_known_node_waits_naming_none() -> None:
    policy = HivedPolicy()
    assert policy.decide(job("web", gpus=0)) == Waiting(
        "web", "no healthy node has 2 CPU and 1024 MB memory free for worker-0 (0 nodes known)"
    )
    policy.release("never-seen")


def test_two_jobs_can_each_take_half_of_a_nodes_memory() -> None:
    policy = HivedPolicy()
    policy.set_nodes([node("only", memory=16384, gpus=0)])
    assert nodes_of(policy.decide(job("first", gpus=0, cpu=1, memory=8192))) == ["only"]
    assert nodes_of(policy.decide(job("second", gpus=0, cpu=1, memory=8192))) == ["only"]
    policy.release("first")
    policy.release("second")
    assert nodes_of(policy.decide(job("whole", gpus=0, cpu=32, memory=16384))) == ["only"]
    assert isinstance(policy.decide(job("more", gpus=0, cpu=1, memory=1)), Waiting)


def test_a_task_of_no_cpu_and_no_memory_is_placed_and_released() -> None:
    policy = HivedPolicy()
    policy.set_nodes([node("node0")])
    assert nodes_of(policy.decide(job("tiny", gpus=1, cpu=0, memory=0))) == ["node0"]
    policy.release("tiny")
    assert policy.virtual_clusters()[0].used_gpus == 0


def test_a_node_reported_again_keeps_exactly_what_its_jobs_hold() -> None:
    policy = HivedPolicy()
    nodes = [node("node0"), node("node1")]
    policy.set_nodes(nodes)
    assert nodes_of(policy.decide(job("hog", gpus=0, cpu=30, memory=131072 - 2048))) == ["node0"]
    policy.set_nodes(nodes)
    assert nodes_of(policy.decide(job("exact", cpu=2, memory=2048))) == ["node0"]


def test_a_new_node_keeps_the_running_jobs_on_their_devices() -> None:
    policy = HivedPolicy()
    policy.set_nodes([node("node0")])
    assert nodes_of(policy.decide(job("first", gpus=8))) == ["node0"]
    policy.set_nodes([node("node0"), node("node1")])
    assert nodes_of(policy.decide(job("second", gpus=8))) == ["node1"]
    assert isinstance(policy.decide(job("third", gpus=1)), Waiting)
    policy.release("first")
    assert nodes_of(policy.decide(job("third", gpus=1))) == ["node0"]


def test_a_new_node_keeps_the_shared_devices_in_use() -> None:
    policy = HivedPolicy()
    policy.set_nodes([node("node0", gpus=1)])
    [task] = placed(policy.decide(shared("half", 500, vc="default"))).tasks
    assert (task.node, task.gpu_indices) == ("node0", (0,))
    policy.set_nodes([node("node0", gpus=1), node("node1", gpus=1)])
    assert nodes_of(policy.decide(job("whole", gpus=1))) == ["node1"]
    assert devices(policy) == {("node0", 0): {"half": 500}}
    assert nodes_of(policy.decide(shared("other", 500, vc="default"))) == ["node0"]


def test_a_node_that_recovers_takes_jobs_again() -> None:
    policy = HivedPolicy()
    policy.set_nodes([node("node0", healthy=False), node("node1")])
    assert nodes_of(policy.decide(job("first", gpus=8))) == ["node1"]
    policy.set_nodes([node("node0"), node("node1")])
    assert nodes_of(policy.decide(job("second", gpus=8))) == ["node0"]


def test_a_restored_opportunistic_job_keeps_running_outside_every_guarantee() -> None:
    first = HivedPolicy(two_rack_config())
    demand = job("oppo", gpus=4, vc="a", priority=-1)
    decision = placed(first.decide(demand))
    again = HivedPolicy(two_rack_config())
    again.restore(demand, decision)
    assert again.demoted_jobs() == {}
    assert again.decide(demand) == decision
    again.release("oppo")
    assert [v.used_gpus for v in again.virtual_clusters()] == [0, 0]


def test_a_job_restored_on_a_node_that_left_the_cluster_is_still_known() -> None:
    first = HivedPolicy(two_rack_config())
    demand = job("gone", gpus=1, vc="a")
    gone = Placed("gone", (TaskPlacement("worker", 0, "n9", "n9", (0,)),))
    first.restore(demand, gone)
    assert first.decide(demand) == gone
    first.release("gone")


def test_a_restored_gang_holds_each_of_its_tasks_cpu() -> None:
    first = HivedPolicy()
    first.set_nodes([node("only", cpu=8)])
    demand = job("pair", gpus=1, tasks=2, cpu=3)
    decision = placed(first.decide(demand))
    again = HivedPolicy()
    again.set_nodes([node("only", cpu=8)])
    again.restore(demand, decision)
    assert nodes_of(again.decide(job("fits", gpus=0, cpu=2))) == ["only"]
    assert isinstance(again.decide(job("over", gpus=0, cpu=1)), Waiting)


def test_a_restored_share_is_inside_its_vc_guarantee() -> None:
    first = HivedPolicy(two_rack_config())
    demand = shared("p", 500)
    decision = placed(first.decide(demand))
    again = HivedPolicy(two_rack_config())
    again.restore(demand, decision)
    assert again.demoted_jobs() == {}
    assert [v.used_gpus for v in again.virtual_clusters()] == [1, 0]


def test_a_lazy_job_keeps_running_demoted_when_a_higher_priority_job_takes_its_cells() -> None:
    policy = HivedPolicy(two_rack_config())
    policy.set_nodes(rack_nodes())
    placed(policy.decide(job("low", gpus=4, vc="a")))
    placed(policy.decide(shared("share", 500, vc="a")))
    high = policy.decide(job("high", gpus=4, tasks=2, vc="a", priority=10))
    assert isinstance(high, Placed)
    why = "running without its VC guarantee (preemptible): a higher-priority job took its cells in VC a"
    assert policy.demoted_jobs() == {"low": why, "share": why}


def test_a_preemption_reserves_the_cells_against_an_equal_rival() -> None:
    policy = HivedPolicy(two_rack_config())
    policy.set_nodes(rack_nodes())
    placed(policy.decide(job("low", gpus=4, tasks=2, vc="a", lazy=False)))
    assert isinstance(policy.decide(job("high", gpus=4, vc="a", priority=10)), Preempting)
    rival = policy.decide(job("rival", gpus=4, tasks=2, vc="a", priority=10))
    assert isinstance(rival, Waiting), rival


def test_a_reservation_a_shared_job_did_not_need_in_the_end_is_given_back() -> None:
    policy = HivedPolicy(two_rack_config())
    placed(policy.decide(job("low", gpus=4, tasks=2, vc="b", lazy=False)))
    high = shared("high", 500, 500, vc="b", priority=50)
    first = policy.decide(high)
    assert first == Preempting("high", ("low",), "waiting for 1 lower-priority job(s) to stop in VC b")
    policy.release("low")
    decision = placed(policy.decide(high))
    assert len({(t.node, t.gpu_indices) for t in decision.tasks}) == 1
    assert [v.used_gpus for v in policy.virtual_clusters()] == [0, 1]


def two_type_config() -> dict[str, Any]:
    """The two racks of A100 plus one node of two T4, which only VC b has."""
    config = two_rack_config()
    physical = config["physicalCluster"]
    physical["skuTypes"]["T4"] = {"gpu": 1, "cpu": 4, "memory": "16Gi"}
    physical["cellTypes"]["T4-NODE"] = {"childCellType": "T4", "childCellNumber": 2, "isNodeLevel": True}
    physical["physicalCells"].append({"cellType": "T4-NODE", "cellAddress": "t0"})
    config["virtualClusters"]["b"]["virtualCells"].append({"cellType": "T4-NODE", "cellNumber": 1})
    return config


def test_a_typed_task_lands_on_its_device_type_whole_or_shared() -> None:
    policy = HivedPolicy(two_type_config())
    assert nodes_of(policy.decide(job("whole", vc="b", sku="T4"))) == ["t0"]
    assert nodes_of(policy.decide(shared("part", 500, vc="b", sku="T4"))) == ["t0"]
    assert policy.decide(job("more", gpus=2, vc="b", sku="T4")) == Waiting(
        "more",
        "VC b has 0 of its 2 T4 devices free; the job needs 2 at once as [2] per task "
        "(insufficient capacity when scheduling in VC b)",
    )


def test_a_job_of_two_device_types_holds_one_device_of_each() -> None:
    policy = HivedPolicy(two_type_config())
    demand = JobDemand(
        "both",
        "alice",
        "b",
        0,
        (TaskDemand("a", 0, 1, 1024, 1, sku_type="A100"), TaskDemand("t", 0, 1, 1024, 1, sku_type="T4")),
    )
    assert nodes_of(policy.decide(demand))[1] == "t0"
    assert [v.used_gpus for v in policy.virtual_clusters()] == [0, 2]


def test_a_job_of_two_affinity_groups_holds_only_what_its_tasks_use() -> None:
    policy = HivedPolicy(two_rack_config())
    demand = JobDemand(
        "gangs",
        "alice",
        "b",
        0,
        (
            TaskDemand("ps", 0, 1, 1024, 1, affinity_group="ps"),
            TaskDemand("worker", 0, 1, 1024, 2, affinity_group="workers"),
            TaskDemand("worker", 1, 1, 1024, 2, affinity_group="workers"),
        ),
    )
    placed(policy.decide(demand))
    assert [v.used_gpus for v in policy.virtual_clusters()] == [0, 5]


def pinned_config() -> dict[str, Any]:
    """VC b owns n2 as a VC cell and n3 as its pinned cell p3."""
    config = two_rack_config()
    config["physicalCluster"]["physicalCells"][1]["cellChildren"][1]["pinnedCellId"] = "p3"
    config["virtualClusters"]["b"] = {
        "virtualCells": [{"cellType": "A100-RACK.A100-NODE", "cellNumber": 1}],
        "pinnedCells": [{"pinnedCellId": "p3"}],
    }
    return config


def test_pinned_tasks_land_on_their_pinned_cell_and_the_vc_counts_it() -> None:
    # A job of a pinned and an unpinned task of the same shape was refused as one gang run twice.
    policy = HivedPolicy(pinned_config())
    assert [(v.name, v.capacity_gpus) for v in policy.virtual_clusters()] == [("a", 8), ("b", 8)]
    assert nodes_of(policy.decide(shared("free", 500, vc="b"))) == ["n2"]
    pinned_share = JobDemand(
        "pinned-share", "alice", "b", 0, (TaskDemand("w", 0, 1, 1024, 1, pinned_cell="p3", gpu_milli=500),)
    )
    assert nodes_of(policy.decide(pinned_share)) == ["n3"]
    both = JobDemand(
        "both",
        "alice",
        "b",
        0,
        (TaskDemand("pin", 0, 1, 1024, 2, pinned_cell="p3"), TaskDemand("free", 0, 1, 1024, 2)),
    )
    decision = placed(policy.decide(both))
    assert nodes_of(decision) == ["n3", "n2"]
    again = HivedPolicy(pinned_config())
    again.restore(both, decision)
    assert again.demoted_jobs() == {}
    assert again.decide(both) == decision
    assert [v.used_gpus for v in again.virtual_clusters()] == [0, 4]
