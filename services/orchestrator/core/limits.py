"""What a task may use of its machine: its job's resourcePerInstance as kernel limits.

OpenPAI's containers are held to what their task role asked for (Kubernetes turns requests into
cgroup limits); Slurm does the same with ConstrainRAMSpace, ConstrainCores and ConstrainDevices.
This module decides the numbers, from the task's resources and the operator's defaults; the
adapter (adapters/confinement.py) writes them to cgroups, or to rlimits where cgroups cannot be
used. Nothing here touches the machine: /proc/devices comes in as text.

- memory: ``memoryMB`` exactly, swap included (a task over it is killed: exit -1200);
- CPU: ``cpu`` cores as a CFS quota per period, and a weight in proportion. ``cpu: 0`` asks the
  scheduler for no reservation; it is still held to ``zero_cpu_cores`` (one core by default), so
  a task that reserved nothing cannot take the machine;
- processes: ``pids`` (4,096 by default) for the task's whole tree;
- GPUs: only the device nodes of the GPUs it was given (NVIDIA's major 195: ``nvidiaN`` is minor
  N, the control nodes 254/255 every CUDA process needs), every other character device the
  machine has registered stays usable. CUDA_VISIBLE_DEVICES alone is advice; this is the wall.
"""

from __future__ import annotations

from dataclasses import dataclass

CPU_PERIOD_US = 100_000
"""The CFS period: 100 ms, the kernel's default and Kubernetes' choice."""
DEFAULT_PIDS = 4096
DEFAULT_ZERO_CPU_CORES = 1.0
MIN_CPU_SHARES = 2
SHARES_PER_CORE = 1024

NVIDIA_MAJOR = 195
NVIDIA_CONTROL_MINORS = (254, 255)  # nvidia-modeset, nvidiactl
# Device drivers every CUDA process opens whatever GPU it uses (unified memory, MIG capabilities).
NVIDIA_SHARED_DRIVERS = ("nvidia-uvm", "nvidia-caps", "nvidia-nvlink", "nvidia-nvswitch")


@dataclass(frozen=True)
class LimitDefaults:
    """The operator's defaults (PAI_TASK_PIDS_MAX, PAI_TASK_ZERO_CPU_CORES)."""

    pids: int = DEFAULT_PIDS
    zero_cpu_cores: float = DEFAULT_ZERO_CPU_CORES


@dataclass(frozen=True)
class TaskLimits:
    """One task's limits, in the kernel's units."""

    memory_bytes: int
    cpu_quota_us: int
    cpu_period_us: int
    cpu_shares: int
    pids: int
    device_rules: tuple[str, ...]
    """cgroup v1 devices rules, in order: first ``a`` (deny everything), then what is allowed."""

    @property
    def memory_mb(self) -> int:
        return self.memory_bytes // (1024 * 1024)

    @property
    def cpus(self) -> float:
        return self.cpu_quota_us / self.cpu_period_us


def task_limits(
    cpu: float, memory_mb: int, gpu_indices: list[int], devices: str, defaults: LimitDefaults
) -> TaskLimits:
    """The limits of a task of ``cpu`` cores and ``memory_mb`` MB holding ``gpu_indices``.

    ``devices`` is the text of /proc/devices (which character majors the machine has)."""
    cores = cpu if cpu > 0 else defaults.zero_cpu_cores
    return TaskLimits(
        memory_bytes=memory_mb * 1024 * 1024,
        cpu_quota_us=max(1000, round(cores * CPU_PERIOD_US)),
        cpu_period_us=CPU_PERIOD_US,
        cpu_shares=max(MIN_CPU_SHARES, round(cpu * SHARES_PER_CORE)),
        pids=defaults.pids,
        device_rules=device_rules(gpu_indices, devices),
    )


def character_majors(devices: str) -> dict[int, str]:
    """The character devices of /proc/devices: major -> driver name."""
    majors: dict[int, str] = {}
    in_character = False
    for line in devices.splitlines():
        stripped = line.strip()
        if stripped.endswith(":"):
            in_character = stripped == "Character devices:"
            continue
        parts = stripped.split(None, 1)
        if in_character and len(parts) == 2 and parts[0].isdigit():
            majors[int(parts[0])] = parts[1]
    return majors


def device_rules(gpu_indices: list[int], devices: str) -> tuple[str, ...]:
    """Everything but the GPUs not given: every block device and every registered character
    major except NVIDIA's, then the given GPUs' minors and the control nodes."""
    rules = ["a", "b *:* rwm", "c *:* m"]
    for major, name in sorted(character_majors(devices).items()):
        if major == NVIDIA_MAJOR or (name.startswith("nvidia") and name not in NVIDIA_SHARED_DRIVERS):
            continue
        rules.append(f"c {major}:* rwm")
    for minor in (*sorted(set(gpu_indices)), *NVIDIA_CONTROL_MINORS):
        rules.append(f"c {NVIDIA_MAJOR}:{minor} rwm")
    return tuple(rules)
