"""Memory and answer time of the monitor's metrics history over a full window.

Run: .venv/bin/python bench/metrics_history_bench.py [--nodes 100] [--tasks-per-node 10]
Each node sends one batch per step (CPU, memory, 8 GPUs) and each of its tasks CPU, memory and
GPU, for the whole window (6 hours at 60 s): every series holds its maximum of points. Memory is
what tracemalloc counts for the history; answers are timed as the REST routes ask them
(every node since the window's start; one job's tasks), and their JSON size is given.
"""

from __future__ import annotations

import argparse
import json
import time
import tracemalloc

from libs.protocol.telemetry import MetricSample
from services.monitor.core.history import MetricHistory

T0 = 1_800_000_000.0


def batch(node: int, tasks: int, tick: int) -> list[MetricSample]:
    wave = (tick % 60) / 60
    samples = [
        MetricSample(name="node_cpu_usage_percent", value=30 + 40 * wave),
        MetricSample(name="node_memory_usage_percent", value=55.0),
    ]
    samples += [
        MetricSample(name="gpu_utilization", labels={"minor_number": str(g)}, value=80 * wave)
        for g in range(8)
    ]
    for t in range(tasks):
        labels = {"job_id": f"job-{node}-{t // 2}", "role": "worker", "index": str(t % 2)}
        samples += [
            MetricSample(name="task_cpu_percent", labels=labels, value=100 * wave),
            MetricSample(name="task_mem_usage_byte", labels=labels, value=2e9),
            MetricSample(name="task_gpu_percent", labels=labels, value=70.0),
        ]
    return samples


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--nodes", type=int, default=100)
    parser.add_argument("--tasks-per-node", type=int, default=10)
    args = parser.parse_args()
    history = MetricHistory(step=60, keep=6 * 3600)
    batches = [batch(n, args.tasks_per_node, 0) for n in range(args.nodes)]
    tracemalloc.start()
    started = time.perf_counter()
    for tick in range(history.capacity + 5):
        for n in range(args.nodes):
            history.record(f"node-{n}", batches[n], T0 + 60 * tick)
    filled = time.perf_counter() - started
    memory, _ = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    records = (history.capacity + 5) * args.nodes
    started = time.perf_counter()
    cluster = json.dumps(history.query(since=0))
    cluster_s = time.perf_counter() - started
    started = time.perf_counter()
    job = json.dumps(history.query(since=0, job_id="job-0-0"))
    job_s = time.perf_counter() - started
    print(f"series: {len(history.series)}, points each: {history.capacity}")
    print(f"memory of the history: {memory / 2**20:.1f} MiB")
    print(f"record one node's batch: {1e6 * filled / records:.0f} us ({records} batches)")
    print(f"every node's history: {1000 * cluster_s:.0f} ms, {len(cluster) / 2**10:.0f} KiB of JSON")
    print(f"one job's tasks: {1000 * job_s:.1f} ms, {len(job) / 2**10:.0f} KiB of JSON")


if __name__ == "__main__":
    main()
