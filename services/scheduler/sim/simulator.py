"""Replay a job trace in virtual time through a placement policy and measure what users would feel.

The policy is the scheduler service's own `HivedPolicy` (the core that runs in production), or
the quota baseline HiveD was compared with (`capacity.QuotaPolicy`); both answer the service's
`PlacementPolicy` questions, so the loop here only plays the cluster: jobs arrive, are decided,
run for their duration and end. Time is virtual: events jump from one arrival or completion to
the next, so months of a trace replay in minutes and results are repeatable.

A job of more GPUs than a node holds is a gang of whole-node pods (the last takes the rest),
placed at once or not at all. A job's queueing delay runs from its arrival to its first start;
a job preempted and started again keeps that figure (preemptions are counted apart).

After each completion every waiting job is considered again, in priority and arrival order,
however many wait ahead of it. What makes that cheap is that jobs of one VC and priority are
tried size by size, and once a job of some size cannot be placed, none of that size or larger
in that VC can be in the same instant (a policy places a larger request only where a smaller
one would fit), so the rest of them are skipped without a decision.
"""

from __future__ import annotations

import heapq
import math
import time
from bisect import insort
from typing import Any

from services.scheduler.core.hived import HivedConfigError, HivedPolicy
from services.scheduler.core.placements import (
    JobDemand,
    NodeInventory,
    Placed,
    PlacementPolicy,
    Preempting,
    Rejected,
    TaskDemand,
    Waiting,
)
from services.scheduler.sim.capacity import QuotaPolicy
from services.scheduler.sim.traces import SimCluster, SimError, SimPod, load_cluster, load_trace

SAMPLES = 100
POLICIES = ("hived", "quota")
SIZE_BUCKETS = ("1", "2", "4", "8", ">8")

__all__ = [
    "POLICIES",
    "SimCluster",
    "SimError",
    "SimPod",
    "Simulator",
    "load_cluster",
    "load_trace",
    "simulate",
]


def size_bucket(gpus: int) -> str:
    """The job-size column a job's delay is reported under (1, 2, 4, 8 or >8 GPUs)."""
    if gpus > 8:
        return ">8"
    for bound in (1, 2, 4):
        if gpus <= bound:
            return str(bound)
    return "8"


class Simulator:
    """The cluster's state around one policy: what runs where, and who holds how many GPUs."""

    def __init__(self, cluster: SimCluster, policy: str = "hived", borrow: bool = False) -> None:
        if policy not in POLICIES:
            raise SimError(f"--policy {policy!r} is unknown; choose one of {', '.join(POLICIES)}")
        self.kind = policy
        self.policy: PlacementPolicy
        nodes = cluster.nodes
        if policy == "hived":
            try:
                hived = HivedPolicy(cluster.config, detailed_reasons=False)
            except HivedConfigError as err:
                raise SimError(str(err)) from err
            if not nodes and hived.algorithm is not None:
                nodes = [NodeInventory(n, n, 1 << 20, 1 << 30, 0) for n in hived.algorithm.all_nodes()]
            hived.set_nodes(nodes)
            self.policy = hived
            self.node_gpus: dict[str, int] = {}
            if hived.algorithm is not None:
                for ccl in hived.algorithm.full.values():
                    for leaf in ccl[1]:
                        self.node_gpus[leaf.nodes[0]] = self.node_gpus.get(leaf.nodes[0], 0) + 1
            self.capacity = {s.name: s.capacity_gpus for s in hived.virtual_clusters()}
        else:
            if not nodes:
                raise SimError("--policy quota needs a node-list cluster (CSV) and --vc-quotas")
            if not cluster.quotas:
                raise SimError("--policy quota needs the VCs' GPU quotas; pass --vc-quotas FILE")
            quota = QuotaPolicy(cluster.quotas, borrow)
            quota.set_nodes(nodes)
            self.policy = quota
            self.node_gpus = {n.name: n.gpus for n in nodes if n.gpus > 0}
            self.capacity = dict(cluster.quotas)
        self.borrow = borrow
        self.total_gpus = sum(self.node_gpus.values())
        self.node_size = max(self.node_gpus.values(), default=1) or 1
        self.used: dict[str, int] = {}
        self.vc_used: dict[tuple[str, bool], int] = {}  # (VC, guaranteed) -> GPUs
        self.running: dict[str, tuple[SimPod, float, Placed]] = {}
        self.preemptions = 0
        self.decisions = 0
        # Decisions that found the VC within its quota (or cells) and still no place: the cost of
        # where other jobs sit, as opposed to waiting for the VC's own jobs to end.
        self.blocked_with_room = 0

    def pods_of(self, gpus: int) -> list[int]:
        """GPUs per pod: one pod up to a node's GPUs, else whole-node pods and the rest."""
        if gpus <= self.node_size:
            return [gpus]
        full, rest = divmod(gpus, self.node_size)
        return [self.node_size] * full + ([rest] if rest else [])

    def _demand(self, pod: SimPod, model: str | None) -> JobDemand:
        sizes = self.pods_of(pod.gpus)
        tasks = tuple(
            TaskDemand("pod", i, pod.cpu, pod.memory_mb, g, sku_type=model, affinity_group="gang")
            for i, g in enumerate(sizes)
        )
        return JobDemand(pod.name, "trace", pod.vc, pod.priority, tasks)

    def room(self, pod: SimPod) -> int:
        """The most GPUs the job could be given now: its VC's unused quota, or the cluster's free."""
        free = self.total_gpus - sum(self.used.values())
        if pod.priority < 0 or (self.kind == "quota" and self.borrow):
            return free
        return min(free, self.capacity.get(pod.vc, 0) - self.vc_used.get((pod.vc, True), 0))

    def try_start(self, pod: SimPod, now: float, requeue: list[SimPod]) -> bool | None:
        """True: started; False: waits; None: can never start as asked (the policy refused it)."""
        refused = True
        for model in pod.models or (None,):
            self.decisions += 1
            decision = self.policy.decide(self._demand(pod, model))
            if isinstance(decision, Preempting):
                for victim in decision.victims:
                    self.stop(victim, requeue)
                    self.preemptions += 1
                self.decisions += 1
                decision = self.policy.decide(self._demand(pod, model))
            if isinstance(decision, Rejected):
                continue
            refused = False
            if isinstance(decision, Waiting):
                self.blocked_with_room += 1
            if isinstance(decision, Placed):
                self.running[pod.name] = (pod, now, decision)
                for t in decision.tasks:
                    self.used[t.node] = self.used.get(t.node, 0) + len(t.gpu_indices)
                key = (pod.vc, pod.priority >= 0)
                self.vc_used[key] = self.vc_used.get(key, 0) + pod.gpus
                return True
        return None if refused else False

    def stop(self, name: str, requeue: list[SimPod] | None = None) -> None:
        entry = self.running.pop(name, None)
        self.policy.release(name)
        if entry is None:
            return
        pod, _, placed = entry
        for t in placed.tasks:
            self.used[t.node] -= len(t.gpu_indices)
        self.vc_used[(pod.vc, pod.priority >= 0)] -= pod.gpus
        if requeue is not None:
            requeue.append(pod)

    def fragmentation(self) -> float:
        """The share of free GPUs that sit on partly used nodes."""
        free = self.total_gpus - sum(self.used.values())
        if free <= 0:
            return 0.0
        partial = sum(
            g - self.used.get(n, 0) for n, g in self.node_gpus.items() if 0 < self.used.get(n, 0) < g
        )
        return partial / free


class _Waiting:
    """Waiting jobs by (priority, VC) and size, each list in arrival order."""

    def __init__(self) -> None:
        self.lists: dict[tuple[int, str, int], list[tuple[float, int, SimPod]]] = {}
        self.seq = 0

    def add(self, pod: SimPod) -> None:
        self.seq += 1
        insort(self.lists.setdefault((pod.priority, pod.vc, pod.gpus), []), (pod.arrival, self.seq, pod))

    def __len__(self) -> int:
        return sum(len(v) for v in self.lists.values())

    def pods(self) -> list[SimPod]:
        return [p for v in self.lists.values() for _, _, p in v]


def _percentile(values: list[float], q: float) -> float:
    if not values:
        return 0.0
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * (len(ordered) - 1) + 0.5))]


def _stats(values: list[float]) -> dict[str, float]:
    return {
        "jobs": len(values),
        "mean": round(sum(values) / len(values), 1) if values else 0.0,
        "p50": _percentile(values, 0.5),
        "p99": _percentile(values, 0.99),
    }


def _retry_all(sim: Simulator, waiting: _Waiting, now: float, record: Any, refused: list[SimPod]) -> None:
    """Consider every waiting job, highest priority and oldest first (see the module's text)."""
    # limit[(priority, VC)]: the smallest size that failed in this instant; it and larger are skipped.
    limit: dict[tuple[int, str], int] = {}
    heads = [(-key[0], lst[0][0], lst[0][1], key) for key, lst in waiting.lists.items() if lst]
    heapq.heapify(heads)
    started: dict[tuple[int, str, int], int] = {}
    preempted: list[SimPod] = []
    while heads:
        _, _, _, key = heapq.heappop(heads)
        priority, vc, gpus = key
        lst = waiting.lists[key]
        i = started.get(key, 0)
        pod = lst[i][2]
        if (priority, vc) in limit and gpus >= limit[(priority, vc)]:
            continue
        requeue: list[SimPod] = []
        outcome = sim.room(pod) >= gpus and sim.try_start(pod, now, requeue)
        if outcome:
            record(pod, now)
            started[key] = i + 1
            if i + 1 < len(lst):
                heapq.heappush(heads, (-priority, lst[i + 1][0], lst[i + 1][1], key))
        elif outcome is None:
            refused.append(pod)
            lst.pop(i)
            if i < len(lst):
                heapq.heappush(heads, (-priority, lst[i][0], lst[i][1], key))
        else:
            limit[(priority, vc)] = min(gpus, limit.get((priority, vc), gpus))
        if requeue:
            preempted.extend(requeue)
            limit.clear()  # preemption freed GPUs: sizes that failed may fit again
    for key, n in started.items():
        del waiting.lists[key][:n]
    for victim in preempted:  # back in line once the lists are no longer being walked
        waiting.add(victim)


def simulate(
    cluster: SimCluster,
    pods: list[SimPod],
    notes: dict[str, int],
    policy: str = "hived",
    borrow: bool = False,
) -> dict[str, Any]:
    wall = time.perf_counter()
    sim = Simulator(cluster, policy, borrow)
    waiting = _Waiting()
    refused: list[SimPod] = []
    ends: list[tuple[float, str, float]] = []
    delays: list[tuple[str, int, float]] = []
    started_at: dict[str, float] = {}
    first_start: set[str] = set()
    span_end = max((p.arrival for p in pods), default=0.0)
    step = span_end / SAMPLES if span_end > 0 else 1.0
    samples: list[dict[str, float]] = []
    next_sample = 0.0

    def record(pod: SimPod, now: float) -> None:
        if pod.name not in first_start:
            first_start.add(pod.name)
            delays.append((pod.vc, pod.gpus, now - pod.arrival))
        started_at[pod.name] = now
        heapq.heappush(ends, (now + pod.duration, pod.name, now))

    i = 0
    while i < len(pods) or ends:
        now = min(pods[i].arrival if i < len(pods) else math.inf, ends[0][0] if ends else math.inf)
        while next_sample <= now and next_sample <= span_end:
            used = sum(sim.used.values())
            samples.append(
                {
                    "time": round(next_sample, 1),
                    "allocation": round(used / max(1, sim.total_gpus), 4),
                    "fragmentation": round(sim.fragmentation(), 4),
                    "queued": len(waiting),
                }
            )
            next_sample += step
        freed = False
        while ends and ends[0][0] <= now:
            _, name, began = heapq.heappop(ends)
            # A preempted and restarted pod has a newer start; its old end event is stale.
            if name in sim.running and started_at.get(name) == began:
                sim.stop(name)
                freed = True
        arrivals: list[SimPod] = []
        while i < len(pods) and pods[i].arrival <= now:
            arrivals.append(pods[i])
            i += 1
        if freed:
            for pod in arrivals:
                waiting.add(pod)
            _retry_all(sim, waiting, now, record, refused)
        else:
            # Nothing was freed: jobs that waited still cannot start; only the newcomers are tried.
            for pod in arrivals:
                requeue: list[SimPod] = []
                outcome = sim.room(pod) >= pod.gpus and sim.try_start(pod, now, requeue)
                if outcome:
                    record(pod, now)
                elif outcome is None:
                    refused.append(pod)
                else:
                    waiting.add(pod)
                for victim in requeue:
                    waiting.add(victim)
        if not ends and i >= len(pods):
            break
    return _report(sim, pods, notes, delays, waiting, refused, samples, wall)


def _report(
    sim: Simulator,
    pods: list[SimPod],
    notes: dict[str, int],
    delays: list[tuple[str, int, float]],
    waiting: _Waiting,
    refused: list[SimPod],
    samples: list[dict[str, float]],
    wall: float,
) -> dict[str, Any]:
    all_delays = [d for _, _, d in delays]
    per_vc: dict[str, list[float]] = {}
    per_size: dict[str, list[float]] = {}
    per_vc_size: dict[str, dict[str, list[float]]] = {}
    for vc, gpus, d in delays:
        per_vc.setdefault(vc, []).append(d)
        per_size.setdefault(size_bucket(gpus), []).append(d)
        per_vc_size.setdefault(vc, {}).setdefault(size_bucket(gpus), []).append(d)
    allocation = [s["allocation"] for s in samples]
    left = waiting.pods()
    return {
        "policy": sim.kind,
        "borrow": sim.borrow,
        "pods": len(pods),
        "started": len(all_delays),
        "never_started": len(left) + len(refused),
        "refused": len(refused),
        "gang_jobs": sum(1 for p in pods if p.gpus > sim.node_size),
        "total_gpus": sim.total_gpus,
        "decisions": sim.decisions,
        "blocked_with_room": sim.blocked_with_room,
        "queueing_delay_s": {
            **{k: v for k, v in _stats(all_delays).items() if k != "jobs"},
            "per_vc": {vc: _stats(v) for vc, v in sorted(per_vc.items())},
            "per_size": {s: _stats(per_size[s]) for s in SIZE_BUCKETS if s in per_size},
            "per_vc_size": {
                vc: {s: _stats(by[s]) for s in SIZE_BUCKETS if s in by}
                for vc, by in sorted(per_vc_size.items())
            },
        },
        "gpu_allocation_rate": {
            "mean": round(sum(allocation) / len(allocation), 4) if allocation else 0.0,
            "max": max(allocation, default=0.0),
        },
        "allocation_over_time": samples,
        "fragmentation_mean": round(sum(s["fragmentation"] for s in samples) / max(1, len(samples)), 4),
        "preemptions": sim.preemptions,
        "notes": {**notes, "gpu_sharing": "fractional GPU requests are rounded up to whole GPUs"},
        "wall_time_s": round(time.perf_counter() - wall, 2),
    }
