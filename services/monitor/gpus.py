"""GPU health and use through nvidia-smi: utilisation, memory, ECC errors, and which pid uses which GPU.

nvidia-smi's CSV output is stable across driver versions and needs no Python binding; NVML
through nvidia-ml-py would save a process per sample and can replace `query` behind the same
functions. A machine without nvidia-smi (or without GPUs) simply has no GPU samples.
"""

from __future__ import annotations

import shutil
import subprocess
from dataclasses import dataclass

GPU_FIELDS = (
    "index,uuid,utilization.gpu,utilization.memory,memory.used,memory.total,"
    "ecc.errors.corrected.volatile.total,ecc.errors.uncorrected.volatile.total"
)
APP_FIELDS = "pid,gpu_uuid,used_memory"


@dataclass(frozen=True)
class Gpu:
    index: int
    uuid: str
    utilization: float
    memory_utilization: float
    memory_used_mb: float
    memory_total_mb: float
    ecc_single: float
    ecc_double: float


@dataclass(frozen=True)
class GpuProcess:
    pid: int
    gpu_uuid: str
    memory_used_mb: float


def _number(text: str) -> float:
    """nvidia-smi prints "[N/A]" or "[Not Supported]" for what a card cannot tell; that reads as 0."""
    try:
        return float(text.strip().split()[0])
    except (ValueError, IndexError):
        return 0.0


def parse_gpus(csv: str) -> list[Gpu]:
    gpus = []
    for line in csv.splitlines():
        cells = [c.strip() for c in line.split(",")]
        if len(cells) < 8 or not cells[0].isdigit():
            continue
        index, uuid, *numbers = cells
        util, mem_util, used, total, single, double = (_number(n) for n in numbers[:6])
        gpus.append(Gpu(int(index), uuid, util, mem_util, used, total, single, double))
    return gpus


def parse_processes(csv: str) -> list[GpuProcess]:
    found = []
    for line in csv.splitlines():
        cells = [c.strip() for c in line.split(",")]
        if len(cells) < 3 or not cells[0].isdigit():
            continue
        found.append(GpuProcess(int(cells[0]), cells[1], _number(cells[2])))
    return found


def _query(args: list[str]) -> str | None:
    smi = shutil.which("nvidia-smi")
    if smi is None:
        return None
    try:
        return subprocess.run(
            [smi, *args, "--format=csv,noheader,nounits"],
            capture_output=True,
            text=True,
            timeout=10,
            check=True,
        ).stdout
    except (OSError, subprocess.SubprocessError):
        return None


def query() -> tuple[list[Gpu], list[GpuProcess]]:
    """This node's GPUs and the processes using them; ([], []) without nvidia-smi."""
    gpus = _query([f"--query-gpu={GPU_FIELDS}"])
    if gpus is None:
        return [], []
    apps = _query([f"--query-compute-apps={APP_FIELDS}"]) or ""
    return parse_gpus(gpus), parse_processes(apps)
