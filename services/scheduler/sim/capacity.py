"""The baseline HiveD was compared with: a capacity scheduler with per-VC GPU quotas, no cells.

A VC is guaranteed a number of GPUs, not a shape: a job is placed on any free GPUs, as long as
its VC stays within its quota. Each task takes GPUs of one node (the node left with the fewest
free GPUs that still fits it, best fit), a job's tasks are placed together or not at all (gang),
and nothing keeps a VC's free GPUs together: once other VCs have scattered their jobs over the
nodes, a VC with quota to spare can still find no node with room for its 8-GPU job. That is the
sharing anomaly HiveD's cells remove.

With `borrow`, a VC may run jobs beyond its quota on GPUs idle at the time (YARN's capacity
scheduler does); such a job is preempted when a VC within its quota needs those GPUs. Without
it (the default), no VC ever holds more than its quota.

It speaks the scheduler service's `PlacementPolicy`, so the simulator drives it as it drives
`HivedPolicy`; it exists for comparison only and is not offered to the service.
"""

from __future__ import annotations

from dataclasses import dataclass

from services.scheduler.core.placements import (
    Decision,
    JobDemand,
    NodeInventory,
    Placed,
    Preempting,
    Rejected,
    TaskPlacement,
    VirtualClusterStatus,
    Waiting,
)


@dataclass
class _Held:
    vc: str
    gpus: dict[str, list[int]]  # node -> device indices
    borrowed: bool

    @property
    def total(self) -> int:
        return sum(len(d) for d in self.gpus.values())


class QuotaPolicy:
    """A `PlacementPolicy` of per-VC GPU quotas, gang placement and best-fit nodes."""

    def __init__(self, quotas: dict[str, int], borrow: bool = False) -> None:
        self.quotas = dict(quotas)
        self.borrow = borrow
        self._nodes: dict[str, NodeInventory] = {}
        self._free: dict[str, list[int]] = {}  # node -> free device indices
        self._jobs: dict[str, _Held] = {}
        self.used: dict[str, int] = dict.fromkeys(quotas, 0)

    def set_nodes(self, nodes: list[NodeInventory]) -> None:
        self._nodes = {n.name: n for n in nodes if n.gpus > 0}
        taken: dict[str, set[int]] = {}
        for held in self._jobs.values():
            for node, devices in held.gpus.items():
                taken.setdefault(node, set()).update(devices)
        self._free = {
            n.name: [i for i in range(n.gpus) if i not in taken.get(n.name, set())]
            for n in self._nodes.values()
            if n.healthy
        }

    def _fit(self, sizes: list[int], free: dict[str, int]) -> dict[int, str] | None:
        """Task index -> node, biggest tasks first, each on the fullest node that fits it."""
        left = dict(free)
        out: dict[int, str] = {}
        for i in sorted(range(len(sizes)), key=lambda i: -sizes[i]):
            fits = [n for n, f in left.items() if f >= sizes[i]]
            if not fits:
                return None
            node = min(fits, key=lambda n: (left[n], n))
            left[node] -= sizes[i]
            out[i] = node
        return out

    def decide(self, demand: JobDemand) -> Decision:
        held = self._jobs.get(demand.job_id)
        if held is not None:
            return Waiting(demand.job_id, "already placed")
        vc = demand.virtual_cluster
        if vc not in self.quotas:
            return Rejected(demand.job_id, f"VC {vc} has no quota; add it to the quota file")
        sizes = [t.gpu for t in demand.tasks]
        need = sum(sizes)
        if need > self.quotas[vc]:
            return Rejected(
                demand.job_id, f"the job needs {need} GPUs, more than VC {vc}'s quota of {self.quotas[vc]}"
            )
        within = self.used[vc] + need <= self.quotas[vc]
        if not within and not self.borrow:
            return Waiting(
                demand.job_id,
                f"VC {vc} uses {self.used[vc]} of its {self.quotas[vc]} GPUs; the job needs {need}",
            )
        free = {n: len(d) for n, d in self._free.items()}
        where = self._fit(sizes, free)
        if where is None:
            if within and self.borrow:
                victims = self._reclaim(sizes, free)
                if victims:
                    return Preempting(demand.job_id, victims, f"reclaiming GPUs lent beyond quota in VC {vc}")
            return Waiting(demand.job_id, f"no node has the free GPUs for the job's tasks {sizes}")
        placements: list[TaskPlacement] = []
        got: dict[str, list[int]] = {}
        for i, t in enumerate(demand.tasks):
            node = where[i]
            devices = tuple(self._free[node][: t.gpu])
            del self._free[node][: t.gpu]
            got.setdefault(node, []).extend(devices)
            placements.append(TaskPlacement(t.role, t.index, node, self._nodes[node].address, devices))
        self._jobs[demand.job_id] = _Held(vc, got, not within)
        self.used[vc] += need
        return Placed(demand.job_id, tuple(placements))

    def _reclaim(self, sizes: list[int], free: dict[str, int]) -> tuple[str, ...]:
        """Borrowed jobs whose GPUs would let the tasks fit, fewest GPUs taken back first."""
        lent: dict[str, int] = dict(free)
        on: dict[str, list[str]] = {}
        for job_id, held in self._jobs.items():
            if held.borrowed:
                for node, devices in held.gpus.items():
                    if node in lent:
                        lent[node] += len(devices)
                        on.setdefault(node, []).append(job_id)
        where = self._fit(sizes, lent)
        if where is None:
            return ()
        victims: set[str] = set()
        need: dict[str, int] = {}
        for i, node in where.items():
            need[node] = need.get(node, 0) + sizes[i]
        for node, gpus in need.items():
            have = free.get(node, 0)
            for job_id in sorted(on.get(node, []), key=lambda j: (self._jobs[j].total, j)):
                if have >= gpus:
                    break
                if job_id not in victims:
                    victims.add(job_id)
                    have += len(self._jobs[job_id].gpus[node])
        return tuple(sorted(victims))

    def restore(self, demand: JobDemand, placement: Placed) -> None:
        got: dict[str, list[int]] = {}
        for p in placement.tasks:
            got.setdefault(p.node, []).extend(p.gpu_indices)
            self._free[p.node] = [i for i in self._free.get(p.node, []) if i not in p.gpu_indices]
        vc = demand.virtual_cluster
        need = sum(len(d) for d in got.values())
        self._jobs[demand.job_id] = _Held(vc, got, self.used.get(vc, 0) + need > self.quotas.get(vc, 0))
        self.used[vc] = self.used.get(vc, 0) + need

    def release(self, job_id: str) -> None:
        held = self._jobs.pop(job_id, None)
        if held is None:
            return
        for node, devices in held.gpus.items():
            if node in self._free:
                self._free[node].extend(devices)
                self._free[node].sort()
        self.used[held.vc] -= held.total

    def virtual_clusters(self) -> list[VirtualClusterStatus]:
        return [
            VirtualClusterStatus(vc, quota, self.used.get(vc, 0), quota) for vc, quota in self.quotas.items()
        ]
