"""What the virtual-clusters status shows, from the scheduler's own facts: each VC's guarantee,
use and waiting jobs, its users against their limits, its shared devices and who holds them,
each node's use in all and per VC (CPU-only jobs included), and CPU and memory per device."""

from __future__ import annotations

from typing import Any

from services.scheduler.core.hived import HivedPolicy
from services.scheduler.core.placements import JobDemand, NodeInventory, Placed, TaskDemand
from services.scheduler.core.user_limits import UserLimitedPolicy, parse_user_limits
from services.scheduler.core.vc_status import status_report
from tests.scheduler.clusters import two_rack_config

NODES = [NodeInventory(f"n{i}", f"10.0.0.{i}", 16, 65536, 4, "A100") for i in range(4)] + [
    NodeInventory("c0", "10.0.1.0", 8, 16384, 0)
]


def node(
    name: str, cpu: int, memory: int, gpus: int, model: str | None, vc_gpus: dict[str, int]
) -> dict[str, Any]:
    return {
        "name": name,
        "address": next(n.address for n in NODES if n.name == name),
        "cpu": cpu,
        "memoryMb": memory,
        "gpus": gpus,
        "gpuModel": model,
        "healthy": True,
        "usedGpusByVc": vc_gpus,
    }


def test_the_status_of_vcs_users_shared_devices_and_nodes() -> None:
    policy = UserLimitedPolicy(
        HivedPolicy(two_rack_config()), parse_user_limits({"a": {"maxGpusPerUser": 6, "users": {"bob": 1}}})
    )
    policy.set_nodes(NODES)
    jobs = [
        JobDemand("train", "alice", "a", 0, (TaskDemand("w", 0, 4, 8192, 4),)),
        JobDemand(
            "infer",
            "bob",
            "a",
            0,
            (TaskDemand("s", 0, 1, 1024, 1, gpu_milli=500), TaskDemand("s", 1, 1, 1024, 1, gpu_milli=250)),
        ),
        JobDemand("web", "alice", "b", 0, (TaskDemand("web", 0, 2, 2048, 0),)),
        JobDemand("big", "bob", "a", 0, (TaskDemand("w", 0, 1, 1024, 4),)),
    ]
    running = []
    for demand in jobs:
        decision = policy.decide(demand)
        if isinstance(decision, Placed):
            running.append((demand, decision))
    assert [d.job_id for d, _ in running] == ["train", "infer", "web"]
    demands = {d.job_id: d for d in jobs}
    report = status_report(policy, running, {"big": "over the limit"}, demands, NODES, "config")
    guarantee = {
        "guaranteedByType": {"A100": 8},
        "guaranteedCpu": 64.0,
        "guaranteedMemoryMb": 524288.0,
        "quota": None,  # no VC has a CPU and memory quota
        "room": {"gpus": 8, "gpusByType": {"A100": 8}, "largestTaskGpus": 4},  # a node's four at most
    }
    assert report["virtualClusters"] == [
        {
            "name": "a",
            "capacityGpus": 8,
            "guaranteedGpus": 8,
            "usedGpus": 5,
            **guarantee,
            "usedCpu": 6,
            "usedMemoryMb": 10240,
            "runningJobs": 2,
            "waitingJobs": 1,
            "nodes": {"n0": 4, "n1": 1},
            "users": {"alice": 4, "bob": 1},
            "userLimits": {"maxGpusPerUser": 6, "users": {"bob": 1}},
            "sharedGpus": [
                {
                    "node": "n1",
                    "gpu": 0,
                    "priority": 0,
                    "usedMilli": 750,
                    "freeMilli": 250,
                    "tasks": [
                        {"jobId": "infer", "user": "bob", "taskRole": "s", "taskIndex": 0, "gpuMilli": 500},
                        {"jobId": "infer", "user": "bob", "taskRole": "s", "taskIndex": 1, "gpuMilli": 250},
                    ],
                }
            ],
            "demotedJobs": {},
        },
        {
            "name": "b",
            "capacityGpus": 8,
            "guaranteedGpus": 8,
            "usedGpus": 0,
            **guarantee,
            "usedCpu": 2,
            "usedMemoryMb": 2048,
            "runningJobs": 1,
            "waitingJobs": 0,
            "nodes": {},
            "users": {"alice": 0},
            "userLimits": {},
            "sharedGpus": [],
            "demotedJobs": {},
        },
    ]
    nothing = {"cpu": 0, "memoryMb": 0, "gpus": 0}
    assert report["nodes"] == [
        {
            **node("c0", 8, 16384, 0, None, {}),
            "used": {"cpu": 2, "memoryMb": 2048, "gpus": 0},
            "usedByVc": {"b": {"cpu": 2, "memoryMb": 2048, "gpus": 0}},
        },
        {
            **node("n0", 16, 65536, 4, "A100", {"a": 4}),
            "used": {"cpu": 4, "memoryMb": 8192, "gpus": 4},
            "usedByVc": {"a": {"cpu": 4, "memoryMb": 8192, "gpus": 4}},
        },
        {
            **node("n1", 16, 65536, 4, "A100", {"a": 1}),
            "used": {"cpu": 2, "memoryMb": 2048, "gpus": 1},  # two shares of one device: one GPU
            "usedByVc": {"a": {"cpu": 2, "memoryMb": 2048, "gpus": 1}},
        },
        {**node("n2", 16, 65536, 4, "A100", {}), "used": nothing, "usedByVc": {}},
        {**node("n3", 16, 65536, 4, "A100", {}), "used": nothing, "usedByVc": {}},
    ]
    assert report["skuTypes"] == {"A100": {"gpu": 1, "cpu": 8.0, "memory": 65536.0}}
    assert (report["source"], report["waiting"]) == ("config", {"big": "over the limit"})


def test_cpu_and_memory_per_device_come_from_the_nodes_when_the_config_has_none() -> None:
    nodes = [
        NodeInventory("g0", "a", 16, 65536, 4, "A100"),
        NodeInventory("g1", "b", 32, 131072, 4, "A100"),
        NodeInventory("t0", "c", 8, 16384, 2, "Tesla T4"),
    ]
    policy = HivedPolicy()
    policy.set_nodes(nodes)
    report = status_report(policy, [], {}, {}, nodes, "nodes")
    assert report["skuTypes"] == {
        "A100": {"gpu": 1, "cpu": 6.0, "memory": 24576.0},
        "Tesla T4": {"gpu": 1, "cpu": 4.0, "memory": 8192.0},
    }
    [vc] = report["virtualClusters"]
    assert (vc["guaranteedByType"], vc["guaranteedCpu"], vc["guaranteedMemoryMb"]) == (
        {"A100": 8, "Tesla T4": 2},
        56.0,
        212992.0,
    )
    assert status_report(HivedPolicy(), [], {}, {}, [], "none") == {
        "source": "none",
        "virtualClusters": [],
        "nodes": [],
        "skuTypes": {},
        "waiting": {},
        "notes": [],
    }


def test_a_vcs_pinned_cells_count_in_its_guarantee() -> None:
    config = two_rack_config()
    config["physicalCluster"]["physicalCells"][1]["cellChildren"][1]["pinnedCellId"] = "p3"
    config["virtualClusters"]["b"] = {
        "virtualCells": [{"cellType": "A100-RACK.A100-NODE", "cellNumber": 1}],
        "pinnedCells": [{"pinnedCellId": "p3"}],
    }
    report = status_report(HivedPolicy(config), [], {}, {}, NODES, "config")
    assert [(v["name"], v["guaranteedByType"], v["guaranteedCpu"]) for v in report["virtualClusters"]] == [
        ("a", {"A100": 8}, 64.0),
        ("b", {"A100": 8}, 64.0),
    ]
