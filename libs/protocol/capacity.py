"""What a node keeps for the platform, and what it offers to tasks.

A node's tasks must never take the machine from the services that run it (the bus, the
database, the API). So a share of the machine is reserved for the platform, and the rest is
what tasks get, in two places that agree:

- what the node **offers** the scheduler (the monitor reports it): the machine's cores and memory
  less the reserve, times the overcommit factors an admin declares (``PAI_CPU_OVERCOMMIT``,
  ``PAI_MEMORY_OVERCOMMIT``), or the figures an admin declares outright (``PAI_NODE_CPUS``,
  ``PAI_NODE_MEMORY_MB``);
- what all tasks together are **held to** by the kernel (the orchestrator's parent cgroup of
  every task): the machine's memory less the reserve, and its process table less the reserve,
  whatever was offered. Each task has its own limits inside that.

Disk too: the filesystem of the data dir (the bus's store, the database, the tasks' work dirs)
keeps a reserve free for the platform, and each task's work dir has a share of the rest; the
orchestrator stops a task past its share, and evicts the largest task when the reserve is
reached (as the kubelet does with ephemeral storage).

The reserve, unless an admin sets it (``PAI_RESERVE_CPUS``, ``PAI_RESERVE_MEMORY_MB``,
``PAI_RESERVE_PIDS``): half a core; a tenth of the memory, at least 1 GiB (at most half of it);
a tenth of the process table, at least 1,024 entries. A task's own process limit
(``PAI_TASK_PIDS_MAX``), unless set, is 4,096 or a sixteenth of what all tasks may hold, the
smaller, so that a fork bomb in up to sixteen tasks at once still leaves room for the next task.

Pure: the machine's figures come in as arguments (``read_machine`` reads them).
"""

from __future__ import annotations

import math
import os
from dataclasses import dataclass

CPU_RESERVE = 0.5
MEMORY_RESERVE_SHARE = 0.1
MIN_MEMORY_RESERVE_MB = 1024
PID_RESERVE_SHARE = 0.1
MIN_PID_RESERVE = 1024
TASK_PIDS = 4096
PIDS_SHARES = 16


@dataclass(frozen=True)
class Machine:
    cores: int
    memory_mb: int
    pid_cap: int
    """How many processes and threads the kernel allows in all (pid_max, threads-max)."""


@dataclass(frozen=True)
class Reserve:
    """What the platform keeps of a machine."""

    cpus: float
    memory_mb: int
    pids: int


@dataclass(frozen=True)
class Offer:
    """What a node offers the scheduler, and how the figures came about (for ``pai up``)."""

    cpu: int
    memory_mb: int
    how: str


def reserve_for(
    machine: Machine, *, cpus: float | None = None, memory_mb: int | None = None, pids: int | None = None
) -> Reserve:
    """The platform's share of ``machine``: the admin's figures where given, else the defaults."""
    if memory_mb is None:
        memory_mb = max(MIN_MEMORY_RESERVE_MB, round(machine.memory_mb * MEMORY_RESERVE_SHARE))
        memory_mb = min(memory_mb, machine.memory_mb // 2)
    if pids is None:
        pids = max(MIN_PID_RESERVE, round(machine.pid_cap * PID_RESERVE_SHARE))
        pids = min(pids, machine.pid_cap // 2)
    return Reserve(CPU_RESERVE if cpus is None else cpus, memory_mb, pids)


def tasks_memory_mb(machine: Machine, reserve: Reserve) -> int:
    """The memory all tasks together may hold."""
    return max(64, machine.memory_mb - reserve.memory_mb)


def tasks_pids(machine: Machine, reserve: Reserve) -> int:
    """The processes and threads all tasks together may hold."""
    return max(PIDS_SHARES * 16, machine.pid_cap - reserve.pids)


def task_pids_default(machine: Machine, reserve: Reserve) -> int:
    """One task's process limit when the admin set none."""
    return task_pids_of(tasks_pids(machine, reserve))


def task_pids_of(all_tasks_pids: int) -> int:
    """One task's process limit when the admin set none, from what all tasks may hold."""
    return min(TASK_PIDS, all_tasks_pids // PIDS_SHARES)


def node_offer(
    machine: Machine,
    reserve: Reserve,
    *,
    cpu_overcommit: float = 1.0,
    memory_overcommit: float = 1.0,
    declared_cpus: int | None = None,
    declared_memory_mb: int | None = None,
) -> Offer:
    """What the node offers: the declared figures, else the machine less the reserve times the
    overcommit factors (at least one core)."""
    if declared_cpus is not None:
        cpu = declared_cpus
        cpu_how = f"{cpu} CPUs (declared, PAI_NODE_CPUS)"
    else:
        cpu = max(1, math.floor((machine.cores - reserve.cpus) * cpu_overcommit))
        cpu_how = f"{cpu} CPUs ({machine.cores} cores less {reserve.cpus:g} reserved"
        cpu_how += f", times {cpu_overcommit:g} (PAI_CPU_OVERCOMMIT))" if cpu_overcommit != 1 else ")"
    if declared_memory_mb is not None:
        memory = declared_memory_mb
        memory_how = f"{memory:,} MB memory (declared, PAI_NODE_MEMORY_MB)"
    else:
        memory = int(tasks_memory_mb(machine, reserve) * memory_overcommit)
        memory_how = f"{memory:,} MB memory ({machine.memory_mb:,} MB less {reserve.memory_mb:,} MB reserved"
        memory_how += (
            f", times {memory_overcommit:g} (PAI_MEMORY_OVERCOMMIT))" if memory_overcommit != 1 else ")"
        )
    return Offer(cpu, memory, f"node offers {cpu_how}, {memory_how}")


DISK_RESERVE_SHARE = 0.1
MIN_DISK_RESERVE_MB = 64
MAX_DISK_RESERVE_MB = 4096
DISK_SHARES = 4


def disk_reserve_mb(filesystem_mb: int) -> int:
    """What the data dir's filesystem keeps free for the platform (its bus and database): a
    tenth of it, at least 64 MB and at most 4 GB (``PAI_RESERVE_DISK_MB`` overrides it)."""
    return min(MAX_DISK_RESERVE_MB, max(MIN_DISK_RESERVE_MB, round(filesystem_mb * DISK_RESERVE_SHARE)))


def task_disk_mb(filesystem_mb: int, reserve_mb: int) -> int:
    """What one task's work dir may hold: a quarter of what the filesystem keeps for tasks
    (``PAI_TASK_DISK_MB`` overrides it)."""
    return max(16, (filesystem_mb - reserve_mb) // DISK_SHARES)


def read_machine() -> Machine:
    """This machine's cores, memory and process table, from the kernel."""
    cores = os.cpu_count() or 1
    memory_mb = 0
    try:
        with open("/proc/meminfo", encoding="ascii") as info:
            for line in info:
                if line.startswith("MemTotal:"):
                    memory_mb = int(line.split()[1]) // 1024
                    break
    except (OSError, ValueError, IndexError):
        memory_mb = 0
    caps = []
    for name in ("pid_max", "threads-max"):
        try:
            with open(f"/proc/sys/kernel/{name}", encoding="ascii") as value:
                caps.append(int(value.read().strip()))
        except (OSError, ValueError):
            continue
    return Machine(cores, memory_mb or 1024, min(caps) if caps else 32768)
