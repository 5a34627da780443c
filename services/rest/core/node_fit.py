"""Whether a job's tasks fit the cluster's nodes at all, said per field before the job is taken.

A task runs on one node and is held there to its resourcePerInstance, so a task asking more CPU,
memory or GPUs than the largest node offers would wait for good: the scheduler could only ever
say "pending". Each resource is judged against the node with the most of it, and the problem
names that node and what it has; a task whose resources each fit some node but that no single
node holds together (the node with the most memory has few CPUs) is told once, for its
resourcePerInstance. Capacity is what the scheduler offers, not what is free now: a task that
fits a busy node waits for it, as it should.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from libs.protocol import JobConfig, Problem
from libs.protocol.vc_fit import VcRoom
from libs.protocol.wording import counted


@dataclass(frozen=True)
class NodeSize:
    """What a node offers to tasks, as the scheduler counts it (overcommit included)."""

    name: str
    cpu: int
    memory_mb: int
    gpus: int


def sizes_in_status(answer: Any) -> tuple[NodeSize, ...] | None:
    """The nodes of a scheduler status answer; None when it lists none or cannot be read."""
    nodes = answer.get("nodes") if isinstance(answer, dict) else None
    if not isinstance(nodes, list):
        return None
    try:
        sizes = tuple(
            NodeSize(str(node["name"]), int(node["cpu"]), int(node["memoryMb"]), int(node["gpus"]))
            for node in nodes
        )
    except (KeyError, TypeError, ValueError):
        return None
    return sizes or None


def rooms_in_status(answer: Any, nodes: Sequence[NodeSize]) -> dict[str, VcRoom]:
    """How much each VC of a scheduler status answer could ever hold (its `room` and `quota`,
    the nodes in all); VCs the answer does not size are left out."""
    vcs = answer.get("virtualClusters") if isinstance(answer, dict) else None
    cpu = sum(node.cpu for node in nodes)
    memory = sum(node.memory_mb for node in nodes)
    out: dict[str, VcRoom] = {}
    for vc in vcs if isinstance(vcs, list) else []:
        room = vc.get("room") if isinstance(vc, dict) else None
        if not isinstance(room, dict):
            continue
        quota = vc.get("quota") if isinstance(vc.get("quota"), dict) else None
        try:
            by_type = {str(t): int(n) for t, n in (room.get("gpusByType") or {}).items()}
            out[str(vc["name"])] = VcRoom(
                str(vc["name"]),
                gpus=int(room["gpus"]),
                gpus_by_type=by_type,
                quota_cpu=float(quota["cpu"]) if quota else None,
                quota_memory_mb=int(quota["memoryMb"]) if quota else None,
                cluster_cpu=cpu,
                cluster_memory_mb=memory,
                cluster_gpus=sum(node.gpus for node in nodes),
                largest_task_gpus=None
                if room.get("largestTaskGpus") is None
                else int(room["largestTaskGpus"]),
            )
        except (KeyError, TypeError, ValueError):
            continue
    return out


# Per resource: its field in the job, how an amount of it is said, and NodeSize's attribute.
_FIELDS: tuple[tuple[str, Callable[[int], str], str], ...] = (
    ("cpu", lambda n: counted(n, "CPU"), "cpu"),
    ("memoryMB", lambda n: f"{n} MB", "memory_mb"),
    ("gpu", lambda n: counted(n, "GPU"), "gpus"),
)


def _largest(nodes: Sequence[NodeSize], attribute: str) -> NodeSize:
    # The first by name among equals, so the message names the same node every time.
    return min(nodes, key=lambda node: (-getattr(node, attribute), node.name))


def oversized(job: JobConfig, nodes: Sequence[NodeSize]) -> list[Problem]:
    """Each task role that no node could hold, with the field, the node and what to ask for."""
    if not nodes:
        return []  # nothing known: the scheduler judges
    problems: list[Problem] = []
    for role, spec in job.task_roles.items():
        asked = spec.resource_per_instance
        wanted = {"cpu": asked.cpu, "memory_mb": asked.memory_mb, "gpus": asked.gpu}
        where = f"taskRoles.{role}.resourcePerInstance"
        over = False
        for field, say, attribute in _FIELDS:
            largest = _largest(nodes, attribute)
            most = getattr(largest, attribute)
            if wanted[attribute] <= most:
                continue
            over = True
            hint = f"ask for at most {most}"
            if attribute == "gpus" and most == 0:
                hint = (
                    "ask for gpu: 0; no node of this cluster has a GPU (on `pai up`, `--gpus N` "
                    "declares simulated ones)"
                )
            problems.append(
                Problem(
                    path=f"{where}.{field}",
                    message=(
                        f"{say(wanted[attribute])} is more than the largest node has "
                        f"(node {largest.name}: {say(most)})"
                    ),
                    hint=hint,
                )
            )
        if over or any(all(wanted[a] <= getattr(node, a) for _, _, a in _FIELDS) for node in nodes):
            continue
        shown = dict.fromkeys(_largest(nodes, attribute) for _, _, attribute in _FIELDS)
        problems.append(
            Problem(
                path=where,
                message=(
                    f"no node has {_together(wanted)} at once (the largest: "
                    + "; ".join(
                        f"node {node.name}: "
                        + _together({"cpu": node.cpu, "memory_mb": node.memory_mb, "gpus": node.gpus})
                        for node in shown
                    )
                    + ")"
                ),
                hint="ask for what one node has",
            )
        )
    return problems


def _together(amounts: dict[str, int]) -> str:
    return ", ".join(say(amounts[attribute]) for _, say, attribute in _FIELDS)
