"""Whether a job can ever run in its virtual cluster, said before it waits for good.

A job's tasks are placed all at once (a gang), and a job of a guaranteed priority only ever
uses its VC's cells: a job asking more GPUs than its VC holds in all would wait forever, told
only that the VC has "2 of its 2 GPU devices free". Tasks without GPUs are held to the VC's CPU
and memory quota where it has one, and in any case to what the cluster's nodes offer together.
Opportunistic jobs (priority below 0) may use any cell of the cluster, so they are judged
against the cluster's GPUs instead.

The judgement is sound, never strict: what it compares are upper bounds of what the VC could
hold (cells, quotas and nodes as they are now), so a job it lets through may still wait for a
busy VC, but a job it refuses could never start until an admin grows the VC. The REST service
refuses such a submission with 400 (the VC sizes from the scheduler's status answer), and the
scheduler says the same in the pending reason of a job that reached it anyway.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from libs.protocol.gpu_share import gpu_shares
from libs.protocol.wording import counted

# Below this priority a job is opportunistic: HiveD lets it use any free cell of the cluster.
MIN_GUARANTEED_PRIORITY = 0
PRIORITY_CLASSES = {"crit": 1000, "prod": 100, "test": 10, "oppo": -1}


@dataclass(frozen=True)
class VcRoom:
    """The most a VC can ever hold at once.

    ``gpus`` are its cells' devices, ``gpus_by_type`` the same per leaf (SKU) type.
    ``quota_cpu``/``quota_memory_mb`` bound its tasks without GPUs where the VC has a CPU and
    memory quota (None: no quota); ``cluster_*`` are what every node offers together, the bound
    of any job, and ``cluster_gpus`` what opportunistic jobs may use.
    """

    name: str
    gpus: int = 0
    gpus_by_type: Mapping[str, int] = field(default_factory=dict)
    quota_cpu: float | None = None
    quota_memory_mb: int | None = None
    cluster_cpu: float = 0.0
    cluster_memory_mb: int = 0
    cluster_gpus: int = 0
    # The most GPUs one task may have on one node: the VC's largest cell, at most a node's
    # (HiveD places a task inside one cell of its VC, on one node). None: not known.
    largest_task_gpus: int | None = None


@dataclass(frozen=True)
class VcDemand:
    """What a job needs at once: GPUs (shares rounded up to whole devices), those naming a
    leaf type, and CPU and memory of its tasks without GPUs and of all its tasks."""

    gpus: int = 0
    gpus_by_type: Mapping[str, int] = field(default_factory=dict)
    free_cpu: int = 0  # tasks asking no GPU
    free_memory_mb: int = 0
    cpu: int = 0  # every task
    memory_mb: int = 0
    priority: int = 0
    tasks: int = 1
    largest_task_gpus: int = 0  # whole GPUs of the job's largest task

    @property
    def guaranteed(self) -> bool:
        return self.priority >= MIN_GUARANTEED_PRIORITY


def _number(value: Any, default: int = 0) -> int:
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
        return default
    return int(value)


def demand_of_config(config: Mapping[str, Any], priority: int | None = None) -> VcDemand:
    """The demand of a normalised job config (OpenPAI's field names), counted per task role."""
    extras = config.get("extras") if isinstance(config.get("extras"), Mapping) else {}
    hived = (extras or {}).get("hivedScheduler") or {}
    hints = hived.get("taskRoles") or {} if isinstance(hived, Mapping) else {}
    if priority is None or priority == 0:
        priority = PRIORITY_CLASSES.get(str(hived.get("jobPriorityClass", "")), priority or 0)
    shares = gpu_shares(extras)
    whole = shared_milli = free_cpu = free_memory = cpu = memory = tasks = largest = 0
    by_type: dict[str, int] = {}
    roles = config.get("taskRoles") if isinstance(config.get("taskRoles"), Mapping) else {}
    for role, spec in (roles or {}).items():
        if not isinstance(spec, Mapping):
            continue
        instances = _number(spec.get("instances", 1), 1)
        tasks += instances
        resources = spec.get("resourcePerInstance") or {}
        task_cpu, task_memory = _number(resources.get("cpu", 1), 1), _number(resources.get("memoryMB", 0))
        cpu += instances * task_cpu
        memory += instances * task_memory
        share = shares.get(role)
        gpu = 0 if share is not None else _number(resources.get("gpu", 0))
        if share is not None:
            shared_milli += instances * share.gpu_milli
        elif gpu > 0:
            whole += instances * gpu
            largest = max(largest, gpu if instances else 0)
            hint = hints.get(role) if isinstance(hints, Mapping) else None
            sku = hint.get("skuType") if isinstance(hint, Mapping) else None
            if sku:
                by_type[str(sku)] = by_type.get(str(sku), 0) + instances * gpu
        else:
            free_cpu += instances * task_cpu
            free_memory += instances * task_memory
    return VcDemand(
        gpus=whole + -(-shared_milli // 1000),
        gpus_by_type=by_type,
        free_cpu=free_cpu,
        free_memory_mb=free_memory,
        cpu=cpu,
        memory_mb=memory,
        priority=priority,
        tasks=tasks,
        largest_task_gpus=largest,
    )


@dataclass(frozen=True)
class NeverFits:
    """Why a job could never start in its VC: the message names the VC, its size and the
    demand; the hint says what to ask for instead."""

    message: str
    hint: str


def never_fits(demand: VcDemand, room: VcRoom) -> NeverFits | None:
    """None when the job could start in ``room`` some day; otherwise why it never could."""
    vc = room.name
    if demand.gpus and room.cluster_gpus:
        if not demand.guaranteed:
            if demand.gpus > room.cluster_gpus:
                return NeverFits(
                    f"The job needs {counted(demand.gpus, 'GPU')} at once, more than the cluster's "
                    f"{counted(room.cluster_gpus, 'GPU')}, so it could never start",
                    f"Ask for at most {counted(room.cluster_gpus, 'GPU')} in all.",
                )
        elif demand.gpus > room.gpus:
            return NeverFits(
                f"VC {vc} holds {counted(room.gpus, 'GPU')} in all; the job needs "
                f"{demand.gpus} at once, so it could never start there",
                f"Ask for at most {counted(room.gpus, 'GPU')} in all, or ask an admin to grow the VC "
                f"(`pai vc set {vc} --gpus {demand.gpus}`).",
            )
        elif room.largest_task_gpus is not None and demand.largest_task_gpus > room.largest_task_gpus:
            return NeverFits(
                f"VC {vc} has no cell of {counted(demand.largest_task_gpus, 'GPU')} on one node (its "
                f"largest: {counted(room.largest_task_gpus, 'GPU')}); a task of the job needs "
                f"{demand.largest_task_gpus} on one node, so it could never start there",
                f"Ask for at most {counted(room.largest_task_gpus, 'GPU')} per task (more instances "
                f"instead), or ask an admin for larger cells (`pai vc set {vc} --cells ...`).",
            )
        else:
            for sku, needed in sorted(demand.gpus_by_type.items()):
                held = int(room.gpus_by_type.get(sku, 0))
                if needed > held:
                    kinds = ", ".join(f"{n} {t}" for t, n in sorted(room.gpus_by_type.items()) if n)
                    return NeverFits(
                        f"VC {vc} holds {held} {sku} GPUs (its GPUs: {kinds or 'none'}); the job needs "
                        f"{needed} {sku} at once, so it could never start there",
                        f"Ask for at most {held} {sku} GPUs, or another skuType of the VC.",
                    )
    if room.quota_cpu is not None and room.quota_memory_mb is not None:
        quota_cpu, quota_memory = room.quota_cpu, room.quota_memory_mb
        if demand.free_cpu > quota_cpu or demand.free_memory_mb > quota_memory:
            return NeverFits(
                f"VC {vc} has a quota of {counted(quota_cpu, 'CPU')} and {quota_memory} MB memory; the "
                f"job's tasks without GPUs need {counted(demand.free_cpu, 'CPU')} and "
                f"{demand.free_memory_mb} MB at once, so they could never start there",
                "Ask for at most what the quota holds, or ask an admin to grow it "
                f"(`pai vc set {vc} --cpu N --memory MB`).",
            )
    # One task larger than every node is the node check's to say (it names the node).
    if (
        demand.tasks > 1
        and room.cluster_cpu
        and (demand.cpu > room.cluster_cpu or demand.memory_mb > room.cluster_memory_mb)
    ):
        return NeverFits(
            f"The cluster's nodes offer {counted(room.cluster_cpu, 'CPU')} and {room.cluster_memory_mb} MB "
            f"memory in all; the job needs {counted(demand.cpu, 'CPU')} and {demand.memory_mb} MB at once "
            f"(VC {vc}), so it could never start",
            "Ask for fewer instances or less per task.",
        )
    return None
