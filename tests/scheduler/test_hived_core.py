"""Buddy allocation, preemption, bad nodes, waiting reasons and input errors of the HiveD core."""

from __future__ import annotations

from typing import Any

import pytest

from services.scheduler.core.hived import (
    HivedAlgorithm,
    HivedConfigError,
    HivedUserError,
    PodSpec,
    parse_config,
)
from services.scheduler.core.hived.algorithm import FILTERING_PHASE
from services.scheduler.core.hived.groups import GROUP_BEING_PREEMPTED, GROUP_PREEMPTING
from tests.scheduler.clusters import algorithm, pod, two_rack_config


def place(algo: HivedAlgorithm, spec: PodSpec) -> tuple[str, tuple[int, ...]]:
    result = algo.schedule(spec)
    assert result.kind == "bind", result
    assert result.bind_info is not None
    algo.add_allocated_pod(spec, result.bind_info)
    return result.node, result.leaf_cells


@pytest.mark.parametrize(
    ("pods", "expected"),
    [
        ([pod("p1")], [("n0", (0,))]),
        ([pod("p1"), pod("p2")], [("n0", (0,)), ("n0", (1,))]),
        ([pod("p1", gpus=2), pod("p2")], [("n0", (0, 1)), ("n0", (2,))]),
        ([pod("p1"), pod("p2", gpus=4)], [("n0", (0,)), ("n1", (0, 1, 2, 3))]),
        ([pod("p1", vc="b", gpus=4), pod("p2", gpus=4)], [("n0", (0, 1, 2, 3)), ("n2", (0, 1, 2, 3))]),
        ([pod("p1", priority=-1), pod("p2", gpus=4)], [("n0", (0,)), ("n2", (0, 1, 2, 3))]),
    ],
    ids=[
        "first-gpu-splits-a-rack",
        "buddies-pack-together",
        "two-gpu-pod-takes-a-buddy-pair",
        "whole-node-goes-to-the-other-node",
        "vc-quota-keeps-racks-whole",
        "guaranteed-stays-away-from-opportunistic",
    ],
)
def test_buddy_allocation_places_pods(
    pods: list[PodSpec], expected: list[tuple[str, tuple[int, ...]]]
) -> None:
    algo = algorithm()
    assert [place(algo, p) for p in pods] == expected


def test_releasing_merges_buddies_back_into_whole_racks() -> None:
    algo = algorithm()
    specs = [pod("p1"), pod("p2", gpus=4), pod("p3", vc="b", gpus=4)]
    infos = []
    for s in specs:
        result = algo.schedule(s)
        assert result.bind_info is not None
        algo.add_allocated_pod(s, result.bind_info)
        infos.append(result.bind_info)
    chain = "A100-RACK"
    assert algo.free[chain][4] == []
    for s, info in zip(specs, infos, strict=True):
        algo.delete_allocated_pod(s, info)
    assert sorted(c.address for c in algo.free[chain][4]) == ["0", "1"]
    assert algo.total_left[chain] == {4: 2, 3: 4, 2: 8, 1: 16}
    assert algo.groups == {}


def test_a_gang_is_placed_whole_on_distinct_nodes() -> None:
    algo = algorithm()
    spec = pod("w0", vc="b", gpus=4, pods=2, group="job")
    result = algo.schedule(spec)
    assert result.bind_info is not None
    nodes = [pp.node for _, pods in result.bind_info.group for pp in pods]
    assert sorted(nodes) in (["n0", "n1"], ["n2", "n3"])


def test_lazy_preemption_demotes_the_victim_and_uses_free_cells_instead() -> None:
    algo = algorithm()
    for i in range(2):
        place(algo, pod(f"v{i}", gpus=4, pods=2, group="victims", lazy=True))
    result = algo.schedule(pod("hi", priority=5, gpus=4))
    assert result.kind == "bind"
    assert result.node in ("n2", "n3")
    victims = algo.groups["victims"]
    assert victims.lazy_preempted_by == "g-hi"
    assert victims.virtual is None
    assert not victims.all_released()


def test_immediate_preemption_reserves_cells_for_the_whole_victim_group() -> None:
    algo = algorithm()
    victim = [pod(f"v{i}", gpus=4, pods=2, group="victims", lazy=False) for i in range(2)]
    for s in victim:
        place(algo, s)
    preemptor = pod("hi", priority=5, gpus=4)
    result = algo.schedule(preemptor)
    assert result.kind == "preempt"
    assert set(result.victims) == {"v0", "v1"}
    assert algo.groups["g-hi"].state == GROUP_PREEMPTING
    assert algo.groups["victims"].state == GROUP_BEING_PREEMPTED
    # The reserved cells are not up for grabs at the same priority.
    assert algo.schedule(pod("other", priority=5, gpus=4, pods=2, group="g-other")).kind == "wait"
    for s in victim:
        algo.delete_allocated_pod(s, algo.groups["victims"].bind_infos[s.name])
    assert algo.schedule(preemptor).kind == "bind"


def test_cancelled_preemption_returns_cells_to_the_victim() -> None:
    algo = algorithm()
    place(algo, pod("v0", gpus=4, lazy=False))
    place(algo, pod("v1", gpus=4, lazy=False))
    preemptor = pod("hi", priority=5, gpus=4)
    assert algo.schedule(preemptor).kind == "preempt"
    algo.delete_unallocated_pod(preemptor)
    assert "g-hi" not in algo.groups
    used = [
        leaf.priority for g in algo.groups.values() for ps in g.physical.values() for p in ps for leaf in p
    ]
    assert used == [0] * 8


def test_filtering_phase_finds_victims_without_reserving_cells() -> None:
    algo = algorithm()
    place(algo, pod("low", gpus=4, pods=2, group="low", lazy=False))
    place(algo, pod("low2", gpus=4, pods=2, group="low", lazy=False))
    result = algo.schedule(pod("hi", priority=3, gpus=4), phase=FILTERING_PHASE)
    assert result.kind == "preempt"
    assert "g-hi" not in algo.groups


def test_guaranteed_job_preempts_opportunistic_work_on_its_cells() -> None:
    algo = algorithm()
    for i in range(4):
        place(algo, pod(f"o{i}", vc="a", priority=-1, gpus=4))
    result = algo.schedule(pod("g", vc="b", gpus=4, pods=2, group="gang"))
    assert result.kind == "preempt"
    assert len(result.victims) == 2


def test_equal_priority_never_preempts_and_waits_with_the_vc_named() -> None:
    algo = algorithm()
    place(algo, pod("x", gpus=4))
    place(algo, pod("y", gpus=4))
    result = algo.schedule(pod("z", gpus=1))
    assert result.kind == "wait"
    assert result.reason == "insufficient capacity when scheduling in VC a"


@pytest.mark.parametrize("priority", [-1, 0], ids=["opportunistic", "guaranteed"])
def test_a_pod_in_the_gaps_of_a_fragmented_node_takes_the_free_gpus_and_preempts_no_peer(
    priority: int,
) -> None:
    # n0's four GPUs held one by one; the second and third given back leave one free GPU in each
    # buddy pair. A two-GPU pod of the same priority takes those two: the closer pair would mean
    # taking a GPU from a pod that may not be preempted by its equal.
    algo = algorithm()
    held = {}
    for name in ("p1", "p2", "p3", "p4"):
        spec = pod(name, priority=priority)
        result = algo.schedule(spec)
        assert result.bind_info is not None
        algo.add_allocated_pod(spec, result.bind_info)
        held[name] = (spec, result.bind_info)
    assert [info.leaf_indices for _, info in held.values()] == [(0,), (1,), (2,), (3,)]
    for name in ("p2", "p3"):
        algo.delete_allocated_pod(*held[name])
    result = algo.schedule(pod("gaps", priority=priority, gpus=2))
    assert (result.kind, result.node, result.leaf_cells, result.victims) == ("bind", "n0", (1, 2), ())


def test_bad_nodes_are_avoided_and_doom_vc_cells_only_when_needed() -> None:
    algo = algorithm()
    algo.set_bad_node("n0")
    assert place(algo, pod("p1")) == ("n1", (0,))
    algo.set_bad_node("n2")
    result = algo.schedule(pod("p2", vc="b", gpus=4, pods=2, group="gang"))
    assert result.kind == "wait"
    algo.set_healthy_node("n2")
    assert algo.schedule(pod("p3", vc="b", gpus=4, pods=2, group="gang2")).kind == "bind"


@pytest.mark.parametrize(
    ("spec", "message"),
    [
        (pod("p", vc="nope"), "VC nope does not exist"),
        (pod("p", leaf_type="H100"), "does not exist in the cluster"),
        (pod("p", priority=1001), "greater than 1000"),
        (pod("p", priority=-2), "less than -1"),
        (PodSpec("p", "a", 0, 2, "g", ((1, 4),), "A100"), "no member with leafCellNumber 2"),
        (
            PodSpec("p", "a", 0, 1, "g", ((1, 1),), "A100", pinned_cell_id="pin"),
            "does not have pinned cell pin",
        ),
    ],
    ids=[
        "unknown-vc",
        "unknown-type",
        "priority-too-high",
        "priority-too-low",
        "not-in-group",
        "unknown-pin",
    ],
)
def test_impossible_requests_are_user_errors(spec: PodSpec, message: str) -> None:
    with pytest.raises(HivedUserError, match=message):
        algorithm().schedule(spec)


def _edit(path: list[Any], value: Any) -> dict[str, Any]:
    doc = two_rack_config()
    target: Any = doc
    for key in path[:-1]:
        target = target[key]
    target[path[-1]] = value
    return doc


@pytest.mark.parametrize(
    ("doc", "message"),
    [
        (_edit(["physicalCluster", "physicalCells", 0, "cellType"], "RACKX"), "RACKX.*not defined"),
        (_edit(["virtualClusters", "b", "virtualCells", 0, "cellNumber"], 2), "only .* remain"),
        (_edit(["virtualClusters", "a", "virtualCells", 0, "cellType"], "NOPE.A100-NODE"), "chain NOPE"),
        (_edit(["physicalCluster", "physicalCells", 0, "cellChildren"], [{}, {}]), "node-level cell needs"),
        ({"virtualClusters": {}}, "physicalCluster: missing"),
    ],
    ids=["unknown-cell-type", "quota-exceeds-cluster", "unknown-chain", "node-without-name", "no-physical"],
)
def test_bad_configs_name_the_field(doc: dict[str, Any], message: str) -> None:
    with pytest.raises(HivedConfigError, match=message):
        HivedAlgorithm(parse_config(doc))


def test_restart_keeps_running_pods_and_demotes_what_no_longer_fits() -> None:
    algo = algorithm()
    specs = [pod("p1", gpus=4), pod("p2", gpus=4)]
    infos = []
    for s in specs:
        result = algo.schedule(s)
        assert result.bind_info is not None
        algo.add_allocated_pod(s, result.bind_info)
        infos.append(result.bind_info)
    smaller = two_rack_config()
    smaller["virtualClusters"]["a"]["virtualCells"][0]["cellNumber"] = 1
    restarted = HivedAlgorithm(parse_config(smaller))
    for s, info in zip(specs, infos, strict=True):
        restarted.add_allocated_pod(s, info)
    groups = [restarted.groups["g-p1"], restarted.groups["g-p2"]]
    assert all(g.all_released() is False for g in groups)
    assert sorted(g.virtual is None for g in groups) == [False, True]
    leaves = [leaf for g in groups for pods in g.physical.values() for p in pods for leaf in p]
    assert len({id(leaf) for leaf in leaves}) == 8
