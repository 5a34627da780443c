"""The FGD paper's experiment: Monte-Carlo workload inflation on a node list, one policy, one seed.

Every task of the trace arrives once, then tasks sampled from the trace with replacement arrive
until the GPU thousandths that arrived would pass `inflate` times the cluster's GPUs; the whole
list is shuffled and placed in order, nothing departs, and a task that fits nowhere stays
unallocated. The result is the share of the cluster's GPUs allocated when the arrived GPU
requests reach each whole percentage of the cluster (the paper's Fig. 9 measure) and the GPUs
left unallocated at 100% and at the end. Placement runs through `SharePlacer`, the scheduler's
own sharing code.
"""

from __future__ import annotations

import csv
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from services.scheduler.core.gpu_share import (
    DEFAULT_POLICY,
    MILLI,
    ShareDemand,
    ShareNode,
    SharePlacer,
    typical_mix,
)


class InflationError(ValueError):
    """A node list or trace that cannot be used; the text names the file, line and column."""


@dataclass(frozen=True)
class InflationRun:
    policy: str
    seed: int
    inflate: float


def _int(row: dict[str, str], key: str, path: Path, line: int) -> int:
    raw = row.get(key) or "0"
    try:
        return int(float(raw))
    except ValueError as err:
        raise InflationError(f"{path}:{line}: column {key} is not a number ({raw!r})") from err


def load_nodes(path: Path) -> list[ShareNode]:
    with path.open(newline="", encoding="utf-8") as f:
        reader = csv.DictReader(f)
        need = {"sn", "cpu_milli", "memory_mib", "gpu"}
        if not reader.fieldnames or not need <= set(reader.fieldnames):
            raise InflationError(f"{path}: a node list needs the columns sn,cpu_milli,memory_mib,gpu,model")
        nodes = []
        for line, row in enumerate(reader, start=2):
            gpus = _int(row, "gpu", path, line)
            if not 0 <= gpus <= 8:
                raise InflationError(f"{path}:{line}: column gpu is {gpus}; allowed 0..8")
            nodes.append(
                ShareNode(
                    row["sn"],
                    _int(row, "cpu_milli", path, line),
                    _int(row, "memory_mib", path, line),
                    gpus,
                    row.get("model") or "",
                )
            )
    if not nodes:
        raise InflationError(f"{path}: the node list is empty")
    return nodes


def load_demands(path: Path) -> list[ShareDemand]:
    with path.open(newline="", encoding="utf-8") as f:
        reader = csv.DictReader(f)
        need = {"cpu_milli", "num_gpu", "gpu_milli"}
        if not reader.fieldnames or not need <= set(reader.fieldnames):
            raise InflationError(
                f"{path}: a pod list needs the columns {sorted(need)} (and memory_mib, gpu_spec)"
            )
        demands = []
        for line, row in enumerate(reader, start=2):
            gpus = _int(row, "num_gpu", path, line)
            milli = _int(row, "gpu_milli", path, line) if gpus else 0
            if gpus and not 0 < milli <= MILLI:
                raise InflationError(
                    f"{path}:{line}: column gpu_milli is {milli}; allowed 1..1000 when num_gpu > 0"
                )
            if gpus > 1 and milli < MILLI:
                raise InflationError(
                    f"{path}:{line}: a share of a GPU (gpu_milli < 1000) needs num_gpu 1, not {gpus}"
                )
            models = tuple(m for m in (row.get("gpu_spec") or "").split("|") if m)
            demands.append(
                ShareDemand(
                    _int(row, "cpu_milli", path, line),
                    _int(row, "memory_mib", path, line),
                    gpus,
                    milli,
                    models,
                )
            )
    if not demands:
        raise InflationError(f"{path}: the pod list is empty")
    return demands


def inflated_arrivals(
    demands: list[ShareDemand], capacity_milli: int, inflate: float, seed: int
) -> list[ShareDemand]:
    """The trace plus samples with replacement until the next would pass `inflate` x capacity, shuffled.

    A trace that already asks for more loses tasks at random until it fits the target instead.
    """
    rng = np.random.default_rng(seed)
    target = inflate * capacity_milli
    arrived = sum(d.total_gpu_milli for d in demands)
    out = list(demands)
    while arrived > target:  # a trace larger than the target loses tasks at random
        gone = out.pop(int(rng.integers(len(out))))
        arrived -= gone.total_gpu_milli
    while arrived < target:
        d = demands[int(rng.integers(len(demands)))]
        if arrived + d.total_gpu_milli > target:
            break
        out.append(d)
        arrived += d.total_gpu_milli
    order = rng.permutation(len(out))
    return [out[i] for i in order]


def run(nodes: list[ShareNode], demands: list[ShareDemand], run: InflationRun) -> dict[str, Any]:
    wall = time.perf_counter()
    placer = SharePlacer(nodes, run.policy, typical_mix(demands), seed=run.seed)
    capacity = placer.total_gpu_milli
    arrivals = inflated_arrivals(demands, capacity, run.inflate, run.seed)
    top = int(run.inflate * 100)
    ratio: dict[str, float] = {}
    arrived = 0
    next_pct = 0
    failed = 0
    failed_gpu_milli = 0
    shared = 0
    for demand in arrivals:
        arrived += demand.total_gpu_milli
        binding = placer.choose(demand)
        if binding is None:
            failed += 1
            failed_gpu_milli += demand.total_gpu_milli
        else:
            placer.bind(binding, demand)
            shared += demand.shares_a_gpu
        while next_pct <= top and arrived * 100 >= next_pct * capacity:
            ratio[str(next_pct)] = round(100 * placer.allocated_gpu_milli / capacity, 2)
            next_pct += 1
    end = round(100 * placer.allocated_gpu_milli / capacity, 2)
    while next_pct <= top:
        ratio[str(next_pct)] = end
        next_pct += 1

    def unallocated(pct: float) -> float:
        return round((100 - pct) * capacity / MILLI / 100, 1)

    return {
        "policy": run.policy,
        "seed": run.seed,
        "inflate": run.inflate,
        "total_gpus": capacity // MILLI,
        "tasks_arrived": len(arrivals),
        "tasks_unallocated": failed,
        "gpus_requested_unallocated": round(failed_gpu_milli / MILLI, 1),
        "shared_gpu_tasks_placed": shared,
        "allocation_ratio": ratio,
        "allocation_ratio_end": end,
        "unallocated_gpus_at_100": unallocated(ratio.get("100", end)),
        "unallocated_gpus_end": unallocated(end),
        "wall_time_s": round(time.perf_counter() - wall, 2),
    }


def simulate_inflation(
    cluster: Path, trace: Path, inflate: float, policy: str = DEFAULT_POLICY, seed: int = 42
) -> dict[str, Any]:
    if not 1.0 <= inflate <= 10.0:
        raise InflationError(f"--inflate is {inflate}; allowed 1.0..10.0 (1.3 is the paper's 130%)")
    if cluster.suffix.lower() != ".csv":
        raise InflationError(
            f"{cluster}: --inflate needs a node-list CSV (sn,cpu_milli,memory_mib,gpu,model)"
        )
    return run(load_nodes(cluster), load_demands(trace), InflationRun(policy, seed, inflate))
