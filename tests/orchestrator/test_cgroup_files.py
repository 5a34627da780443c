"""A task's limits reach the cgroup files with the right values, over fake cgroup directories.

Everywhere, root or not: the files the kernel reads are written as the kernel wants them. A
fractional, multi-core CPU tells quota from period apart (one core would hide a swap); the
process limit is written at all; memory swap is capped with memory.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from services.orchestrator.adapters.confinement import TaskGroups, TasksBudget, detect
from services.orchestrator.core.limits import LimitDefaults, task_limits

BUDGET = TasksBudget(memory_bytes=8 * 2**30, pids=10_000)
DEFAULTS = LimitDefaults(pids=321)
LIMITS = task_limits(2.5, 1536, [], "", DEFAULTS)


def _v2(root: Path) -> TaskGroups:
    (root / "cgroup.controllers").write_text("cpu memory pids")
    (root / "cgroup.subtree_control").write_text("cpu memory pids")
    return TaskGroups(detect(root / "data", root=root, self_cgroup="0::/\n", euid=0, budget=BUDGET), DEFAULTS)


def _v1(root: Path) -> TaskGroups:
    for controller in ("memory", "cpu", "pids", "devices"):
        (root / controller).mkdir()
        (root / controller / "cgroup.procs").write_text("")
    found = detect(root / "data", root=root, self_cgroup="", euid=0, budget=BUDGET)
    return TaskGroups(found, DEFAULTS)


def test_cgroup_v2_files_hold_the_tasks_cpu_memory_and_processes(tmp_path: Path) -> None:
    [group] = _v2(tmp_path).create("job.0.worker-0.0", LIMITS)
    assert (group / "cpu.max").read_text() == "250000 100000"  # 2.5 cores: quota, then period
    assert (group / "memory.max").read_text() == str(1536 * 2**20)
    assert (group / "memory.swap.max").read_text() == "0"
    assert (group / "pids.max").read_text() == "321"


def test_cgroup_v1_files_hold_the_tasks_cpu_memory_and_processes(tmp_path: Path) -> None:
    groups = {g.parent.parent.name: g for g in _v1(tmp_path).create("job.0.worker-0.0", LIMITS)}
    assert (groups["cpu"] / "cpu.cfs_quota_us").read_text() == "250000"
    assert (groups["cpu"] / "cpu.cfs_period_us").read_text() == "100000"
    assert (groups["cpu"] / "cpu.shares").read_text() == str(round(2.5 * 1024))
    assert (groups["memory"] / "memory.limit_in_bytes").read_text() == str(1536 * 2**20)
    assert (groups["pids"] / "pids.max").read_text() == "321"
    assert (groups["devices"] / "devices.deny").read_text() == "a"


@pytest.mark.parametrize("cores", [0.5, 1, 4])
def test_the_quota_is_the_cores_times_the_period(tmp_path: Path, cores: float) -> None:
    [group] = _v2(tmp_path).create("t", task_limits(cores, 256, [], "", DEFAULTS))
    quota, period = (int(x) for x in (group / "cpu.max").read_text().split())
    assert quota == round(cores * period)
