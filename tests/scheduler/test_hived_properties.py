"""Random schedule/release sequences never double-allocate a device nor overrun a VC's quota."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from services.scheduler.core.hived import BindInfo, HivedAlgorithm, PodSpec
from services.scheduler.core.hived.groups import GROUP_ALLOCATED
from tests.scheduler.clusters import algorithm, pod

schedule_op = st.tuples(
    st.just("schedule"),
    st.sampled_from(["a", "b"]),
    st.sampled_from([-1, 0, 1, 2]),
    st.sampled_from([1, 2, 4]),
    st.integers(min_value=1, max_value=2),
    st.booleans(),
)
release_op = st.tuples(st.just("release"), st.integers(min_value=0, max_value=50))
bad_op = st.tuples(st.sampled_from(["bad", "healthy"]), st.sampled_from(["n0", "n1", "n2", "n3"]))


def _check(algo: HivedAlgorithm) -> None:
    owner: dict[int, str] = {}
    in_vc: dict[str, int] = {}
    for g in algo.groups.values():
        if g.state != GROUP_ALLOCATED:
            continue
        for pods in g.physical.values():
            for p in pods:
                for leaf in p:
                    assert id(leaf) not in owner, f"{leaf.address} held by {owner.get(id(leaf))} and {g.name}"
                    owner[id(leaf)] = g.name
                    if g.priority >= 0 and g.virtual is not None:
                        in_vc[g.vc] = in_vc.get(g.vc, 0) + 1
    for vc, used in in_vc.items():
        quota = sum(len(ccl[1]) for ccl in algo.cfg.vc_full[vc].values())
        assert used <= quota, f"VC {vc} runs {used} guaranteed devices over its quota {quota}"
    for chain, counts in algo.all_vc_free.items():
        assert all(n >= 0 for n in counts.values()), chain


@settings(max_examples=100, deadline=None)
@given(st.lists(st.one_of(schedule_op, release_op, bad_op), min_size=1, max_size=30))
def test_random_sequences_keep_devices_exclusive_and_vcs_within_quota(ops: list[tuple[object, ...]]) -> None:
    algo = algorithm()
    running: list[list[tuple[PodSpec, BindInfo]]] = []
    preempting: list[PodSpec] = []
    for n, op in enumerate(ops):
        if op[0] == "schedule":
            _, vc, priority, gpus, count, lazy = op
            assert isinstance(vc, str)
            assert isinstance(priority, int)
            assert isinstance(gpus, int)
            assert isinstance(count, int)
            assert isinstance(lazy, bool)
            specs = [
                pod(f"j{n}-{i}", vc=vc, priority=priority, gpus=gpus, pods=count, group=f"j{n}", lazy=lazy)
                for i in range(count)
            ]
            placed: list[tuple[PodSpec, BindInfo]] = []
            for spec in specs:
                result = algo.schedule(spec)
                if result.kind == "preempt":
                    preempting.append(spec)
                if result.kind != "bind" or result.bind_info is None:
                    break
                algo.add_allocated_pod(spec, result.bind_info)
                placed.append((spec, result.bind_info))
            if placed:
                running.append(placed)
        elif op[0] == "release" and running:
            assert isinstance(op[1], int)
            for spec, info in running.pop(op[1] % len(running)):
                algo.delete_allocated_pod(spec, info)
            for spec in preempting:
                algo.delete_unallocated_pod(spec)
            preempting = []
        elif op[0] == "bad":
            algo.set_bad_node(str(op[1]))
        elif op[0] == "healthy":
            algo.set_healthy_node(str(op[1]))
        _check(algo)
