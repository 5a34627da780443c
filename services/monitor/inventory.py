"""What this node offers: CPUs, memory and GPUs (NVML, else nvidia-smi; or simulated ones).

No GPU is a valid answer. On a machine without GPUs, `pai up --gpus N[:MODEL]` declares N
simulated ones (libs/protocol/simulated_gpus.py), reported like real ones. Overcommit factors
let the embedded platform, where tasks are plain processes sharing one machine, offer more CPU
and memory than the hardware has; production nodes keep the factors at 1.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from types import ModuleType

import psutil

from libs.protocol.simulated_gpus import SimulatedGpus
from services.monitor import gpus


def detect_gpus(nvml: ModuleType | None = None) -> tuple[int, str | None]:
    """The number of NVIDIA GPUs and their model, or (0, None)."""
    found = gpus.nvml_query(nvml)
    if found is not None:
        cards = found[0]
        return len(cards), (cards[0].model if cards else None)
    smi = shutil.which("nvidia-smi")
    if smi is None:
        return 0, None
    try:
        out = subprocess.run(
            [smi, "--query-gpu=name", "--format=csv,noheader"],
            capture_output=True,
            text=True,
            timeout=10,
            check=True,
        ).stdout
    except (OSError, subprocess.SubprocessError):
        return 0, None
    names = [line.strip() for line in out.splitlines() if line.strip()]
    return len(names), (names[0] if names else None)


def detect_resources(
    cpu_overcommit: float = 1.0,
    memory_overcommit: float = 1.0,
    simulated: SimulatedGpus | None = None,
) -> tuple[int, int, int, str | None]:
    """(cpu, memory MB, gpus, gpu model) this node offers to tasks.

    Real GPUs win over simulated ones: a declaration only fills a machine that has none.
    """
    cpu = int((os.cpu_count() or 1) * cpu_overcommit)
    memory_mb = int(psutil.virtual_memory().total / 2**20 * memory_overcommit)
    count, model = detect_gpus()
    if count == 0 and simulated is not None:
        count, model = simulated.count, simulated.model
    return cpu, memory_mb, count, model
