"""A HiveD config's skuTypes (services/scheduler/core/hived/config.py): GPUs, CPUs and memory per
leaf cell, the memory in Kubernetes' quantity forms as OpenPAI's HiveD configs write them."""

from __future__ import annotations

import pytest

from services.scheduler.core.hived.config import CellTypeInfo, HivedConfigError, SkuInfo, parse_config


def skus_of(sku_types: dict[str, object]) -> dict[str, SkuInfo]:
    doc = {
        "physicalCluster": {
            "skuTypes": sku_types,
            "cellTypes": {"NODE": {"childCellType": "K80", "childCellNumber": 2, "isNodeLevel": True}},
            "physicalCells": [{"cellType": "NODE", "cellAddress": "n1"}],
        },
        "virtualClusters": {"default": {"virtualCells": [{"cellType": "NODE", "cellNumber": 1}]}},
    }
    return parse_config(doc).skus


@pytest.mark.parametrize(
    ("memory", "mb"),
    [
        ("8192Mi", 8192),
        ("40Gi", 40 * 1024),
        ("1Ti", 1024 * 1024),
        ("2048Ki", 2),
        ("1.5Gi", 1536),
        ("16G", 16000),
        ("500M", 500),
        ("4000K", 4),
        (" 2Gi ", 2048),
        (2 * 1024 * 1024 * 1024, 2048),  # a plain number counts bytes
        ("1073741824", 1024),
        ("", 0),
        (0, 0),
    ],
)
def test_memory_is_read_in_every_quantity_form(memory: object, mb: int) -> None:
    assert skus_of({"K80": {"gpu": 1, "cpu": 4, "memory": memory}})["K80"].memory_mb == mb


def test_a_sku_reads_its_gpus_and_cpus_and_defaults_to_one_gpu_and_nothing_else() -> None:
    skus = skus_of({"K80": {"gpu": 2, "cpu": 5.5, "memory": "1Gi"}, "T4": {}, "broken": "not a mapping"})
    assert skus == {"K80": SkuInfo(2, 5.5, 1024), "T4": SkuInfo(1, 0.0, 0)}


def pinned_config(vcs: dict[str, object]) -> dict[str, object]:
    return {
        "physicalCluster": {
            "cellTypes": {"NODE": {"childCellType": "K80", "childCellNumber": 2, "isNodeLevel": True}},
            "physicalCells": [
                {"cellType": "NODE", "cellAddress": "n1", "pinnedCellId": "pin-a"},
                {"cellType": "NODE", "cellAddress": "n2", "pinnedCellId": "pin-b"},
                {"cellType": "NODE", "cellAddress": "n3"},
            ],
        },
        "virtualClusters": vcs,
    }


def test_pinned_cells_count_in_their_vcs_free_cells_beside_its_virtual_cells() -> None:
    cfg = parse_config(
        pinned_config(
            {
                "a": {
                    "virtualCells": [{"cellType": "NODE", "cellNumber": 1}],
                    "pinnedCells": [{"pinnedCellId": "pin-a"}],
                },
                "b": {"pinnedCells": [{"pinnedCellId": "pin-b"}]},
            }
        )
    )
    assert cfg.vc_names == ["a", "b"]
    assert cfg.vc_free_cell_num == {"a": {"NODE": {2: 2}}, "b": {"NODE": {2: 1}}}
    assert set(cfg.vc_pinned["a"]) == {"pin-a"}
    assert set(cfg.vc_pinned["b"]) == {"pin-b"}
    assert cfg.vc_pinned_physical["a"]["pin-a"].address == "n1"
    assert cfg.vc_pinned_physical["b"]["pin-b"].address == "n2"
    # Every level of a VC's chain is listed, empty or not.
    assert sorted(cfg.vc_full["a"]["NODE"]) == [1, 2]


@pytest.mark.parametrize(
    ("vcs", "message"),
    [
        (
            {"a": {"pinnedCells": [{"pinnedCellId": "pin-z"}]}},
            "virtualClusters.a.pinnedCells[0].pinnedCellId: 'pin-z' is not a pinnedCellId in physicalCells",
        ),
        (
            {"a": {"pinnedCells": [{}]}},
            "virtualClusters.a.pinnedCells[0].pinnedCellId: '' is not a pinnedCellId in physicalCells",
        ),
        (
            {
                "a": {"pinnedCells": [{"pinnedCellId": "pin-a"}]},
                "b": {"pinnedCells": [{"pinnedCellId": "pin-a"}]},
            },
            "virtualClusters.b.pinnedCells[0].pinnedCellId: pin-a is already pinned to VC a",
        ),
    ],
)
def test_a_wrong_pin_is_refused_naming_where_and_why(vcs: dict[str, object], message: str) -> None:
    with pytest.raises(HivedConfigError) as refused:
        parse_config(pinned_config(vcs))
    assert str(refused.value) == message


def test_cell_types_are_read_level_by_level_down_to_their_leaf() -> None:
    doc = {
        "physicalCluster": {
            "cellTypes": {
                "RACK": {"childCellType": "NODE", "childCellNumber": 3},
                "NODE": {"childCellType": "K80", "childCellNumber": 4, "isNodeLevel": True},
            },
            "physicalCells": [],
        },
        "virtualClusters": {},
    }
    types = parse_config(doc).cell_types
    assert types == {
        "K80": CellTypeInfo("K80", 1, "", 0, False, False, "K80", 1),
        "NODE": CellTypeInfo("NODE", 2, "K80", 4, True, False, "K80", 4),
        "RACK": CellTypeInfo("RACK", 3, "NODE", 3, True, True, "K80", 12),
    }


@pytest.mark.parametrize(
    ("cell_types", "message"),
    [
        (
            {
                "A": {"childCellType": "B", "childCellNumber": 2},
                "B": {"childCellType": "A", "childCellNumber": 2},
            },
            "physicalCluster.cellTypes: cell type A contains itself; fix childCellType",
        ),
        ({"A": "K80"}, "physicalCluster.cellTypes.A: needs childCellType and childCellNumber"),
        (
            {"A": {"childCellNumber": 2}},
            "physicalCluster.cellTypes.A: needs childCellType and childCellNumber",
        ),
        (
            {"A": {"childCellType": "K80"}},
            "physicalCluster.cellTypes.A.childCellNumber: must be a positive number",
        ),
        (
            {"A": {"childCellType": "K80", "childCellNumber": 0}},
            "physicalCluster.cellTypes.A.childCellNumber: must be a positive number",
        ),
    ],
)
def test_a_wrong_cell_type_is_refused_naming_it_and_the_fix(
    cell_types: dict[str, object], message: str
) -> None:
    doc = {"physicalCluster": {"cellTypes": cell_types, "physicalCells": []}, "virtualClusters": {}}
    with pytest.raises(HivedConfigError) as refused:
        parse_config(doc)
    assert str(refused.value) == message
