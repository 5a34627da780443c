"""What this node offers: CPUs, memory and GPUs (NVML, else nvidia-smi; or simulated ones).

No GPU is a valid answer. On a machine without GPUs, `pai up --gpus N[:MODEL]` declares N
simulated ones (libs/protocol/simulated_gpus.py), reported like real ones. CPU and memory are the
machine's less what the platform keeps for itself (libs/protocol/capacity.py); an admin may
declare overcommit factors, or the figures outright.
"""

from __future__ import annotations

import shutil
import subprocess
from collections.abc import Mapping
from types import ModuleType

from libs.protocol.capacity import Offer, node_offer, read_machine, reserve_for
from libs.protocol.simulated_gpus import SimulatedGpus
from services.monitor.adapters import gpus


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
    *,
    declared_cpus: int | None = None,
    declared_memory_mb: int | None = None,
    reserve_cpus: float | None = None,
    reserve_memory_mb: int | None = None,
) -> tuple[int, int, int, str | None]:
    """(cpu, memory MB, gpus, gpu model) this node offers to tasks: the machine less the
    platform's reserve (libs/protocol/capacity.py), or what an admin declared.

    Real GPUs win over simulated ones: a declaration only fills a machine that has none.
    """
    offer = node_offer_here(
        cpu_overcommit,
        memory_overcommit,
        declared_cpus=declared_cpus,
        declared_memory_mb=declared_memory_mb,
        reserve_cpus=reserve_cpus,
        reserve_memory_mb=reserve_memory_mb,
    )
    count, model = detect_gpus()
    if count == 0 and simulated is not None:
        count, model = simulated.count, simulated.model
    return offer.cpu, offer.memory_mb, count, model


def node_offer_here(
    cpu_overcommit: float = 1.0,
    memory_overcommit: float = 1.0,
    *,
    declared_cpus: int | None = None,
    declared_memory_mb: int | None = None,
    reserve_cpus: float | None = None,
    reserve_memory_mb: int | None = None,
) -> Offer:
    """What this machine offers, read once: the declared figures, else it less the reserve."""
    machine = read_machine()
    return node_offer(
        machine,
        reserve_for(machine, cpus=reserve_cpus, memory_mb=reserve_memory_mb),
        cpu_overcommit=cpu_overcommit,
        memory_overcommit=memory_overcommit,
        declared_cpus=declared_cpus,
        declared_memory_mb=declared_memory_mb,
    )


def _number(environ: Mapping[str, str], name: str, kind: type[float] | type[int]) -> float | int | None:
    text = environ.get(name, "").strip()
    if not text:
        return None
    try:
        value = kind(text)
    except ValueError:
        raise ValueError(f"{name}={text!r}: must be a number") from None
    if value < 0:
        raise ValueError(f"{name}={text!r}: must not be negative")
    return value


def offer_line(environ: Mapping[str, str]) -> str:
    """What the node offers and keeps, in one line for ``pai up`` (the monitor decides the same
    way from the same settings)."""
    try:
        offer = node_offer_here(
            float(environ.get("PAI_CPU_OVERCOMMIT") or 1),
            float(environ.get("PAI_MEMORY_OVERCOMMIT") or 1),
            declared_cpus=_int(_number(environ, "PAI_NODE_CPUS", int)),
            declared_memory_mb=_int(_number(environ, "PAI_NODE_MEMORY_MB", int)),
            reserve_cpus=_number(environ, "PAI_RESERVE_CPUS", float),
            reserve_memory_mb=_int(_number(environ, "PAI_RESERVE_MEMORY_MB", int)),
        )
    except ValueError as exc:
        return f"node offers: {exc}"
    return offer.how


def _int(value: float | None) -> int | None:
    return None if value is None else int(value)
