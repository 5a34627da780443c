"""The facts behind `pai.rpc.scheduler.virtual-clusters`: VCs, nodes, SKU types, user use.

The scheduler is the only place that knows cell ownership and what every running job holds,
so it answers with facts (GPU counts, CPU and memory of placed tasks, per node and per user);
the REST service turns them into OpenPAI's response shapes. CPU and memory of a VC's
guarantee come from the SKU types of the HiveD config (per device), or, when the config has
none, from the nodes of that GPU model (node CPU and memory divided by its devices). Each node
says what it offers and what the running tasks placed on it hold, in all and per VC: jobs
without GPUs are fitted onto any node by CPU and memory, whatever their VC, within the VC's CPU
and memory quota where quotas are in force (vc_quotas.py): a VC's own quota counts in its
guaranteed CPU and memory. Each VC also says how much it could ever hold (`room`, what a
submission is judged by: libs/protocol/vc_fit.py), and the report carries the notes of a node
change that moved cells between VCs.
"""

from __future__ import annotations

from typing import Any

from services.scheduler.core.hived import HivedPolicy, leaf_type_of
from services.scheduler.core.placements import JobDemand, NodeInventory, Placed, PlacementPolicy
from services.scheduler.core.user_limits import UserLimitedPolicy, user_limits_document


def sku_types(hived: HivedPolicy, nodes: list[NodeInventory]) -> dict[str, dict[str, float]]:
    """Per-device CPU and memory (MB) of each SKU (leaf cell) type."""
    out: dict[str, dict[str, float]] = {}
    algo = hived.algorithm
    if algo is None:
        return out
    for leaf_type in algo.cfg.leaf_type_chains:
        sku = algo.cfg.skus.get(leaf_type)
        if sku is not None and (sku.cpu or sku.memory_mb):
            per = max(sku.gpu, 1)
            out[leaf_type] = {"gpu": 1, "cpu": sku.cpu / per, "memory": sku.memory_mb / per}
            continue
        models = [n for n in nodes if n.gpus > 0 and leaf_type_of(n.gpu_model) == leaf_type]
        devices = sum(n.gpus for n in models) or 1
        out[leaf_type] = {
            "gpu": 1,
            "cpu": sum(n.cpu for n in models) / devices,
            "memory": sum(n.memory_mb for n in models) / devices,
        }
    return out


def _guaranteed_by_type(hived: HivedPolicy, vc: str) -> dict[str, int]:
    algo = hived.algorithm
    assert algo is not None
    cfg = algo.cfg
    out: dict[str, int] = {}
    cells = [*cfg.vc_full.get(vc, {}).items(), *((c, ccl) for c, ccl in _pinned(hived, vc))]
    for chain, ccl in cells:
        leaf_type = cfg.cell_types[chain].leaf_type if chain in cfg.cell_types else chain
        out[leaf_type] = out.get(leaf_type, 0) + len(ccl.get(1, []))
    return out


def _pinned(hived: HivedPolicy, vc: str) -> list[tuple[str, Any]]:
    algo = hived.algorithm
    assert algo is not None
    phys = algo.cfg.vc_pinned_physical.get(vc, {})
    return [(phys[pid].chain, ccl) for pid, ccl in algo.cfg.vc_pinned.get(vc, {}).items() if pid in phys]


def _nothing() -> dict[str, int]:
    return {"cpu": 0, "memoryMb": 0, "gpus": 0}


def _use_by_node(
    running: list[tuple[JobDemand, Placed]],
) -> tuple[dict[str, dict[str, int]], dict[str, dict[str, dict[str, int]]]]:
    """CPU, memory and GPUs held on each node by running tasks: in all, and per VC."""
    total: dict[str, dict[str, int]] = {}
    per_vc: dict[str, dict[str, dict[str, int]]] = {}
    shared: set[tuple[str, str, int]] = set()  # (VC, node, device) of shared devices counted once
    for demand, placed in running:
        asked = {(t.role, t.index): t for t in demand.tasks}
        for where in placed.tasks:
            task = asked.get((where.role, where.index))
            if task is None:
                continue
            gpus = len(where.gpu_indices) or task.gpu
            if where.gpu_milli:
                device = (
                    demand.virtual_cluster,
                    where.node,
                    where.gpu_indices[0] if where.gpu_indices else 0,
                )
                gpus = 0 if device in shared else 1
                shared.add(device)
            for use in (
                total.setdefault(where.node, _nothing()),
                per_vc.setdefault(where.node, {}).setdefault(demand.virtual_cluster, _nothing()),
            ):
                use["cpu"] += task.cpu
                use["memoryMb"] += task.memory_mb
                use["gpus"] += gpus
    return total, per_vc


def shared_gpus(hived: HivedPolicy, vc: str, demands: dict[str, JobDemand]) -> list[dict[str, Any]]:
    """The VC's shared devices, each with the thousandths in use and who holds how much of it."""
    out = []
    for host in sorted(hived.shares.hosts.values(), key=lambda h: (h.node, h.device)):
        if host.pool[0] != vc:
            continue
        tasks = [
            {
                "jobId": job,
                "user": demands[job].user if job in demands else "",
                "taskRole": role,
                "taskIndex": index,
                "gpuMilli": milli,
            }
            for (job, role, index), milli in sorted(host.tenants.items())
        ]
        out.append(
            {
                "node": host.node,
                "gpu": host.device,
                "priority": host.pool[1],
                "usedMilli": host.used_milli,
                "freeMilli": host.free_milli,
                "tasks": tasks,
            }
        )
    return out


def status_report(
    policy: PlacementPolicy,
    running: list[tuple[JobDemand, Placed]],
    waiting: dict[str, str],
    demands: dict[str, JobDemand],
    nodes: list[NodeInventory],
    source: str,
) -> dict[str, Any]:
    """Everything the status routes show, as JSON-ready data."""
    inner = policy.inner if isinstance(policy, UserLimitedPolicy) else policy
    hived = inner if isinstance(inner, HivedPolicy) else None
    skus = sku_types(hived, nodes) if hived is not None else {}
    usage = policy.usage() if isinstance(policy, UserLimitedPolicy) else {}
    limits = user_limits_document(policy.limits) if isinstance(policy, UserLimitedPolicy) else {}
    demoted = hived.demoted_jobs() if hived is not None else {}
    used_cpu: dict[str, tuple[int, int, int]] = {}
    for demand, _ in running:
        cpu, mem, jobs = used_cpu.get(demand.virtual_cluster, (0, 0, 0))
        used_cpu[demand.virtual_cluster] = (
            cpu + sum(t.cpu for t in demand.tasks),
            mem + sum(t.memory_mb for t in demand.tasks),
            jobs + 1,
        )
    node_use, node_vc_use = _use_by_node(running)
    rooms = policy.vc_rooms() if isinstance(policy, UserLimitedPolicy) else {}
    node_gpus: dict[str, dict[str, int]] = {}
    vcs: list[dict[str, Any]] = []
    for vc in policy.virtual_clusters():
        by_type = _guaranteed_by_type(hived, vc.name) if hived is not None else {}
        cpu, mem, jobs = used_cpu.get(vc.name, (0, 0, 0))
        quota = policy.quota_of(vc.name) if isinstance(policy, UserLimitedPolicy) else None
        own_quota = quota[0] if quota is not None and not quota[1] else None
        room = rooms.get(vc.name)
        for node, gpus in vc.nodes.items():
            node_gpus.setdefault(node, {})[vc.name] = gpus
        vcs.append(
            {
                "name": vc.name,
                "capacityGpus": vc.capacity_gpus,
                "guaranteedGpus": vc.guaranteed_gpus,
                "usedGpus": vc.used_gpus,
                "guaranteedByType": by_type,
                "guaranteedCpu": sum(n * skus.get(t, {}).get("cpu", 0) for t, n in by_type.items())
                + (own_quota.cpu if own_quota is not None else 0),
                "guaranteedMemoryMb": sum(n * skus.get(t, {}).get("memory", 0) for t, n in by_type.items())
                + (own_quota.memory_mb if own_quota is not None else 0),
                # CPU and memory its tasks without GPUs may hold at once (shared: what the VCs
                # without a quota share); null where no VC has a quota.
                "quota": None
                if quota is None
                else {"cpu": quota[0].cpu, "memoryMb": quota[0].memory_mb, "shared": quota[1]},
                "room": None
                if room is None
                else {
                    "gpus": room.gpus,
                    "gpusByType": dict(room.gpus_by_type),
                    "largestTaskGpus": room.largest_task_gpus,
                },
                "usedCpu": cpu,
                "usedMemoryMb": mem,
                "runningJobs": jobs,
                "waitingJobs": sum(1 for j in waiting if demands[j].virtual_cluster == vc.name),
                "nodes": dict(sorted(vc.nodes.items())),
                "users": dict(sorted(usage.get(vc.name, {}).items())),
                "userLimits": limits.get(vc.name, {}),
                "sharedGpus": shared_gpus(hived, vc.name, demands) if hived is not None else [],
                "demotedJobs": {
                    j: why
                    for j, why in demoted.items()
                    if demands.get(j) and demands[j].virtual_cluster == vc.name
                },
            }
        )
    return {
        "source": source,
        "virtualClusters": vcs,
        "nodes": [
            {
                "name": n.name,
                "address": n.address,
                "cpu": n.cpu,
                "memoryMb": n.memory_mb,
                "gpus": n.gpus,
                "gpuModel": n.gpu_model,
                "healthy": n.healthy,
                "usedGpusByVc": node_gpus.get(n.name, {}),
                # What every running task placed there holds, and each VC's share of it.
                "used": node_use.get(n.name, _nothing()),
                "usedByVc": node_vc_use.get(n.name, {}),
            }
            for n in sorted(nodes, key=lambda n: n.name)
        ],
        "skuTypes": skus,
        "waiting": waiting,
        "notes": list(getattr(inner, "notes", [])),
    }
