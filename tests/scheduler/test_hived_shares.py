"""Shared GPUs inside HiveD: whole cells per VC, same-VC sharing, gangs, priorities, preemption."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from services.scheduler.core.hived import HivedConfigError, HivedPolicy
from services.scheduler.core.hived.groups import GROUP_ALLOCATED
from services.scheduler.core.placements import (
    JobDemand,
    NodeInventory,
    Placed,
    Preempting,
    TaskDemand,
    Waiting,
)
from services.scheduler.core.queueing import demand_from_config
from services.scheduler.core.user_limits import UserLimitedPolicy, VcUserLimit
from tests.scheduler.clusters import two_rack_config
from tests.support.jobs import job_model


def shared(
    job_id: str,
    milli: int,
    tasks: int = 1,
    vc: str = "a",
    priority: int = 0,
    cpu: int = 1,
    whole: int = 0,
) -> JobDemand:
    """A job of `tasks` tasks asking `milli` thousandths of a GPU each (and `whole` 1-GPU tasks)."""
    parts = [TaskDemand("infer", i, cpu, 1024, 1, gpu_milli=milli) for i in range(tasks)]
    parts += [TaskDemand("train", i, cpu, 1024, 1) for i in range(whole)]
    return JobDemand(job_id, "alice", vc, priority, tuple(parts))


def whole(job_id: str, gpus: int, tasks: int = 1, vc: str = "a", priority: int = 0) -> JobDemand:
    return JobDemand(
        job_id, "bob", vc, priority, tuple(TaskDemand("w", i, 1, 1024, gpus) for i in range(tasks))
    )


def devices(policy: HivedPolicy) -> dict[tuple[str, int], dict[str, int]]:
    """(node, device) -> job -> thousandths held there, from the policy's hosts."""
    out: dict[tuple[str, int], dict[str, int]] = {}
    for host in policy.shares.hosts.values():
        for (job, _, _), milli in host.tenants.items():
            per = out.setdefault((host.node, host.device), {})
            per[job] = per.get(job, 0) + milli
    return out


def used(policy: HivedPolicy, vc: str) -> int:
    return next(v.used_gpus for v in policy.virtual_clusters() if v.name == vc)


def test_four_halves_share_two_devices_each_task_one_device() -> None:
    policy = HivedPolicy(two_rack_config())
    decision = policy.decide(shared("j", 500, tasks=4))
    assert isinstance(decision, Placed)
    assert all(len(t.gpu_indices) == 1 and t.gpu_milli == 500 for t in decision.tasks)
    per_device = devices(policy)
    assert sorted(sum(v.values()) for v in per_device.values()) == [1000, 1000]
    assert used(policy, "a") == 2  # whole leaf cells count against the VC


def test_a_vc_never_uses_more_than_its_quota_through_sharing_and_others_keep_theirs() -> None:
    policy = HivedPolicy(two_rack_config())  # VC a: 8 devices, VC b: 8
    for i in range(16):
        assert isinstance(policy.decide(shared(f"h{i}", 500)), Placed)
    assert used(policy, "a") == 8
    over = policy.decide(shared("more", 100))
    assert isinstance(over, Waiting)
    assert "VC a has 0 of its 8" in over.reason
    assert used(policy, "a") == 8
    assert isinstance(policy.decide(whole("b-all", 4, tasks=2, vc="b")), Placed)


def test_shares_of_different_vcs_or_priorities_never_share_a_device() -> None:
    policy = HivedPolicy(two_rack_config())
    for demand in (
        shared("a0", 300),
        shared("b0", 300, vc="b"),
        shared("a-prod", 300, priority=100),
        shared("a1", 300),
        shared("b1", 300, vc="b"),
    ):
        assert isinstance(policy.decide(demand), Placed)
    for host in policy.shares.hosts.values():
        vc, priority = host.pool[0], host.pool[1]
        for job, _, _ in host.tenants:
            assert (vc, priority) == {
                "a0": ("a", 0),
                "a1": ("a", 0),
                "b0": ("b", 0),
                "b1": ("b", 0),
                "a-prod": ("a", 100),
            }[job]
    assert len(policy.shares.hosts) == 3  # a0+a1, b0+b1, a-prod alone


def test_the_platform_policy_picks_the_device_a_share_fills_best() -> None:
    policy = HivedPolicy(two_rack_config())
    assert isinstance(policy.decide(shared("big", 700)), Placed)
    assert isinstance(policy.decide(shared("small", 400)), Placed)  # does not fit beside 700: new host
    third = policy.decide(shared("fill", 300))
    assert isinstance(third, Placed)
    before = {k: sum(v.values()) for k, v in devices(policy).items()}
    where = (third.tasks[0].node, third.tasks[0].gpu_indices[0])
    assert before[where] == 1000  # beside the 700 (leaves a whole device), not beside the 400


def test_a_gang_of_shares_is_placed_whole_or_not_at_all() -> None:
    policy = HivedPolicy(two_rack_config())
    assert isinstance(policy.decide(whole("most", 1, tasks=6)), Placed)  # VC a keeps 2 devices free
    decision = policy.decide(shared("gang", 800, tasks=3))
    assert isinstance(decision, Waiting)
    assert devices(policy) == {}
    assert used(policy, "a") == 6
    assert isinstance(policy.decide(shared("fits", 800, tasks=2)), Placed)


def test_a_job_mixing_whole_and_shared_tasks_holds_both_or_nothing() -> None:
    policy = HivedPolicy(two_rack_config())
    assert isinstance(policy.decide(whole("most", 1, tasks=7)), Placed)
    assert isinstance(policy.decide(shared("mixed", 500, tasks=1, whole=1)), Waiting)
    assert used(policy, "a") == 7
    assert devices(policy) == {}
    policy.release("most")
    decision = policy.decide(shared("mixed", 500, tasks=2, whole=1))
    assert isinstance(decision, Placed)
    assert {t.gpu_milli for t in decision.tasks} == {500, None}
    assert used(policy, "a") == 2


def test_higher_priority_preempts_every_tenant_of_a_host_and_gets_exactly_what_they_held() -> None:
    policy = HivedPolicy(two_rack_config())
    for i in range(8):
        assert isinstance(policy.decide(shared(f"low{i}", 600)), Placed)  # one per device: VC a full
    assert isinstance(policy.decide(shared("low-fill", 400)), Placed)  # beside one of them
    decision = policy.decide(shared("urgent", 900, priority=100))
    assert isinstance(decision, Preempting)
    assert 1 <= len(decision.victims) <= 2
    victim_devices = {k for k, v in devices(policy).items() if set(v) & set(decision.victims)}
    assert len(victim_devices) == 1  # one host: all its tenants are the victims
    assert set(next(iter(devices(policy)[d] for d in victim_devices))) == set(decision.victims)
    before = devices(policy)
    for victim in decision.victims:
        policy.release(victim)
    # The victims' host went back whole (reserved for the preemptor); nothing else moved.
    assert devices(policy) == {k: v for k, v in before.items() if k not in victim_devices}
    placed = policy.decide(shared("urgent", 900, priority=100))
    assert isinstance(placed, Placed)
    assert (placed.tasks[0].node, placed.tasks[0].gpu_indices[0]) in victim_devices
    assert used(policy, "a") == 8


def test_a_gang_of_shares_names_every_victim_it_needs_in_one_decision() -> None:
    policy = HivedPolicy(two_rack_config())  # VC a: 8 devices
    for i in range(4):
        assert isinstance(policy.decide(whole(f"w{i}", 1, tasks=2)), Placed)  # VC a full
    decision = policy.decide(shared("urgent", 700, tasks=3, priority=100))
    assert isinstance(decision, Preempting)
    assert len(decision.victims) >= 2  # three devices: more than one 2-device job must stop
    for victim in decision.victims:
        policy.release(victim)
    assert isinstance(policy.decide(shared("urgent", 700, tasks=3, priority=100)), Placed)
    assert len(policy.shares.hosts) == 3


def test_a_cancelled_preemption_leaves_its_victims_as_they_were() -> None:
    policy = HivedPolicy(two_rack_config())
    assert isinstance(policy.decide(shared("oppo", 500, tasks=3, priority=-1)), Placed)
    assert isinstance(policy.decide(whole("w", 1, tasks=2)), Placed)
    for name in ("p", "q"):
        assert isinstance(policy.decide(shared(name, 700, tasks=3, vc="b", priority=100)), Placed)
    # The first share reserves the opportunistic host; a later one finds no room and the job waits:
    # nobody was told to stop, so the opportunistic job must be an ordinary running one again.
    assert isinstance(policy.decide(shared("late", 100, tasks=3, vc="b")), Waiting)
    algo = policy.algorithm
    assert algo is not None
    assert {algo.groups[h.spec.group_name].state for h in policy.shares.hosts.values()} == {GROUP_ALLOCATED}


def test_opportunistic_shares_run_on_free_cells_and_yield_to_guaranteed_work() -> None:
    policy = HivedPolicy(two_rack_config())
    assert isinstance(policy.decide(shared("oppo", 500, tasks=2, vc="b", priority=-1)), Placed)
    [host] = policy.shares.hosts.values()
    assert host.pool[:2] == ("b", -1)
    assert used(policy, "b") == 1
    # VC a needs every one of its devices: the opportunistic host is preempted, whole.
    decision = policy.decide(whole("a-all", 4, tasks=2))
    if isinstance(decision, Preempting):
        assert decision.victims == ("oppo",)
        policy.release("oppo")
        decision = policy.decide(whole("a-all", 4, tasks=2))
    assert isinstance(decision, Placed)


def test_release_frees_exactly_the_share_and_an_empty_host_returns_to_hived() -> None:
    policy = HivedPolicy(two_rack_config())
    assert isinstance(policy.decide(shared("x", 250, tasks=2)), Placed)
    assert isinstance(policy.decide(shared("y", 500)), Placed)
    [(device, holders)] = devices(policy).items()
    assert holders == {"x": 500, "y": 500}
    policy.release("x")
    assert devices(policy) == {device: {"y": 500}}
    assert used(policy, "a") == 1
    policy.release("y")
    assert devices(policy) == {}
    assert used(policy, "a") == 0
    assert isinstance(policy.decide(whole("all", 4, tasks=2)), Placed)


def test_restore_rebuilds_hosts_from_the_placements() -> None:
    first = HivedPolicy(two_rack_config())
    jobs = [shared("p", 500, tasks=3), shared("q", 500), shared("r", 200, vc="b")]
    placed = {j.job_id: first.decide(j) for j in jobs}
    again = HivedPolicy(two_rack_config())
    for j in jobs:
        decision = placed[j.job_id]
        assert isinstance(decision, Placed)
        again.restore(j, decision)
    assert devices(again) == devices(first)
    assert used(again, "a") == used(first, "a") == 2
    assert isinstance(again.decide(shared("s", 800)), Placed)
    assert used(again, "a") == 3


def test_the_job_config_extension_reaches_the_scheduler() -> None:
    config = {
        "taskRoles": {
            "infer": {"instances": 2, "resourcePerInstance": {"cpu": 1, "memoryMB": 512, "gpu": 1}},
            "train": {"instances": 1, "resourcePerInstance": {"cpu": 1, "memoryMB": 512, "gpu": 2}},
        },
        "extras": {"gpuShare": {"taskRoles": {"infer": {"gpuMilli": 500, "gpuMemoryMiB": 4096}}}},
    }
    demand = demand_from_config("j", "alice", "default", job_model(config))
    shares = {(t.role, t.gpu, t.gpu_milli, t.gpu_memory_mib) for t in demand.tasks}
    assert shares == {("infer", 1, 500, 4096), ("train", 2, 0, None)}
    policy = HivedPolicy()
    policy.set_nodes([NodeInventory("n", "10.0.0.1", 16, 65536, 4, "T4")])
    decision = policy.decide(demand)
    assert isinstance(decision, Placed)
    infer = {(t.gpu_indices, t.gpu_milli, t.gpu_memory_mib) for t in decision.tasks if t.role == "infer"}
    [(device, milli, memory)] = infer  # both halves on one device
    assert (len(device), milli, memory) == (1, 500, 4096)
    [train] = [t for t in decision.tasks if t.role == "train"]
    assert train.gpu_milli is None
    assert len(train.gpu_indices) == 2
    assert device[0] not in train.gpu_indices


def test_a_share_needs_cpu_on_its_node_too() -> None:
    policy = HivedPolicy()
    policy.set_nodes(
        [NodeInventory("n0", "a", 4, 65536, 2, "T4"), NodeInventory("n1", "b", 4, 65536, 2, "T4")]
    )
    assert isinstance(policy.decide(shared("cpu-heavy", 200, cpu=3, vc="default")), Placed)
    second = policy.decide(shared("next", 200, cpu=3, vc="default"))
    assert isinstance(second, Placed)
    nodes = {h.node for h in policy.shares.hosts.values()}
    assert nodes == {"n0", "n1"}  # room on the first host's device, but not the CPU on its node


op = st.one_of(
    st.tuples(
        st.just("share"),
        st.sampled_from(["a", "b"]),
        st.sampled_from([-1, 0, 100]),
        st.sampled_from([100, 250, 500, 700, 900]),
        st.integers(min_value=1, max_value=3),
    ),
    st.tuples(
        st.just("whole"), st.sampled_from(["a", "b"]), st.sampled_from([-1, 0, 100]), st.just(1), st.just(2)
    ),
    st.tuples(st.just("release"), st.just(""), st.just(0), st.integers(0, 40), st.just(0)),
)


@settings(max_examples=60, deadline=None)
@given(st.lists(op, max_size=30))
def test_random_sequences_keep_every_sharing_invariant(ops: list[tuple[str, str, int, int, int]]) -> None:
    policy = HivedPolicy(two_rack_config())
    live: list[str] = []
    for n, (kind, vc, priority, size, count) in enumerate(ops):
        if kind == "release":
            if live:
                victim = live.pop(size % len(live))
                policy.release(victim)
            continue
        job_id = f"j{n}"
        demand = (
            shared(job_id, size, tasks=count, vc=vc, priority=priority)
            if kind == "share"
            else whole(job_id, size, tasks=count, vc=vc, priority=priority)
        )
        decision = policy.decide(demand)
        rounds = 0
        while isinstance(decision, Preempting) and rounds < 3:
            for victim in decision.victims:  # the victims stop; the preemptor tries again
                policy.release(victim)
                if victim in live:
                    live.remove(victim)
            decision = policy.decide(demand)
            rounds += 1
        if isinstance(decision, Placed):
            live.append(job_id)
        else:  # its user gives up on it
            policy.release(job_id)
        _check(policy)
    for job_id in live:
        policy.release(job_id)
    assert policy.shares.hosts == {}
    assert all(v.used_gpus == 0 for v in policy.virtual_clusters())


def _check(policy: HivedPolicy) -> None:
    algo = policy.algorithm
    assert algo is not None
    for host in policy.shares.hosts.values():
        assert 0 < host.used_milli <= 1000
        g = algo.groups[host.spec.group_name]
        assert g.state == GROUP_ALLOCATED
        assert g.vc == host.pool[0]
        [[leaf]] = g.physical[1]
        assert (leaf.nodes[0], leaf.leaf_indices[0]) == (host.node, host.device)
    places = [(h.node, h.device) for h in policy.shares.hosts.values()]
    assert len(places) == len(set(places))
    for vc in policy.virtual_clusters():
        guaranteed = sum(
            1
            for g in algo.groups.values()
            if g.vc == vc.name and g.state == GROUP_ALLOCATED and g.priority >= 0 and g.virtual is not None
            for pods in g.physical.values()
            for p in pods
            for leaf in p
        )
        assert guaranteed <= vc.capacity_gpus


def test_a_users_gpu_limit_counts_shares_as_the_gpus_they_add_up_to() -> None:
    policy = UserLimitedPolicy(HivedPolicy(two_rack_config()), {"a": VcUserLimit(max_gpus_per_user=2)})
    assert isinstance(policy.decide(shared("halves", 500, tasks=4)), Placed)  # 4 x 0.5: 2 GPUs
    assert policy.usage() == {"a": {"alice": 2}}
    over = policy.decide(shared("more", 100))
    assert isinstance(over, Waiting)
    assert "at most 2 GPUs" in over.reason


def test_a_cluster_chooses_its_sharing_policy_in_its_config_and_a_wrong_name_is_refused() -> None:
    assert HivedPolicy(two_rack_config()).shares.policy == "fragpack"  # the platform's default
    assert HivedPolicy({**two_rack_config(), "sharingPolicy": "bestfit"}).shares.policy == "bestfit"
    with pytest.raises(HivedConfigError, match=r"sharingPolicy: 'tightest' .* choose one of random, "):
        HivedPolicy({**two_rack_config(), "sharingPolicy": "tightest"})
