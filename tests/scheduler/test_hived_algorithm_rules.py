"""HiveD's pod-by-pod answers as the trace replayer and the policy meet them: the nodes a pod may
use (bad, suggested or not), the devices' types in the binding, preemptions reserved, withdrawn or
given up, device types and pinned cells a VC has or lacks, and the whole reason a pod waits."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import pytest

from services.scheduler.core.hived import HivedAlgorithm, HivedUserError, PodSpec, parse_config
from services.scheduler.core.hived.algorithm import FILTERING_PHASE
from services.scheduler.core.hived.groups import (
    GROUP_ALLOCATED,
    GROUP_BEING_PREEMPTED,
    GROUP_PREEMPTING,
    BindInfo,
    PodPlacementInfo,
)
from tests.scheduler.clusters import algorithm, pod, two_rack_config


def place(algo: HivedAlgorithm, spec: PodSpec, suggested: set[str] | None = None) -> BindInfo:
    result = algo.schedule(spec, suggested)
    assert result.kind == "bind", result
    assert result.bind_info is not None
    algo.add_allocated_pod(spec, result.bind_info)
    return result.bind_info


def strict(spec: PodSpec) -> PodSpec:
    """The pod heeding the nodes it is told to use (Kubernetes' suggested nodes)."""
    return replace(spec, ignore_suggested_nodes=False)


def two_type_config() -> dict[str, Any]:
    config = two_rack_config()
    physical = config["physicalCluster"]
    physical["skuTypes"]["T4"] = {"gpu": 1, "cpu": 4, "memory": "16Gi"}
    physical["cellTypes"]["T4-NODE"] = {"childCellType": "T4", "childCellNumber": 2, "isNodeLevel": True}
    physical["physicalCells"].append({"cellType": "T4-NODE", "cellAddress": "t0"})
    config["virtualClusters"]["b"]["virtualCells"].append({"cellType": "T4-NODE", "cellNumber": 1})
    return config


def pinned_config() -> dict[str, Any]:
    config = two_rack_config()
    config["physicalCluster"]["physicalCells"][1]["cellChildren"][1]["pinnedCellId"] = "p3"
    config["virtualClusters"]["b"] = {
        "virtualCells": [{"cellType": "A100-RACK.A100-NODE", "cellNumber": 1}],
        "pinnedCells": [{"pinnedCellId": "p3"}],
    }
    return config


# -- the binding -----------------------------------------------------------------------------------


def test_a_binding_names_the_chain_and_each_devices_vc_cell_type() -> None:
    algo = algorithm()
    info = place(algo, pod("p", gpus=2))
    assert info == BindInfo(
        "n0", (0, 1), "A100-RACK", ((2, (PodPlacementInfo("n0", (0, 1), ("A100-NODE", "A100-NODE")),)),)
    )
    info = place(algo, pod("o", vc="b", gpus=1, priority=-1))
    assert info.chain == "A100-RACK"
    assert [pp.preassigned_types for _, pods in info.group for pp in pods] == [("",)]


def test_a_gangs_later_pod_takes_the_next_free_slot_of_its_group() -> None:
    algo = algorithm()
    first = place(algo, pod("w0", vc="b", gpus=4, pods=2, group="job"))
    second = place(algo, pod("w1", vc="b", gpus=4, pods=2, group="job"))
    assert first.group == second.group
    assert {first.node, second.node} == {pp.node for _, pods in first.group for pp in pods}
    with pytest.raises(
        HivedUserError,
        match=r"^pod w2: group job already runs all its pods with 4 devices; add a member to the affinity",
    ):
        algo.schedule(pod("w2", vc="b", gpus=4, pods=2, group="job"))


# -- which nodes a pod may use -----------------------------------------------------------------------


def test_nodes_bad_from_the_start_are_avoided() -> None:
    algo = HivedAlgorithm(parse_config(two_rack_config()), bad_nodes={"n0"})
    assert place(algo, pod("p")).node != "n0"
    assert HivedAlgorithm(parse_config(two_rack_config()), bad_nodes=set()).schedule(pod("q")).node == "n0"


def test_a_pod_heeding_suggested_nodes_goes_there_and_one_ignoring_them_does_not() -> None:
    algo = algorithm()
    assert place(algo, strict(pod("typed", gpus=1)), {"n1"}).node == "n1"
    assert place(algo, strict(pod("any", gpus=1, leaf_type="")), {"n1"}).node == "n1"
    assert place(algo, strict(pod("oppo", vc="b", priority=-1)), {"n3"}).node == "n3"
    assert place(algo, pod("free", vc="b", gpus=4), {"n1"}).node == "n2"


def test_a_pod_kept_off_another_vcs_guaranteed_rack_waits_saying_why() -> None:
    algo = algorithm()
    assert place(algo, pod("x")).node == "n0"
    result = algo.schedule(strict(pod("y")), {"n2"})
    assert (result.kind, result.reason) == (
        "wait",
        "Mapping the virtual placement would need to use at least one bad or non-suggested node "
        "(virtual placement : {'a/1': ['a/1/0/0']})",
    )


def test_a_reservation_on_a_node_gone_bad_is_given_up_and_made_again_elsewhere() -> None:
    algo = algorithm()
    for i in range(2):
        place(algo, pod(f"v{i}", vc="b", gpus=4, pods=2, group="victims", lazy=False))
    place(algo, pod("other", vc="a", gpus=4))
    preemptor = pod("hi", vc="b", priority=5, gpus=4, pods=2, group="hi")
    first = algo.schedule(preemptor)
    assert first.kind == "preempt"
    reserved = {leaf.nodes[0] for pods in algo.groups["hi"].physical.values() for p in pods for leaf in p}
    algo.set_bad_node(sorted(reserved)[0])
    again = algo.schedule(preemptor)
    assert again.kind == "wait"
    assert "hi" not in algo.groups
    assert algo.groups["victims"].state == GROUP_ALLOCATED


def test_a_reservation_survives_the_filtering_phase_on_a_bad_node() -> None:
    algo = algorithm()
    for i in range(2):
        place(algo, pod(f"v{i}", vc="b", gpus=4, pods=2, group="victims", lazy=False))
    preemptor = pod("hi", vc="b", priority=5, gpus=4, pods=2, group="hi")
    assert algo.schedule(preemptor).kind == "preempt"
    algo.set_bad_node("n2")
    algo.set_bad_node("n0")
    result = algo.schedule(preemptor, phase=FILTERING_PHASE)
    assert result.kind == "preempt"
    assert algo.groups["hi"].state == GROUP_PREEMPTING


def test_a_reservation_off_the_suggested_nodes_is_given_up_only_by_a_pod_heeding_them() -> None:
    algo = algorithm()
    for i in range(2):
        place(algo, pod(f"v{i}", vc="b", gpus=4, pods=2, group="victims", lazy=False))
    heeding = strict(pod("hi", vc="b", priority=5, gpus=4, pods=2, group="hi"))
    first = algo.schedule(heeding)
    assert first.kind == "preempt"
    reserved = {leaf.nodes[0] for pods in algo.groups["hi"].physical.values() for p in pods for leaf in p}
    assert algo.schedule(heeding, set(reserved)).kind == "preempt"
    assert algo.groups["hi"].state == GROUP_PREEMPTING
    assert algo.schedule(heeding, {sorted(reserved)[0]}).kind == "wait"
    assert "hi" not in algo.groups
    ignoring = pod("hi2", vc="b", priority=5, gpus=4, pods=2, group="hi2")
    assert algo.schedule(ignoring).kind == "preempt"
    assert algo.schedule(ignoring, {"t9"}).kind == "preempt"


def test_a_preemption_reports_its_victims_per_node() -> None:
    algo = algorithm()
    for i in range(2):
        place(algo, pod(f"v{i}", vc="b", gpus=4, pods=2, group="victims", lazy=False))
    result = algo.schedule(pod("hi", vc="b", priority=5, gpus=4, pods=2, group="hi"))
    assert result.kind == "preempt"
    nodes = {info.node: name for name, info in algo.groups["victims"].bind_infos.items()}
    assert result.victim_nodes == {node: (name,) for node, name in sorted(nodes.items())}


def test_a_withdrawn_gang_of_preemptors_gives_the_cells_back_when_its_last_pod_goes() -> None:
    algo = algorithm()
    for i in range(2):
        place(algo, pod(f"v{i}", vc="b", gpus=4, pods=2, group="victims", lazy=False))
    pods = [pod(f"h{i}", vc="b", priority=5, gpus=4, pods=2, group="hi") for i in range(2)]
    for p in pods:
        assert algo.schedule(p).kind == "preempt"
    assert algo.groups["victims"].state == GROUP_BEING_PREEMPTED
    algo.delete_unallocated_pod(pods[0])
    assert algo.groups["hi"].state == GROUP_PREEMPTING
    algo.delete_unallocated_pod(pods[1])
    assert "hi" not in algo.groups
    assert algo.groups["victims"].state == GROUP_ALLOCATED


def test_a_higher_preemptor_takes_over_a_lower_ones_reservation() -> None:
    algo = algorithm()
    for i in range(2):
        place(algo, pod(f"v{i}", vc="b", gpus=4, pods=2, group="victims", lazy=False))
    assert algo.schedule(pod("mid", vc="b", priority=5, gpus=4, pods=2, group="mid")).kind == "preempt"
    result = algo.schedule(pod("top", vc="b", priority=9, gpus=4, pods=2, group="top"))
    assert result.kind == "preempt"
    assert "mid" not in algo.groups
    assert algo.groups["top"].state == GROUP_PREEMPTING


# -- device types and pinned cells -------------------------------------------------------------------


def test_a_device_type_the_vc_lacks_is_a_user_error_naming_both() -> None:
    algo = HivedAlgorithm(parse_config(two_type_config()))
    with pytest.raises(HivedUserError, match=r"^pod p: requests leaf cell type T4 which VC a does not have$"):
        algo.schedule(pod("p", vc="a", leaf_type="T4"))
    assert place(algo, pod("o", vc="a", priority=-1, leaf_type="T4")).node == "t0"


def test_an_untyped_pod_tries_only_the_types_its_vc_has_and_names_why_it_waits() -> None:
    algo = HivedAlgorithm(parse_config(two_type_config()))
    for i in range(2):
        place(algo, pod(f"full{i}", vc="a", gpus=4, leaf_type=""))
    result = algo.schedule(pod("more", vc="a", leaf_type=""))
    assert (result.kind, result.reason) == ("wait", "insufficient capacity when scheduling in VC a")
    assert place(algo, pod("t", vc="b", gpus=2, leaf_type="T4")).node == "t0"
    result = algo.schedule(pod("b-more", vc="b", gpus=2, leaf_type=""))
    assert result.kind == "bind"


def test_a_pinned_pod_lands_on_its_pinned_cell_and_an_opportunistic_one_may_not() -> None:
    algo = HivedAlgorithm(parse_config(pinned_config()))
    spec = replace(pod("p", vc="b", gpus=2), pinned_cell_id="p3")
    assert place(algo, spec).node == "n3"
    with pytest.raises(HivedUserError, match=r"^pod o: opportunistic pods cannot use pinned cell p3$"):
        algo.schedule(replace(pod("o", vc="b", priority=-1), pinned_cell_id="p3"))
    full = replace(pod("q", vc="b", gpus=4), pinned_cell_id="p3")
    result = algo.schedule(full)
    assert (result.kind, result.reason) == ("wait", "insufficient capacity when scheduling in VC b")


def three_rack_config() -> dict[str, Any]:
    """two_rack_config plus a third rack (n4, n5) that no VC's quota needs."""
    config = two_rack_config()
    config["physicalCluster"]["physicalCells"].append(
        {"cellType": "A100-RACK", "cellChildren": [{"cellAddress": "n4"}, {"cellAddress": "n5"}]}
    )
    return config


@pytest.mark.parametrize("node", ["n4", "n5"])
def test_a_pod_kept_off_the_free_nodes_splits_a_spare_rack_and_every_vc_keeps_its_quota(node: str) -> None:
    algo = HivedAlgorithm(parse_config(three_rack_config()))
    assert place(algo, pod("x", gpus=2)).node == "n0"
    info = place(algo, strict(pod("y", gpus=2)), {node})
    assert (info.node, info.leaf_indices) == (node, (0, 1))
    chain = algo.free["A100-RACK"]
    assert [c.address for c in chain[4]] == ["1"]
    assert sorted(c.address for c in chain[3]) == sorted({"n1", "n4", "n5"} - {node})
    gang = [pod(f"b{i}", vc="b", gpus=4, pods=2, group="b") for i in range(2)]
    assert sorted(place(algo, p).node for p in gang) == ["n2", "n3"]
    assert place(algo, pod("z", gpus=2)).node == node


def test_a_pod_kept_off_a_bad_node_of_its_rack_goes_to_its_vcs_other_cells() -> None:
    algo = HivedAlgorithm(parse_config(three_rack_config()))
    assert place(algo, pod("x", gpus=4)).node == "n0"
    algo.set_bad_node("n1")
    assert place(algo, pod("y", gpus=4)).node in ("n4", "n5")
    gang = [pod(f"b{i}", vc="b", gpus=4, pods=2, group="b") for i in range(2)]
    assert sorted(place(algo, p).node for p in gang) == ["n2", "n3"]


def test_a_pod_ignoring_suggested_nodes_uses_its_vcs_bound_cells_and_free_ones_anywhere() -> None:
    algo = algorithm()
    assert place(algo, pod("b1", vc="b", gpus=4)).node == "n0"  # VC b's rack is now rack 0
    assert place(algo, pod("b2", vc="b", gpus=4), {"n0"}).node == "n1"
    assert place(algo, pod("oppo", vc="a", priority=-1), {"elsewhere"}).node in ("n2", "n3")


def test_a_pinned_pod_heeding_suggested_nodes_waits_when_its_cell_is_not_among_them() -> None:
    algo = HivedAlgorithm(parse_config(pinned_config()))
    result = algo.schedule(strict(replace(pod("p", vc="b", gpus=2), pinned_cell_id="p3")), {"n0"})
    assert (result.kind, result.reason) == (
        "wait",
        "have to use at least one non-suggested node n3 when scheduling in VC b",
    )


def test_a_lazy_victim_keeps_its_guarantee_when_the_preemptor_cannot_be_placed_after_all() -> None:
    algo = algorithm()
    place(algo, pod("low", gpus=4, lazy=True))
    result = algo.schedule(strict(pod("hi", priority=5, gpus=4, pods=2, group="hi")), {"n0"})
    assert result.kind == "wait"
    assert result.reason.startswith("Mapping the virtual placement would need to use at least one bad")
    low = algo.groups["g-low"]
    assert (low.lazy_preempted_by, low.virtual is not None) == (None, True)


def test_a_reservation_still_usable_is_kept_as_it_is() -> None:
    algo = algorithm()
    for i in range(2):
        place(algo, pod(f"v{i}", vc="b", gpus=4, pods=2, group="victims", lazy=False))
    heeding = strict(pod("hi", vc="b", priority=5, gpus=4, pods=2, group="hi"))
    assert algo.schedule(heeding).kind == "preempt"
    reservation = algo.groups["hi"]
    reserved = {leaf.nodes[0] for pods in reservation.physical.values() for p in pods for leaf in p}
    assert algo.schedule(heeding, reserved | {"n9"}).kind == "preempt"
    assert algo.groups["hi"] is reservation
