"""A HiveD config's skuTypes (services/scheduler/core/hived/config.py): GPUs, CPUs and memory per
leaf cell, the memory in Kubernetes' quantity forms as OpenPAI's HiveD configs write them."""

from __future__ import annotations

import pytest

from services.scheduler.core.hived.config import SkuInfo, parse_config


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
