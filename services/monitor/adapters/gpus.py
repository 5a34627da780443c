"""GPU discovery, health and use: model, memory, utilisation, ECC errors, which pid uses which GPU.

NVML (through nvidia-ml-py, imported as ``pynvml``) is asked first: no process per sample, and
the same library the NVIDIA driver ships. Where NVML cannot be loaded (no driver, no library)
nvidia-smi's CSV output is the fallback; a machine with neither (or without GPUs) simply has
no GPUs and no GPU samples. ``nvml`` parameters take a module of the same shape as
``pynvml``, so a test can stand in for the driver at exactly this boundary.
"""

from __future__ import annotations

import contextlib
import shutil
import subprocess
from dataclasses import dataclass
from types import ModuleType
from typing import Any

import structlog

log = structlog.get_logger(__name__)

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
    model: str = ""


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


def load_nvml() -> ModuleType | None:
    """The ``pynvml`` module, or None when nvidia-ml-py is not installed."""
    try:
        import pynvml  # type: ignore[import-untyped]  # nvidia-ml-py ships no type hints
    except ImportError:
        return None
    module: ModuleType = pynvml
    return module


def _text(value: Any) -> str:
    return value.decode(errors="replace") if isinstance(value, bytes) else str(value)


def _or_zero(nvml: ModuleType, read: Any, *args: Any) -> Any:
    """What a card cannot tell (no ECC on consumer cards, ...) reads as 0, as nvidia-smi's N/A."""
    try:
        return read(*args)
    except nvml.NVMLError:
        return 0


def nvml_query(nvml: ModuleType | None = None) -> tuple[list[Gpu], list[GpuProcess]] | None:
    """GPUs and their processes through NVML; None when NVML cannot be used on this machine."""
    nvml = nvml if nvml is not None else load_nvml()
    if nvml is None:
        return None
    try:
        nvml.nvmlInit()
    except nvml.NVMLError as exc:
        log.debug("NVML not available", error=str(exc))
        return None
    try:
        gpus: list[Gpu] = []
        apps: list[GpuProcess] = []
        for index in range(nvml.nvmlDeviceGetCount()):
            handle = nvml.nvmlDeviceGetHandleByIndex(index)
            uuid = _text(nvml.nvmlDeviceGetUUID(handle))
            memory = nvml.nvmlDeviceGetMemoryInfo(handle)
            rates = _or_zero(nvml, nvml.nvmlDeviceGetUtilizationRates, handle)
            ecc = nvml.nvmlDeviceGetTotalEccErrors
            volatile = nvml.NVML_VOLATILE_ECC
            gpus.append(
                Gpu(
                    index=index,
                    uuid=uuid,
                    utilization=float(getattr(rates, "gpu", 0)),
                    memory_utilization=float(getattr(rates, "memory", 0)),
                    memory_used_mb=memory.used / 2**20,
                    memory_total_mb=memory.total / 2**20,
                    ecc_single=float(
                        _or_zero(nvml, ecc, handle, nvml.NVML_MEMORY_ERROR_TYPE_CORRECTED, volatile)
                    ),
                    ecc_double=float(
                        _or_zero(nvml, ecc, handle, nvml.NVML_MEMORY_ERROR_TYPE_UNCORRECTED, volatile)
                    ),
                    model=_text(nvml.nvmlDeviceGetName(handle)),
                )
            )
            for process in _or_zero(nvml, nvml.nvmlDeviceGetComputeRunningProcesses, handle) or []:
                used = getattr(process, "usedGpuMemory", None) or 0
                apps.append(GpuProcess(int(process.pid), uuid, used / 2**20))
        return gpus, apps
    except nvml.NVMLError as exc:
        log.warning("NVML query failed", error=str(exc))
        return None
    finally:
        with contextlib.suppress(nvml.NVMLError):
            nvml.nvmlShutdown()


def query(nvml: ModuleType | None = None) -> tuple[list[Gpu], list[GpuProcess]]:
    """This node's GPUs and the processes using them: NVML, else nvidia-smi, else ([], [])."""
    found = nvml_query(nvml)
    if found is not None:
        return found
    gpus = _query([f"--query-gpu={GPU_FIELDS}"])
    if gpus is None:
        return [], []
    apps = _query([f"--query-compute-apps={APP_FIELDS}"]) or ""
    return parse_gpus(gpus), parse_processes(apps)
