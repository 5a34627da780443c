"""HiveD's pod scheduling spec as a trace or a pod annotation writes it: the fields read, their
older names, the defaults, priority classes, and each refused spec with its whole message."""

from __future__ import annotations

from typing import Any

import pytest

from services.scheduler.core.hived import HivedUserError, PodSpec
from services.scheduler.core.hived.groups import GROUP_ALLOCATED, AffinityGroup


def test_every_field_is_read() -> None:
    raw = {
        "virtualCluster": "vc1",
        "priority": 7,
        "leafCellType": "A100",
        "leafCellNumber": 2,
        "pinnedCellId": "pin",
        "lazyPreemptionEnable": False,
        "ignoreK8sSuggestedNodes": False,
        "affinityGroup": {
            "name": "job",
            "members": [{"podNumber": 2, "leafCellNumber": 2}, {"podNumber": 1, "leafCellNumber": 4}],
        },
    }
    assert PodSpec.from_dict("p", raw) == PodSpec(
        name="p",
        virtual_cluster="vc1",
        priority=7,
        leaf_cell_number=2,
        group_name="job",
        members=((2, 2), (1, 4)),
        leaf_cell_type="A100",
        pinned_cell_id="pin",
        lazy_preemption=False,
        ignore_suggested_nodes=False,
    )


def test_the_older_gpu_names_are_read_too() -> None:
    raw = {
        "virtualCluster": "vc1",
        "gpuType": "V100",
        "gpuNumber": 4,
        "affinityGroup": {"name": "g", "members": [{"podNumber": 1, "gpuNumber": 4}]},
    }
    spec = PodSpec.from_dict("p", raw)
    assert (spec.leaf_cell_type, spec.leaf_cell_number, spec.members) == ("V100", 4, ((1, 4),))


def test_a_pod_without_a_group_is_a_group_of_its_own_with_the_defaults() -> None:
    spec = PodSpec.from_dict("p", {"virtualCluster": "vc1", "leafCellNumber": 1})
    assert spec == PodSpec(
        name="p",
        virtual_cluster="vc1",
        priority=0,
        leaf_cell_number=1,
        group_name="p-group",
        members=((1, 1),),
        leaf_cell_type="",
        pinned_cell_id="",
        lazy_preemption=True,
        ignore_suggested_nodes=True,
    )
    bare = PodSpec.from_dict("q", {"virtualCluster": "vc1", "leafCellType": None, "pinnedCellId": None})
    assert (bare.leaf_cell_number, bare.leaf_cell_type, bare.pinned_cell_id, bare.members) == (
        0,
        "",
        "",
        ((1, 0),),
    )
    assert (
        PodSpec.from_dict("r", {"virtualCluster": "vc1", "affinityGroup": {"members": []}}).group_name
        == "r-group"
    )


@pytest.mark.parametrize(
    ("priority", "number"), [("crit", 1000), ("prod", 100), ("test", 0), ("oppo", -1), (9, 9)]
)
def test_a_priority_class_is_read_as_its_number(priority: Any, number: int) -> None:
    assert PodSpec.from_dict("p", {"virtualCluster": "v", "priority": priority}).priority == number


@pytest.mark.parametrize(
    ("raw", "message"),
    [
        (
            {"virtualCluster": "v", "priority": "urgent"},
            "priority: unknown class 'urgent'; use one of ['crit', 'oppo', 'prod', 'test']",
        ),
        (
            {"virtualCluster": "v", "leafCellNumber": "two"},
            "pod p: malformed scheduling spec (invalid literal for int() with base 10: 'two'); "
            "check its fields",
        ),
        (
            {"virtualCluster": "v", "affinityGroup": {"members": [{"leafCellNumber": 1}]}},
            "pod p: malformed scheduling spec ('podNumber'); check its fields",
        ),
        (
            {"virtualCluster": "v", "affinityGroup": {"members": [None]}},
            "pod p: malformed scheduling spec ('NoneType' object is not subscriptable); check its fields",
        ),
        ({}, "pod p: virtualCluster is empty; name the VC to run in"),
        ({"virtualCluster": "v", "priority": -2}, "pod p: priority is less than -1"),
        ({"virtualCluster": "v", "priority": 1001}, "pod p: priority is greater than 1000"),
        (
            {"virtualCluster": "v", "leafCellNumber": -1},
            "pod p: leafCellNumber must not be negative",
        ),
        (
            {
                "virtualCluster": "v",
                "leafCellNumber": 2,
                "affinityGroup": {"name": "g", "members": [{"podNumber": 1, "leafCellNumber": 1}]},
            },
            "pod p: affinityGroup.members has no member with leafCellNumber 2; "
            "add this pod's shape to the group",
        ),
    ],
    ids=[
        "unknown-class",
        "not-a-number",
        "member-without-count",
        "member-not-a-map",
        "no-vc",
        "priority-too-low",
        "priority-too-high",
        "negative-count",
        "shape-not-in-group",
    ],
)
def test_a_bad_spec_is_refused_with_its_whole_message(raw: dict[str, Any], message: str) -> None:
    with pytest.raises(HivedUserError) as caught:
        PodSpec.from_dict("p", raw)
    assert str(caught.value) == message


def test_the_bounds_of_priority_and_count_are_allowed() -> None:
    for priority in (-1, 1000):
        assert PodSpec.from_dict("p", {"virtualCluster": "v", "priority": priority}).priority == priority
    assert PodSpec.from_dict("p", {"virtualCluster": "v", "leafCellNumber": 0}).leaf_cell_number == 0


def test_a_group_counts_its_pods_by_shape_and_starts_with_none_placed() -> None:
    spec = PodSpec("p", "v", 3, 2, "g", ((2, 2), (1, 4), (1, 2)), lazy_preemption=False)
    assert spec.pod_nums() == {2: 3, 4: 1}
    group = AffinityGroup(spec, GROUP_ALLOCATED)
    assert (group.name, group.vc, group.priority, group.state) == ("g", "v", 3, GROUP_ALLOCATED)
    assert (group.lazy_preemption, group.ignore_suggested) == (False, True)
    assert group.allocated_pods == {2: [None, None, None], 4: [None]}
    assert group.physical == {2: [[None, None]] * 3, 4: [[None] * 4]}
    assert group.virtual == group.physical
    assert group.all_released()
    assert group.pod_names() == []
    group.allocated_pods[2][1] = ("p", "n0")
    assert not group.all_released()
    assert group.pod_names() == [("p", "n0")]


def test_a_member_without_a_device_count_asks_for_none() -> None:
    raw = {"virtualCluster": "v", "affinityGroup": {"name": "g", "members": [{"podNumber": 2}]}}
    assert PodSpec.from_dict("p", raw).members == ((2, 0),)
