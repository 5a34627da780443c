"""The HiveD config the scheduler derives from the nodes when no admin wrote one
(services/scheduler/core/hived/defaults.py), compared whole: cell types, cells and VCs."""

from __future__ import annotations

from typing import Any

import pytest

from services.scheduler.core.hived.defaults import DEFAULT_VC, config_from_nodes, leaf_type_of
from services.scheduler.core.placements import NodeInventory


def node(name: str, gpus: int, model: str | None = None) -> NodeInventory:
    return NodeInventory(
        name=name, address=f"{name}.addr", cpu=16, memory_mb=65536, gpus=gpus, gpu_model=model
    )


def one_vc(*cells: tuple[str, int]) -> dict[str, Any]:
    return {DEFAULT_VC: {"virtualCells": [{"cellType": t, "cellNumber": n} for t, n in cells]}}


@pytest.mark.parametrize(
    ("model", "leaf"), [(None, "GPU"), ("", "GPU"), ("   ", "GPU"), (" A100 ", "A100"), ("V100", "V100")]
)
def test_the_gpu_model_names_the_leaf_type_and_a_missing_one_is_gpu(model: str | None, leaf: str) -> None:
    assert leaf_type_of(model) == leaf


def test_an_8_gpu_node_is_split_in_halves_down_to_its_gpus() -> None:
    assert config_from_nodes([node("n1", 8, "A100")]) == {
        "physicalCluster": {
            "cellTypes": {
                "A100-2GPU": {"childCellType": "A100", "childCellNumber": 2},
                "A100-4GPU": {"childCellType": "A100-2GPU", "childCellNumber": 2},
                "A100-NODE8": {"childCellType": "A100-4GPU", "childCellNumber": 2, "isNodeLevel": True},
            },
            "physicalCells": [{"cellType": "A100-NODE8", "cellAddress": "n1"}],
        },
        "virtualClusters": one_vc(("A100-NODE8", 1)),
    }


@pytest.mark.parametrize(
    ("gpus", "types"),
    [
        (1, {"GPU-NODE1": {"childCellType": "GPU", "childCellNumber": 1, "isNodeLevel": True}}),
        (2, {"GPU-NODE2": {"childCellType": "GPU", "childCellNumber": 2, "isNodeLevel": True}}),
        (
            4,
            {
                "GPU-2GPU": {"childCellType": "GPU", "childCellNumber": 2},
                "GPU-NODE4": {"childCellType": "GPU-2GPU", "childCellNumber": 2, "isNodeLevel": True},
            },
        ),
        # Not a power of two: no buddy levels, the node holds its GPUs directly.
        (6, {"GPU-NODE6": {"childCellType": "GPU", "childCellNumber": 6, "isNodeLevel": True}}),
        (3, {"GPU-NODE3": {"childCellType": "GPU", "childCellNumber": 3, "isNodeLevel": True}}),
    ],
)
def test_a_node_of_any_gpu_count_gets_its_levels(gpus: int, types: dict[str, Any]) -> None:
    config = config_from_nodes([node("n1", gpus)])
    assert config["physicalCluster"]["cellTypes"] == types
    assert config["physicalCluster"]["physicalCells"] == [
        {"cellType": f"GPU-NODE{gpus}", "cellAddress": "n1"}
    ]


def test_cpu_only_nodes_are_left_out_and_shapes_come_in_order() -> None:
    config = config_from_nodes(
        [node("v", 1, "V100"), node("cpu", 0), node("a2", 2, "A100"), node("a1", 1, "A100")]
    )
    assert config["physicalCluster"]["physicalCells"] == [
        {"cellType": "A100-NODE1", "cellAddress": "a1"},
        {"cellType": "A100-NODE2", "cellAddress": "a2"},
        {"cellType": "V100-NODE1", "cellAddress": "v"},
    ]
    assert config["virtualClusters"] == one_vc(("A100-NODE1", 1), ("A100-NODE2", 1), ("V100-NODE1", 1))
    assert config_from_nodes([node("cpu", 0)]) == {
        "physicalCluster": {"cellTypes": {}, "physicalCells": []},
        "virtualClusters": {DEFAULT_VC: {"virtualCells": []}},
    }


def test_nodes_of_one_shape_are_grouped_in_full_racks_and_the_rest_stay_nodes() -> None:
    nodes = [node(name, 4) for name in "abcde"]
    config = config_from_nodes(nodes, rack_size=2)
    assert config["physicalCluster"]["cellTypes"]["GPU-RACK2x4"] == {
        "childCellType": "GPU-NODE4",
        "childCellNumber": 2,
    }
    assert config["physicalCluster"]["physicalCells"] == [
        {"cellType": "GPU-RACK2x4", "cellChildren": [{"cellAddress": "a"}, {"cellAddress": "b"}]},
        {"cellType": "GPU-RACK2x4", "cellChildren": [{"cellAddress": "c"}, {"cellAddress": "d"}]},
        {"cellType": "GPU-NODE4", "cellAddress": "e"},
    ]
    assert config["virtualClusters"] == one_vc(("GPU-RACK2x4", 2), ("GPU-NODE4", 1))


@pytest.mark.parametrize("rack_size", [0, 1, 6])
def test_no_rack_is_made_of_one_node_or_of_more_nodes_than_there_are(rack_size: int) -> None:
    config = config_from_nodes([node(name, 4) for name in "abcde"], rack_size=rack_size)
    assert not any("RACK" in t for t in config["physicalCluster"]["cellTypes"])
    assert [c["cellAddress"] for c in config["physicalCluster"]["physicalCells"]] == list("abcde")
    assert config["virtualClusters"] == one_vc(("GPU-NODE4", 5))


@pytest.mark.parametrize(
    ("shares", "cells"),
    [
        ({"a": 1, "b": 3}, {"a": 1, "b": 3}),
        ({"a": 1, "b": 1, "c": 1}, {"a": 1, "b": 1, "c": 2}),  # rounded down, the rest to the last
        ({"a": 0.1, "b": 0.9}, {"a": 0, "b": 4}),  # a share below one cell gets none
        ({"a": 0, "b": 0}, {"a": 0, "b": 4}),  # shares of nothing: all to the last
        ({"a": 3, "b": 1}, {"a": 3, "b": 1}),
    ],
)
def test_vc_shares_split_the_top_cells_and_the_last_vc_takes_the_rest(
    shares: dict[str, float], cells: dict[str, int]
) -> None:
    config = config_from_nodes([node(f"n{i}", 1) for i in range(4)], vc_shares=shares)
    assert config["virtualClusters"] == {
        name: {"virtualCells": [{"cellType": "GPU-NODE1", "cellNumber": n}] if n else []}
        for name, n in cells.items()
    }
