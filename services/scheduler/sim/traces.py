"""Read what a simulation replays: a cluster (HiveD config or node list) and a job trace.

Two trace layouts are read. The Alibaba GPU cluster format has one pod per row (creation and
deletion times in seconds, GPUs, CPU, memory, an optional GPU model constraint). The job-list
format, Philly's as published with Pollux, has one job per row (`timestamp` of submission as a
date, `duration` in seconds, `num_gpus`); a job of more GPUs than a node holds is replayed as a
gang of whole-node pods by the simulator. Either may carry a VC column (`vc_column`): jobs then
keep their tenant, instead of being dealt to the cluster's VCs in turn.

Two node lists are read: the Alibaba one (sn, cpu_milli, memory_mib, gpu, model) and Philly's
machine list (machineId, number of GPUs, single GPU mem).
"""

from __future__ import annotations

import csv
import gzip
import io
import math
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any

import yaml

from services.scheduler.core.hived import DEFAULT_VC, config_from_nodes
from services.scheduler.core.placements import NodeInventory

# CPU and memory of a node whose list gives none (Philly's): enough never to be what is short.
UNLIMITED_CPU = 1 << 20
UNLIMITED_MEMORY_MB = 1 << 30


class SimError(ValueError):
    """The cluster, trace or quota file cannot be used; the text names the file and the problem."""


@dataclass
class SimPod:
    """One job of the trace; `gpus` is its total, split into whole-node pods when bigger than a node."""

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
    # VC -> GPUs it is guaranteed; set from a quota file (or the config), read by the quota policy.
    quotas: dict[str, int] = field(default_factory=dict)


def _open(path: Path) -> io.TextIOBase:
    if path.suffix == ".gz":
        return io.TextIOWrapper(gzip.open(path, "rb"), encoding="utf-8", newline="")
    return path.open(newline="", encoding="utf-8")


def _rows(path: Path) -> tuple[list[str], list[dict[str, str]]]:
    """Header (names stripped of spaces) and rows of a CSV file, gzipped or not."""
    with _open(path) as f:
        reader = csv.reader(f)
        header = [h.strip() for h in next(reader, [])]
        rows = [{h: v.strip() for h, v in zip(header, values, strict=False)} for values in reader if values]
    return header, rows


def _num(row: dict[str, str], key: str, path: Path, line: int) -> float:
    try:
        return float(row.get(key) or 0)
    except ValueError as err:
        raise SimError(f"{path}:{line}: column {key} is not a number ({row.get(key)!r})") from err


def read_nodes(path: Path) -> list[NodeInventory]:
    """The GPU nodes of a node-list CSV, in either layout the module names."""
    header, rows = _rows(path)
    nodes: list[NodeInventory] = []
    if {"sn", "gpu"} <= set(header):
        for line, row in enumerate(rows, start=2):
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
    elif {"machineId", "number of GPUs"} <= set(header):
        for line, row in enumerate(rows, start=2):
            name = row["machineId"]
            nodes.append(
                NodeInventory(
                    name,
                    name,
                    UNLIMITED_CPU,
                    UNLIMITED_MEMORY_MB,
                    int(_num(row, "number of GPUs", path, line)),
                )
            )
    else:
        raise SimError(
            f"{path}: a node list needs the columns sn,cpu_milli,memory_mib,gpu,model "
            "(or Philly's machineId,number of GPUs,single GPU mem)"
        )
    return nodes


def load_cluster(path: Path, rack_size: int = 8, vcs: int = 1) -> tuple[SimCluster, list[str]]:
    """A cluster and its VC names: a node list split into `vcs` equal VCs, or a HiveD config."""
    if path.suffix.lower() == ".csv":
        nodes = read_nodes(path)
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


_POD_COLUMNS = {"name", "num_gpu", "creation_time", "deletion_time"}
_JOB_COLUMNS = {"timestamp", "duration", "num_gpus"}


def load_trace(
    path: Path,
    vcs: list[str],
    limit: int = 0,
    vc_column: str = "",
    load: float = 1.0,
    skip_unknown_vcs: bool = False,
) -> tuple[list[SimPod], dict[str, int]]:
    """The trace's jobs by arrival, arrivals divided by `load`; `limit` keeps the first N to arrive.

    With `vc_column`, each job keeps the VC that column names; a row without one, or naming a VC
    the cluster lacks, is an error (or, with `skip_unknown_vcs`, an unknown VC's row is dropped
    and counted). Without it, jobs are dealt to `vcs` in turn.
    """
    if load <= 0:
        raise SimError(f"--load {load}: the load factor divides arrival times; give a number above 0")
    header, rows = _rows(path)
    columns = set(header)
    if vc_column and vc_column not in columns:
        raise SimError(
            f"{path}: --vc-column {vc_column!r} is not a column of the trace; choose one of {sorted(columns)}"
        )
    notes = {
        "fractional_gpu_pods_rounded_up": 0,
        "pods_without_times_skipped": 0,
        "multi_model_constraints": 0,
        "jobs_of_unknown_vcs_skipped": 0,
    }
    known = set(vcs)
    pods: list[SimPod] = []

    def vc_of(row: dict[str, str], line: int) -> str | None:
        if not vc_column:
            return vcs[len(pods) % len(vcs)]
        vc = row.get(vc_column, "")
        if not vc:
            raise SimError(
                f"{path}:{line}: no VC in column {vc_column}; fill it in or drop the row from the trace"
            )
        if vc not in known:
            if skip_unknown_vcs:
                notes["jobs_of_unknown_vcs_skipped"] += 1
                return None
            raise SimError(
                f"{path}:{line}: VC {vc!r} is not in the cluster (its VCs: {', '.join(sorted(known))}); "
                "add it to the quota file, or pass --skip-unknown-vcs to drop its jobs"
            )
        return vc

    if columns >= _POD_COLUMNS:
        for line, row in enumerate(rows, start=2):
            if not row.get("creation_time") or not row.get("deletion_time"):
                notes["pods_without_times_skipped"] += 1
                continue
            vc = vc_of(row, line)
            if vc is None:
                continue
            gpus = int(_num(row, "num_gpu", path, line))
            milli = _num(row, "gpu_milli", path, line) if row.get("gpu_milli") else 1000.0
            if gpus > 0 and milli < 1000:
                notes["fractional_gpu_pods_rounded_up"] += 1
                gpus = max(1, math.ceil(gpus * milli / 1000))
            models = tuple(m for m in (row.get("gpu_spec") or "").split("|") if m)
            notes["multi_model_constraints"] += len(models) > 1
            arrival = _num(row, "creation_time", path, line)
            pods.append(
                SimPod(
                    name=row["name"],
                    vc=vc,
                    arrival=arrival,
                    duration=max(0.0, _num(row, "deletion_time", path, line) - arrival),
                    gpus=gpus,
                    cpu=math.ceil(_num(row, "cpu_milli", path, line) / 1000),
                    memory_mb=int(_num(row, "memory_mib", path, line)),
                    models=models,
                    priority=-1 if row.get("qos", "") == "BE" else 0,
                )
            )
    elif columns >= _JOB_COLUMNS:
        for line, row in enumerate(rows, start=2):
            vc = vc_of(row, line)
            if vc is None:
                continue
            try:
                submitted = datetime.fromisoformat(row["timestamp"]).timestamp()
            except ValueError as err:
                raise SimError(
                    f"{path}:{line}: timestamp {row['timestamp']!r} is not a date (YYYY-MM-DD HH:MM:SS)"
                ) from err
            pods.append(
                SimPod(
                    name=f"job{line - 1}",
                    vc=vc,
                    arrival=submitted,
                    duration=max(0.0, _num(row, "duration", path, line)),
                    gpus=int(_num(row, "num_gpus", path, line)),
                    cpu=0,
                    memory_mb=0,
                    models=(),
                    priority=0,
                )
            )
        first = min((p.arrival for p in pods), default=0.0)
        for p in pods:
            p.arrival -= first
    else:
        raise SimError(
            f"{path}: a trace needs the columns {sorted(_POD_COLUMNS)} (pods, and cpu_milli, memory_mib) "
            f"or {sorted(_JOB_COLUMNS)} (jobs)"
        )
    pods.sort(key=lambda p: p.arrival)
    if limit:
        pods = pods[:limit]
    if load != 1.0:
        for p in pods:
            p.arrival /= load
    return pods, notes
