"""What this node offers: CPUs, memory and GPUs (through nvidia-smi where it exists).

No GPU is a valid answer. Overcommit factors let the embedded platform, where tasks are plain
processes sharing one machine, offer more CPU and memory than the hardware has; production
nodes keep the factors at 1.
"""

from __future__ import annotations

import os
import shutil
import subprocess

import psutil


def detect_gpus() -> tuple[int, str | None]:
    """The number of NVIDIA GPUs and their model, or (0, None)."""
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
    cpu_overcommit: float = 1.0, memory_overcommit: float = 1.0
) -> tuple[int, int, int, str | None]:
    """(cpu, memory MB, gpus, gpu model) this node offers to tasks."""
    cpu = int((os.cpu_count() or 1) * cpu_overcommit)
    memory_mb = int(psutil.virtual_memory().total / 2**20 * memory_overcommit)
    gpus, model = detect_gpus()
    return cpu, memory_mb, gpus, model
