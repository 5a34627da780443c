"""A bounded history of the cluster's use: CPU, memory and GPU per node and per task, coarse.

Every monitor hears every node's sample batches (`pai.metrics.<node id>`) and keeps, for the
last `keep` seconds, one averaged point per `step` seconds and series: a node's CPU, memory
and mean GPU utilisation, and a task's CPU, memory and GPU use. Memory stays bounded: each
series holds at most `keep / step` points, a series silent longer than `keep` is dropped, and
no more than `max_series` series are kept (the stalest go first). Nothing is stored on disk: a
restarted monitor starts a new history, which the portal's charts show as a shorter line.
"""

from __future__ import annotations

import math
from array import array
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from libs.protocol.telemetry import MetricSample

# Which samples become which series: node metrics by name, task metrics by name.
NODE_METRICS = {
    "node_cpu_usage_percent": "cpu",
    "node_memory_usage_percent": "memory",
    "gpu_utilization": "gpu",
}
TASK_METRICS = {"task_cpu_percent": "cpu", "task_mem_usage_byte": "memory", "task_gpu_percent": "gpu"}
SeriesKey = tuple[str, ...]  # ("node", node, metric) or ("task", job_id, role, index, metric)


class _Series:
    """A ring of closed points (two arrays of doubles: 16 bytes a point) and the step still open."""

    __slots__ = ("capacity", "count", "head", "last", "open_at", "open_count", "open_sum", "times", "values")

    def __init__(self, capacity: int) -> None:
        self.capacity = capacity
        self.times = array("d")
        self.values = array("d")
        self.head = 0  # where the next closed point goes once the ring is full
        self.open_at = -math.inf
        self.open_sum = 0.0
        self.open_count = 0
        self.last = 0.0

    def _close(self) -> None:
        if not self.open_count or self.capacity < 2:
            return
        point = (self.open_at, self.open_sum / self.open_count)
        if len(self.times) < self.capacity - 1:  # one place stays for the open step
            self.times.append(point[0])
            self.values.append(point[1])
        else:
            self.times[self.head], self.values[self.head] = point
            self.head = (self.head + 1) % len(self.times)

    def add(self, bucket: float, value: float, now: float) -> None:
        if bucket != self.open_at:
            self._close()
            self.open_at, self.open_sum, self.open_count = bucket, 0.0, 0
        self.open_sum += value
        self.open_count += 1
        self.last = now

    def since(self, since: float) -> list[list[float]]:
        order = list(range(self.head, len(self.times))) + list(range(self.head))
        points = [[self.times[i], round(self.values[i], 2)] for i in order if self.times[i] >= since]
        if self.open_count and self.open_at >= since:
            points.append([self.open_at, round(self.open_sum / self.open_count, 2)])
        return points


@dataclass
class MetricHistory:
    step: float = 60.0
    keep: float = 6 * 3600.0
    max_series: int = 20_000
    series: dict[SeriesKey, _Series] = field(default_factory=dict)
    _pruned_at: float = -math.inf

    def __post_init__(self) -> None:
        if self.step <= 0 or self.keep < self.step:
            raise ValueError("the history needs step > 0 and keep >= step")

    @property
    def capacity(self) -> int:
        return math.ceil(self.keep / self.step)

    def record(self, node: str, samples: Iterable[MetricSample], now: float) -> None:
        """One batch from ``node`` at ``now``: GPUs of a node are averaged into one value."""
        bucket = math.floor(now / self.step) * self.step
        values: dict[SeriesKey, list[float]] = {}
        for sample in samples:
            if (metric := NODE_METRICS.get(sample.name)) is not None:
                values.setdefault(("node", node, metric), []).append(sample.value)
            elif (metric := TASK_METRICS.get(sample.name)) is not None:
                labels = sample.labels
                if {"job_id", "role", "index"} <= labels.keys():
                    key: SeriesKey = ("task", labels["job_id"], labels["role"], labels["index"], metric)
                    values.setdefault(key, []).append(sample.value)
        for key, got in values.items():
            line = self.series.get(key)
            if line is None:
                line = self.series[key] = _Series(self.capacity)
            line.add(bucket, sum(got) / len(got), now)
        if now - self._pruned_at >= self.step or len(self.series) > self.max_series:
            self._prune(now)

    def _prune(self, now: float) -> None:
        """Drop silent series (once a step: it walks them all) and the stalest beyond max_series."""
        self._pruned_at = now
        for key in [k for k, s in self.series.items() if s.last < now - self.keep]:
            del self.series[key]
        if len(self.series) > self.max_series:
            stalest = sorted(self.series, key=lambda k: self.series[k].last)
            for key in stalest[: len(self.series) - self.max_series]:
                del self.series[key]

    def query(self, *, since: float, node: str | None = None, job_id: str | None = None) -> dict[str, Any]:
        """Node series (all, or ``node``'s), or with ``job_id`` that job's task series, from ``since``."""
        nodes: list[dict[str, Any]] = []
        tasks: list[dict[str, Any]] = []
        for key, line in sorted(self.series.items()):
            if key[0] == "node" and job_id is None and node in (None, key[1]):
                points = line.since(since)
                if points:
                    nodes.append({"node": key[1], "metric": key[2], "points": points})
            elif key[0] == "task" and job_id is not None and key[1] == job_id:
                points = line.since(since)
                if points:
                    tasks.append({"role": key[2], "index": int(key[3]), "metric": key[4], "points": points})
        answer: dict[str, Any] = {"step": self.step, "keep": self.keep}
        if job_id is None:
            answer["nodes"] = nodes
        else:
            answer["tasks"] = tasks
        return answer
