"""Small HiveD clusters and pod factories shared by the scheduler tests."""

from __future__ import annotations

from typing import Any

from services.scheduler.core.hived import HivedAlgorithm, PodSpec, parse_config


def two_rack_config() -> dict[str, Any]:
    """Two racks of two 4-GPU nodes; VC a owns two single nodes, VC b one whole rack."""
    return {
        "physicalCluster": {
            "skuTypes": {"A100": {"gpu": 1, "cpu": 8, "memory": "64Gi"}},
            "cellTypes": {
                "A100-2GPU": {"childCellType": "A100", "childCellNumber": 2},
                "A100-NODE": {"childCellType": "A100-2GPU", "childCellNumber": 2, "isNodeLevel": True},
                "A100-RACK": {"childCellType": "A100-NODE", "childCellNumber": 2},
            },
            "physicalCells": [
                {"cellType": "A100-RACK", "cellChildren": [{"cellAddress": "n0"}, {"cellAddress": "n1"}]},
                {"cellType": "A100-RACK", "cellChildren": [{"cellAddress": "n2"}, {"cellAddress": "n3"}]},
            ],
        },
        "virtualClusters": {
            "a": {"virtualCells": [{"cellType": "A100-RACK.A100-NODE", "cellNumber": 2}]},
            "b": {"virtualCells": [{"cellType": "A100-RACK", "cellNumber": 1}]},
        },
    }


def algorithm(config: dict[str, Any] | None = None) -> HivedAlgorithm:
    return HivedAlgorithm(parse_config(config or two_rack_config()))


def pod(
    name: str,
    vc: str = "a",
    priority: int = 0,
    gpus: int = 1,
    pods: int = 1,
    group: str | None = None,
    lazy: bool = True,
    leaf_type: str = "A100",
) -> PodSpec:
    return PodSpec(
        name=name,
        virtual_cluster=vc,
        priority=priority,
        leaf_cell_number=gpus,
        group_name=group or f"g-{name}",
        members=((pods, gpus),),
        leaf_cell_type=leaf_type,
        lazy_preemption=lazy,
    )
