"""Replay a pod trace in virtual time through `HivedPolicy` and measure what users would feel.

The trace is the Alibaba GPU cluster format (creation and deletion times, GPUs, CPU, memory and
an optional GPU model constraint); the cluster is either a HiveD config or that trace's node
list, from which a cell hierarchy is derived. Time is virtual: events jump from one arrival or
completion to the next, so months of a trace replay in seconds and results are repeatable.
"""

from __future__ import annotations

import csv
import heapq
import math
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from services.scheduler.core.hived import DEFAULT_VC, HivedConfigError, HivedPolicy, config_from_nodes
from services.scheduler.core.placements import (
    JobDemand,
    NodeInventory,
    Placed,
    Preempting,
    Rejected,
    TaskDemand,
)

RETRY_WINDOW = 64  # waiting pods tried after each completion before giving up until the next one
SAMPLES = 100


class SimError(ValueError):
    """The cluster or trace file cannot be used; the text names the file and the problem."""


@dataclass
class SimPod:
    name: str
    vc: str
    arrival: float
    duration: float
    gpus: int
    cpu: int
    memory_mb: int
    models: tuple[str, ...]
    priority: int


@dataclass
class SimCluster:
    config: dict[str, Any]
    nodes: list[NodeInventory]


def _num(row: dict[str, str], key: str, path: Path, line: int) -> float:
    try:
        return float(row.get(key) or 0)
    except ValueError as err:
        raise SimError(f"{path}:{line}: column {key} is not a number ({row.get(key)!r})") from err


def load_cluster(path: Path, rack_size: int = 8, vcs: int = 1) -> tuple[SimCluster, list[str]]:
    if path.suffix.lower() == ".csv":
        nodes: list[NodeInventory] = []
        with path.open(newline="", encoding="utf-8") as f:
            reader = csv.DictReader(f)
            if not reader.fieldnames or not {"sn", "gpu"} <= set(reader.fieldnames):
                raise SimError(f"{path}: a node list needs the columns sn,cpu_milli,memory_mib,gpu,model")
            for line, row in enumerate(reader, start=2):
                nodes.append(
                    NodeInventory(
                        name=row["sn"],
                        address=row["sn"],
                        cpu=int(_num(row, "cpu_milli", path, line) // 1000),
                        memory_mb=int(_num(row, "memory_mib", path, line)),
                        gpus=int(_num(row, "gpu", path, line)),
                        gpu_model=row.get("model") or None,
                    )
                )
        names = [DEFAULT_VC] if vcs <= 1 else [f"vc{i + 1}" for i in range(vcs)]
        shares = dict.fromkeys(names, 1.0)
        return SimCluster(config_from_nodes(nodes, rack_size, shares), nodes), names
    try:
        doc = yaml.safe_load(path.read_text(encoding="utf-8"))
    except yaml.YAMLError as err:
        raise SimError(f"{path}: not valid YAML ({err})") from err
    if not isinstance(doc, dict) or "virtualClusters" not in doc:
        raise SimError(f"{path}: not a HiveD config (physicalCluster and virtualClusters expected)")
    return SimCluster(doc, []), [str(v) for v in doc["virtualClusters"]]


def load_trace(path: Path, vcs: list[str], limit: int = 0) -> tuple[list[SimPod], dict[str, int]]:
    pods: list[SimPod] = []
    notes = {
        "fractional_gpu_pods_rounded_up": 0,
        "pods_without_times_skipped": 0,
        "multi_model_constraints": 0,
    }
    with path.open(newline="", encoding="utf-8") as f:
        reader = csv.DictReader(f)
        need = {"name", "num_gpu", "creation_time", "deletion_time"}
        if not reader.fieldnames or not need <= set(reader.fieldnames):
            raise SimError(f"{path}: a pod list needs the columns {sorted(need)} (and cpu_milli, memory_mib)")
        for line, row in enumerate(reader, start=2):
            if not row.get("creation_time") or not row.get("deletion_time"):
                notes["pods_without_times_skipped"] += 1
                continue
            gpus = int(_num(row, "num_gpu", path, line))
            milli = _num(row, "gpu_milli", path, line) if row.get("gpu_milli") else 1000.0
            if gpus > 0 and milli < 1000:
                notes["fractional_gpu_pods_rounded_up"] += 1
                gpus = max(1, math.ceil(gpus * milli / 1000))
            models = tuple(m for m in (row.get("gpu_spec") or "").split("|") if m)
            notes["multi_model_constraints"] += len(models) > 1
            arrival = _num(row, "creation_time", path, line)
            qos = row.get("qos", "")
            pods.append(
                SimPod(
                    name=row["name"],
                    vc=vcs[len(pods) % len(vcs)],
                    arrival=arrival,
                    duration=max(0.0, _num(row, "deletion_time", path, line) - arrival),
                    gpus=gpus,
                    cpu=math.ceil(_num(row, "cpu_milli", path, line) / 1000),
                    memory_mb=int(_num(row, "memory_mib", path, line)),
                    models=models,
                    priority=-1 if qos == "BE" else 0,
                )
            )
            if limit and len(pods) >= limit:
                break
    pods.sort(key=lambda p: p.arrival)
    return pods, notes


def _percentile(values: list[float], q: float) -> float:
    if not values:
        return 0.0
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * (len(ordered) - 1) + 0.5))]


class Simulator:
    def __init__(self, cluster: SimCluster) -> None:
        try:
            self.policy = HivedPolicy(cluster.config, detailed_reasons=False)
        except HivedConfigError as err:
            raise SimError(str(err)) from err
        nodes = cluster.nodes
        if not nodes and self.policy.algorithm is not None:
            nodes = [NodeInventory(n, n, 1 << 20, 1 << 30, 0) for n in self.policy.algorithm.all_nodes()]
        self.policy.set_nodes(nodes)
        algo = self.policy.algorithm
        self.node_gpus: dict[str, int] = {}
        if algo is not None:
            for ccl in algo.full.values():
                for leaf in ccl[1]:
                    self.node_gpus[leaf.nodes[0]] = self.node_gpus.get(leaf.nodes[0], 0) + 1
        self.total_gpus = sum(self.node_gpus.values())
        self.used: dict[str, int] = {}
        self.running: dict[str, tuple[SimPod, float, Placed]] = {}
        self.preemptions = 0
        self.rejected = 0

    def _demand(self, pod: SimPod, model: str | None) -> JobDemand:
        task = TaskDemand("pod", 0, pod.cpu, pod.memory_mb, pod.gpus, sku_type=model)
        return JobDemand(pod.name, "trace", pod.vc, pod.priority, (task,))

    def try_start(self, pod: SimPod, now: float, queue: list[SimPod]) -> bool:
        for model in pod.models or (None,):
            decision = self.policy.decide(self._demand(pod, model))
            if isinstance(decision, Preempting):
                for victim in decision.victims:
                    self._stop(victim, requeue=queue)
                    self.preemptions += 1
                decision = self.policy.decide(self._demand(pod, model))
            if isinstance(decision, Rejected):
                continue
            if isinstance(decision, Placed):
                self.running[pod.name] = (pod, now, decision)
                for t in decision.tasks:
                    self.used[t.node] = self.used.get(t.node, 0) + len(t.gpu_indices)
                return True
        return False

    def _stop(self, name: str, requeue: list[SimPod] | None = None) -> None:
        entry = self.running.pop(name, None)
        self.policy.release(name)
        if entry is None:
            return
        pod, _, placed = entry
        for t in placed.tasks:
            self.used[t.node] -= len(t.gpu_indices)
        if requeue is not None:
            requeue.append(pod)

    def fragmentation(self) -> float:
        free = self.total_gpus - sum(self.used.values())
        if free <= 0:
            return 0.0
        partial = sum(
            g - self.used.get(n, 0) for n, g in self.node_gpus.items() if 0 < self.used.get(n, 0) < g
        )
        return partial / free


def simulate(cluster: SimCluster, pods: list[SimPod], notes: dict[str, int]) -> dict[str, Any]:
    wall = time.perf_counter()
    sim = Simulator(cluster)
    queue: list[SimPod] = []
    ends: list[tuple[float, str, float]] = []
    delays: dict[str, list[float]] = {}
    started_at: dict[str, float] = {}
    span_end = max((p.arrival for p in pods), default=0.0)
    step = span_end / SAMPLES if span_end > 0 else 1.0
    samples: list[dict[str, float]] = []
    next_sample = 0.0
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
                    "queued": len(queue),
                }
            )
            next_sample += step
        freed = False
        while ends and ends[0][0] <= now:
            _, name, began = heapq.heappop(ends)
            # A preempted and restarted pod has a newer start; its old end event is stale.
            if name in sim.running and started_at.get(name) == began:
                sim._stop(name)
                freed = True
        arrivals: list[SimPod] = []
        while i < len(pods) and pods[i].arrival <= now:
            arrivals.append(pods[i])
            i += 1
        candidates = arrivals + (queue[:RETRY_WINDOW] if freed else [])
        keep = queue[RETRY_WINDOW:] if freed else queue
        queue = []
        for pod in candidates:
            if sim.try_start(pod, now, queue):
                delays.setdefault(pod.vc, []).append(now - pod.arrival)
                started_at[pod.name] = now
                heapq.heappush(ends, (now + pod.duration, pod.name, now))
            else:
                queue.append(pod)
        queue = sorted(queue + keep, key=lambda p: (-p.priority, p.arrival))
        if not ends and i >= len(pods):
            break
    all_delays = [d for v in delays.values() for d in v]
    allocation = [s["allocation"] for s in samples]
    return {
        "pods": len(pods),
        "started": len(all_delays),
        "never_started": len(queue),
        "total_gpus": sim.total_gpus,
        "queueing_delay_s": {
            "mean": round(sum(all_delays) / len(all_delays), 1) if all_delays else 0.0,
            "p50": _percentile(all_delays, 0.5),
            "p99": _percentile(all_delays, 0.99),
            "per_vc": {
                vc: {
                    "mean": round(sum(v) / len(v), 1),
                    "p50": _percentile(v, 0.5),
                    "p99": _percentile(v, 0.99),
                }
                for vc, v in sorted(delays.items())
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
