"""Confinement over fake cgroup trees: what is detected and said, each file written, what is read back.

A fake unified (v2) or v1 hierarchy in a temporary folder stands for /sys/fs/cgroup: the files
the kernel would read are plain files here, so each value written is read back as written, and
what a task's group saw (its peak, its OOM kills) is written by the test as the kernel would.
"""

from __future__ import annotations

import errno
import hashlib
import os
import signal
import subprocess
from pathlib import Path
from typing import Any

import pytest
import structlog

from libs.protocol.capacity import Machine, reserve_for, tasks_memory_mb, tasks_pids
from services.orchestrator.adapters import confinement
from services.orchestrator.adapters.confinement import (
    Confinement,
    ConfinementError,
    MemoryOutcome,
    TaskGroups,
    TasksBudget,
    detect,
    platform_scope,
    tasks_budget,
)
from services.orchestrator.core.limits import LimitDefaults, task_limits

DISK = "a task's work dir has no size cap (its logs are rotated); see docs/architecture.md"
RLIMITS = {"memory": "RLIMIT_DATA, per process"}
NO_DEVICES = "cgroup v2 has no devices file (it needs eBPF): CUDA_VISIBLE_DEVICES only"
BUDGET = TasksBudget(memory_bytes=8 * 2**30, pids=10_000)
DEFAULTS = LimitDefaults(pids=321)
LIMITS = task_limits(2.5, 1536, [], "", DEFAULTS)
MACHINE = Machine(cores=8, memory_mb=16_384, pid_cap=100_000)

Writes = list[tuple[str, str, str]]


@pytest.fixture
def writes(monkeypatch: pytest.MonkeyPatch) -> Writes:
    """Each cgroup file written, in order: (its folder's name, the file, the value)."""
    seen: Writes = []
    write = confinement._write

    def spy(directory: Path, name: str, value: str | int) -> None:
        seen.append((directory.name, name, str(value)))
        write(directory, name, value)

    monkeypatch.setattr(confinement, "_write", spy)
    return seen


def _unified(root: Path, delegated: str = "cpu memory pids") -> Path:
    root.mkdir(exist_ok=True)
    (root / "cgroup.controllers").write_text("cpuset cpu io memory hugetlb pids rdma misc")
    (root / "cgroup.subtree_control").write_text(delegated + "\n")
    return root


def _v1(root: Path, controllers: tuple[str, ...] = ("memory", "cpu", "pids", "devices")) -> Path:
    root.mkdir(exist_ok=True)
    for controller in controllers:
        (root / controller).mkdir()
        (root / controller / "cgroup.procs").write_text("")
    return root


# detection ----------------------------------------------------------------------------------


def test_a_platform_that_is_not_root_holds_memory_by_rlimits_and_says_what_it_cannot(tmp_path: Path) -> None:
    _unified(tmp_path / "cg")
    found = detect(tmp_path / "data", root=tmp_path / "cg", self_cgroup="0::/\n", euid=1000, budget=BUDGET)
    why = "the platform is not root: no cgroups"
    assert found == Confinement(
        "rlimits", RLIMITS, {"cpu": why, "pids": why, "gpu devices": why, "disk": DISK}
    )
    assert found.describe() == (
        "task limits: memory (RLIMIT_DATA, per process); not enforced: cpu (the platform is not root: no"
        " cgroups); pids (the platform is not root: no cgroups); gpu devices (the platform is not root: no"
        f" cgroups); disk ({DISK})"
    )
    assert not (tmp_path / "cg" / platform_scope(tmp_path / "data")).exists()


def test_cgroup_v2_delegates_each_usable_controller_to_the_platforms_group_and_says_the_rest(
    tmp_path: Path, writes: Writes
) -> None:
    root = _unified(tmp_path / "cg")
    data = tmp_path / "data"
    found = detect(data, root=root, self_cgroup="0::/init.scope\n", euid=0, budget=BUDGET)
    base = root / platform_scope(data)
    assert found == Confinement(
        "cgroup v2",
        {"memory": "cgroup v2", "cpu": "cgroup v2", "pids": "cgroup v2"},
        {"gpu devices": NO_DEVICES, "disk": DISK},
        {"unified": base},
        BUDGET,
    )
    assert (base / "cgroup.subtree_control").read_text() == "+memory +cpu +pids"
    assert oct(base.stat().st_mode & 0o777) == oct(0o755)
    # All tasks together: the budget on the platform's own group, whatever the tasks ask.
    assert writes == [(base.name, "memory.max", str(8 * 2**30)), (base.name, "pids.max", "10000")]
    assert found.describe() == (
        "task limits: memory (cgroup v2), cpu (cgroup v2), pids (cgroup v2); all tasks together: 8,192 MB"
        f" memory, 10,000 processes; not enforced: gpu devices ({NO_DEVICES}); disk ({DISK})"
    )


def test_cgroup_v2_with_some_controllers_not_delegated_says_each_missing_one(tmp_path: Path) -> None:
    root = _unified(tmp_path / "cg", delegated="pids cpu")
    found = detect(tmp_path / "data", root=root, self_cgroup="", euid=0, budget=BUDGET)
    base = root / platform_scope(tmp_path / "data")
    assert (base / "cgroup.subtree_control").read_text() == "+cpu +pids"
    assert found.enforced == {"cpu": "cgroup v2", "pids": "cgroup v2"}
    assert found.missing == {
        "memory": "not delegated at the cgroup v2 root",
        "gpu devices": NO_DEVICES,
        "disk": DISK,
    }
    assert list(found.missing) == ["memory", "gpu devices", "disk"]


def test_cgroup_v2_with_nothing_delegated_falls_back_to_rlimits(tmp_path: Path) -> None:
    root = _unified(tmp_path / "cg", delegated="io cpuset")
    found = detect(tmp_path / "data", root=root, self_cgroup="", euid=0, budget=BUDGET)
    why = "cgroup v2 without memory, cpu or pids delegated at its root"
    assert found == Confinement("rlimits", RLIMITS, {"cpu": why, "pids": why, "disk": DISK})
    assert not (root / platform_scope(tmp_path / "data")).exists()


def test_cgroup_v2_whose_platform_group_cannot_delegate_falls_back_to_rlimits(tmp_path: Path) -> None:
    root = _unified(tmp_path / "cg")
    base = root / platform_scope(tmp_path / "data")
    (base / "cgroup.subtree_control").mkdir(parents=True)  # not a file: cannot be written
    found = detect(tmp_path / "data", root=root, self_cgroup="", euid=0, budget=BUDGET)
    why = (
        f"cannot create the cgroup {base}: [Errno {errno.EISDIR}] Is a directory:"
        f" '{base / 'cgroup.subtree_control'}'"
    )
    assert found == Confinement("rlimits", RLIMITS, {"cpu": why, "pids": why, "disk": DISK})


def test_a_hybrid_machine_with_a_memory_hierarchy_is_treated_as_v1(tmp_path: Path) -> None:
    root = _v1(_unified(tmp_path / "cg"))
    found = detect(tmp_path / "data", root=root, self_cgroup="", euid=0, budget=BUDGET)
    assert found.mechanism == "cgroup v1"


def test_cgroup_v1_groups_sit_under_the_orchestrators_own_group_of_each_controller(
    tmp_path: Path, writes: Writes
) -> None:
    root = _v1(tmp_path / "cg")
    (root / "memory" / "memory.memsw.limit_in_bytes").write_text("")
    own = (
        "12:pids:/system.slice/pai.service\n11:memory:/system.slice/pai.service\n10:cpu,cpuacct:/user\n0::/\n"
    )
    data = tmp_path / "data"
    scope = platform_scope(data)
    found = detect(data, root=root, self_cgroup=own, euid=0, budget=BUDGET)
    bases = {
        "memory": root / "memory" / "system.slice" / "pai.service" / scope,
        "cpu": root / "cpu" / "user" / scope,
        "pids": root / "pids" / "system.slice" / "pai.service" / scope,
        "devices": root / "devices" / scope,  # not in /proc/self/cgroup: the hierarchy's root
    }
    assert found == Confinement(
        "cgroup v1",
        {"memory": "cgroup v1", "cpu": "cgroup v1", "gpu devices": "cgroup v1", "pids": "cgroup v1"},
        {"disk": DISK},
        bases,
        BUDGET,
    )
    assert all(base.is_dir() for base in bases.values())
    assert writes == [
        (scope, "memory.limit_in_bytes", str(8 * 2**30)),
        (scope, "pids.max", "10000"),
    ]
    # The memsw file is the platform's memory group's own: this one has none.
    assert not (bases["memory"] / "memory.memsw.limit_in_bytes").exists()
    assert found.describe() == (
        "task limits: memory (cgroup v1), cpu (cgroup v1), pids (cgroup v1), gpu devices (cgroup v1); all"
        f" tasks together: 8,192 MB memory, 10,000 processes; not enforced: disk ({DISK})"
    )


def test_cgroup_v1_caps_memory_and_swap_together_where_the_kernel_counts_swap(
    tmp_path: Path, writes: Writes
) -> None:
    root = _v1(tmp_path / "cg", ("memory",))
    scope = platform_scope(tmp_path / "data")
    (root / "memory" / scope).mkdir()
    (root / "memory" / scope / "memory.memsw.limit_in_bytes").write_text("")
    detect(tmp_path / "data", root=root, self_cgroup="", euid=0, budget=BUDGET)
    assert writes == [
        (scope, "memory.limit_in_bytes", str(8 * 2**30)),
        (scope, "memory.memsw.limit_in_bytes", str(8 * 2**30)),
    ]


def test_cgroup_v1_names_each_controller_not_mounted_or_whose_group_cannot_be_made(tmp_path: Path) -> None:
    root = _v1(tmp_path / "cg", ("memory", "cpu"))
    (root / "cpu" / "blocked").write_text("")  # a file where the orchestrator's cpu group would be
    found = detect(tmp_path / "data", root=root, self_cgroup="4:cpu:/blocked\n", euid=0, budget=BUDGET)
    cpu_base = root / "cpu" / "blocked" / platform_scope(tmp_path / "data")
    assert found.enforced == {"memory": "cgroup v1"}
    assert found.missing == {
        "cpu": f"cannot create the cgroup {cpu_base}: Not a directory",
        "pids": "no pids cgroup controller is mounted",
        "gpu devices": "no devices cgroup controller is mounted",
        "disk": DISK,
    }
    assert list(found.missing) == ["cpu", "pids", "gpu devices", "disk"]


def test_cgroup_v1_without_any_usable_controller_falls_back_to_rlimits(tmp_path: Path) -> None:
    root = tmp_path / "cg"
    root.mkdir()
    found = detect(tmp_path / "data", root=root, self_cgroup="", euid=0, budget=BUDGET)
    assert found == Confinement(
        "rlimits",
        RLIMITS,
        {
            "memory": "no memory cgroup controller is mounted",
            "cpu": "no cpu cgroup controller is mounted",
            "pids": "no pids cgroup controller is mounted",
            "devices": "no devices cgroup controller is mounted",
            "disk": DISK,
        },
    )
    assert found.describe().startswith(
        "task limits: memory (RLIMIT_DATA, per process); not enforced: memory (no"
    )


def test_a_budget_that_cannot_be_set_is_said_and_not_claimed(tmp_path: Path) -> None:
    root = _unified(tmp_path / "cg")
    base = root / platform_scope(tmp_path / "data")
    (base / "memory.max").mkdir(parents=True)  # cannot be written
    found = detect(tmp_path / "data", root=root, self_cgroup="", euid=0, budget=BUDGET)
    assert found.budget is None
    assert found.mechanism == "cgroup v2"
    assert found.bases == {"unified": base}
    assert (
        found.missing["all tasks together"]
        == f"cannot set {base / 'memory.max'} to {8 * 2**30}: Is a directory"
    )
    assert found.enforced == {"memory": "cgroup v2", "cpu": "cgroup v2", "pids": "cgroup v2"}
    assert "all tasks together: 8,192 MB" not in found.describe()


def test_detect_holds_all_tasks_to_the_machine_less_the_platforms_reserve_by_default(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(confinement, "read_machine", lambda: MACHINE)
    found = detect(tmp_path / "data", root=_unified(tmp_path / "cg"), self_cgroup="", euid=0)
    assert found.budget == tasks_budget()


def test_the_tasks_budget_is_the_machine_less_the_reserve_the_admin_set_or_the_default(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(confinement, "read_machine", lambda: MACHINE)
    assert tasks_budget(1024, 5000) == TasksBudget((16_384 - 1024) * 2**20, 95_000)
    default = reserve_for(MACHINE)
    assert tasks_budget() == TasksBudget(
        tasks_memory_mb(MACHINE, default) * 2**20, tasks_pids(MACHINE, default)
    )
    assert tasks_budget(reserve_pids=5000) == TasksBudget(tasks_memory_mb(MACHINE, default) * 2**20, 95_000)
    assert tasks_budget(reserve_memory_mb=2048) == TasksBudget(
        (16_384 - 2048) * 2**20, tasks_pids(MACHINE, default)
    )
    assert TasksBudget(3 * 2**30 + 2**19, 12_345).describe() == (
        "all tasks together: 3,072 MB memory, 12,345 processes"
    )


def test_own_groups_reads_each_controller_and_the_unified_one_from_proc_self_cgroup() -> None:
    text = "12:pids:/a\n4:cpu,cpuacct:/b:c\n0::/unified\nnot a line\n1:name=systemd:/d\n"
    assert confinement._own_groups(text) == {
        "pids": "/a",
        "cpu": "/b:c",
        "cpuacct": "/b:c",
        "": "/unified",
        "name=systemd": "/d",
    }
    assert confinement._own_groups("") == {}


def test_a_group_that_cannot_be_made_is_a_confinement_error_naming_it(tmp_path: Path) -> None:
    (tmp_path / "file").write_text("")
    with pytest.raises(ConfinementError) as failed:
        confinement._make(tmp_path / "file" / "group")
    assert str(failed.value) == f"cannot create the cgroup {tmp_path / 'file' / 'group'}: Not a directory"
    confinement._make(tmp_path / "a" / "b")
    confinement._make(tmp_path / "a" / "b")  # there already: fine
    assert oct((tmp_path / "a" / "b").stat().st_mode & 0o777) == oct(0o755)


# a task's groups ----------------------------------------------------------------------------


def _groups(tmp_path: Path, v1: bool = False) -> TaskGroups:
    root = _v1(tmp_path / "cg") if v1 else _unified(tmp_path / "cg")
    return TaskGroups(detect(tmp_path / "data", root=root, self_cgroup="", euid=0, budget=BUDGET), DEFAULTS)


def test_a_v2_task_group_gets_memory_no_swap_cpu_and_processes_in_that_order(
    tmp_path: Path, writes: Writes
) -> None:
    groups = _groups(tmp_path)
    assert groups.uses_cgroups
    writes.clear()
    [group] = groups.create("job.0.w.0", LIMITS)
    assert group == tmp_path / "cg" / platform_scope(tmp_path / "data") / "job.0.w.0"
    assert writes == [
        ("job.0.w.0", "memory.max", str(1536 * 2**20)),
        ("job.0.w.0", "memory.swap.max", "0"),
        ("job.0.w.0", "cpu.max", "250000 100000"),
        ("job.0.w.0", "pids.max", "321"),
    ]


def test_a_v2_kernel_without_swap_accounting_still_gets_the_other_limits(tmp_path: Path) -> None:
    groups = _groups(tmp_path)
    base = groups.confinement.bases["unified"]
    (base / "t" / "memory.swap.max").mkdir(parents=True)  # not writable: no swap accounting
    [group] = groups.create("t", LIMITS)
    assert (group / "cpu.max").read_text() == "250000 100000"
    assert (group / "pids.max").read_text() == "321"


def test_a_v1_task_group_gets_each_controllers_files_and_memory_with_swap_where_counted(
    tmp_path: Path, writes: Writes
) -> None:
    groups = _groups(tmp_path, v1=True)
    memory = groups.confinement.bases["memory"] / "t"
    memory.mkdir()
    (memory / "memory.memsw.limit_in_bytes").write_text("")  # the kernel counts swap
    limits = task_limits(1.5, 512, [1], "195 nvidia-frontend\n", DEFAULTS)
    writes.clear()
    made = groups.create("t", limits)
    assert [g.parent.parent.name for g in made] == ["memory", "cpu", "pids", "devices"]
    allow = [("t", "devices.allow", rule) for rule in limits.device_rules[1:]]
    assert writes == [
        ("t", "memory.limit_in_bytes", str(512 * 2**20)),
        ("t", "memory.memsw.limit_in_bytes", str(512 * 2**20)),
        ("t", "cpu.cfs_period_us", "100000"),
        ("t", "cpu.cfs_quota_us", "150000"),
        ("t", "cpu.shares", str(round(1.5 * 1024))),
        ("t", "pids.max", "321"),
        ("t", "devices.deny", "a"),
        *allow,
    ]
    assert ("t", "devices.allow", "c 195:1 rwm") in allow
    writes.clear()
    groups.create("u", limits)
    assert ("u", "memory.memsw.limit_in_bytes", str(512 * 2**20)) not in writes  # no swap counted


def test_a_task_group_that_cannot_be_limited_is_removed_and_the_error_raised(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    groups = _groups(tmp_path, v1=True)
    (groups.confinement.bases["pids"] / "t" / "pids.max").mkdir(parents=True)
    removed: list[list[Path]] = []

    def remove(made: list[Path]) -> list[Path]:
        removed.append(list(made))
        return []

    monkeypatch.setattr(groups, "remove", remove)
    with pytest.raises(ConfinementError, match=r"cannot set .*/pids/.*/t/pids.max to 321: Is a directory"):
        groups.create("t", LIMITS)
    assert removed == [[groups.confinement.bases[c] / "t" for c in ("memory", "cpu", "pids")]]


# what a task's memory group saw -------------------------------------------------------------


def test_a_v1_memory_group_gives_its_oom_kills_peak_limit_and_hits(tmp_path: Path) -> None:
    cpu, memory = tmp_path / "cpu", tmp_path / "memory"
    cpu.mkdir()
    memory.mkdir()
    (memory / "memory.oom_control").write_text("oom_kill_disable 0\nunder_oom 0\noom_kill 2\n")
    (memory / "memory.max_usage_in_bytes").write_text("123456\n")
    (memory / "memory.limit_in_bytes").write_text("1048576\n")
    (memory / "memory.failcnt").write_text("7\n")
    groups = TaskGroups(Confinement("cgroup v1"))
    assert groups.memory([cpu, memory]) == MemoryOutcome(2, 123456, 1048576, 7)
    (memory / "memory.oom_control").write_text("oom_kill_disable 0\nunder_oom 0\n")  # an older kernel
    assert groups.memory([memory]) == MemoryOutcome(0, 123456, 1048576, 7)


def test_a_v2_memory_group_gives_its_oom_kills_peak_limit_and_hits(tmp_path: Path) -> None:
    group = tmp_path / "t"
    group.mkdir()
    (group / "memory.events").write_text("low 0\nhigh 0\nmax 5\noom 1\noom_kill 3\noom_group_kill 0\n")
    (group / "memory.peak").write_text("999\n")
    (group / "memory.max").write_text("2048\n")
    groups = TaskGroups(Confinement("cgroup v2"))
    assert groups.memory([group]) == MemoryOutcome(3, 999, 2048, 5)
    (group / "memory.max").write_text("max\n")  # no limit
    (group / "memory.peak").unlink()  # a kernel before 5.19
    (group / "memory.events").write_text("low 0\nhigh 0\n")
    assert groups.memory([group]) == MemoryOutcome(0, 0, 0, 0)


def test_a_memory_group_gone_or_unreadable_gives_the_next_or_none(tmp_path: Path) -> None:
    broken, good = tmp_path / "broken", tmp_path / "good"
    broken.mkdir()
    good.mkdir()
    (broken / "memory.events").write_text("oom_kill 1\n")  # its limit file is gone
    (good / "memory.events").write_text("oom_kill 4\nmax 1\n")
    (good / "memory.max").write_text("4096")
    garbled = tmp_path / "garbled"
    garbled.mkdir()
    (garbled / "memory.oom_control").write_text("oom_kill 1\n")
    (garbled / "memory.max_usage_in_bytes").write_text("lots\n")
    groups = TaskGroups(Confinement("cgroup v2"))
    assert groups.memory([broken, garbled, good]) == MemoryOutcome(4, 0, 4096, 1)
    assert groups.memory([broken, garbled, tmp_path / "gone"]) is None
    assert groups.memory([]) is None


def test_fields_reads_name_value_lines_as_numbers_and_skips_the_rest() -> None:
    text = "oom_kill 2\nunder_oom -1\nname value\nthree words 4\nhigh 5 6\nbad X5\n\nlone\nmax 10\n"
    assert confinement._fields(text) == {"oom_kill": 2, "under_oom": -1, "max": 10}


# removal ------------------------------------------------------------------------------------


def test_removing_groups_kills_what_is_left_in_them_and_returns_the_busy_ones(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    busy, gone, other, done = (tmp_path / n for n in ("busy", "gone", "other", "done"))
    for directory in (busy, other, done):
        directory.mkdir()
    (busy / "cgroup.procs").write_text("101\n102\n")
    (other / "cgroup.procs").write_text("not-a-pid\n")
    killed: list[tuple[int, int]] = []

    def kill(pid: int, sig: int) -> None:
        if pid == 101:
            raise ProcessLookupError(pid)  # ended meanwhile
        killed.append((pid, sig))

    real_rmdir = Path.rmdir

    def rmdir(path: Path) -> None:
        if path.name == "busy":
            raise OSError(errno.EBUSY, "Device or resource busy", str(path))
        if path.name == "other":
            raise OSError(errno.EACCES, "Permission denied", str(path))
        real_rmdir(path)

    monkeypatch.setattr(os, "kill", kill)
    monkeypatch.setattr(Path, "rmdir", rmdir)
    groups = TaskGroups(Confinement("cgroup v2"))
    with structlog.testing.capture_logs() as logs:
        assert groups.remove([busy, gone, other, done]) == [busy]
    assert killed == [(102, signal.SIGKILL)]
    assert not done.exists()
    assert logs == [
        {
            "event": "cannot remove a task's cgroup",
            "cgroup": str(other),
            "error": f"[Errno {errno.EACCES}] Permission denied: '{other}'",
            "log_level": "warning",
        }
    ]


def test_removing_a_group_kills_a_real_process_left_in_it(tmp_path: Path) -> None:
    left = subprocess.Popen(["sleep", "60"])
    try:
        group = tmp_path / "g"
        group.mkdir()
        (group / "cgroup.procs").write_text(f"{left.pid}\n")
        TaskGroups(Confinement("cgroup v2")).remove([group])  # not empty here: logged, kept
        assert left.wait(timeout=10) == -signal.SIGKILL
    finally:
        left.kill()
        left.wait()


def test_the_orchestrators_own_groups_are_read_from_proc_self_cgroup_by_default(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    root = _v1(tmp_path / "cg", ("memory",))
    read_text = Path.read_text
    proc: list[str | None] = ["7:memory:/system.slice/pai.service\n"]

    def read(path: Path, *args: Any, **kwargs: Any) -> str:
        if str(path) == "/proc/self/cgroup":
            if proc[0] is None:
                raise PermissionError(13, "Permission denied", str(path))
            return proc[0]
        return read_text(path, *args, **kwargs)

    monkeypatch.setattr(Path, "read_text", read)
    scope = platform_scope(tmp_path / "data")
    found = detect(tmp_path / "data", root=root, euid=0, budget=BUDGET)
    assert found.bases == {"memory": root / "memory" / "system.slice" / "pai.service" / scope}
    proc[0] = None  # unreadable: the hierarchy's root
    found = detect(tmp_path / "data", root=root, euid=0, budget=BUDGET)
    assert found.bases == {"memory": root / "memory" / scope}


def test_a_platforms_scope_is_its_resolved_data_dirs_hash(tmp_path: Path) -> None:
    (tmp_path / "data").mkdir()
    (tmp_path / "link").symlink_to(tmp_path / "data")
    digest = hashlib.sha256(str((tmp_path / "data").resolve()).encode()).hexdigest()
    assert platform_scope(tmp_path / "data") == "pai-" + digest[:12]
    assert platform_scope(tmp_path / "link") == platform_scope(tmp_path / "data")


def test_a_machine_that_holds_nothing_says_so() -> None:
    assert Confinement("none").describe() == "task limits: nothing"
    assert (
        Confinement("none", missing={"cpu": "why"}).describe()
        == "task limits: nothing; not enforced: cpu (why)"
    )


def test_task_groups_take_the_default_limits_unless_given() -> None:
    assert TaskGroups(Confinement("none")).defaults == LimitDefaults()
    assert TaskGroups(Confinement("none"), DEFAULTS).defaults is DEFAULTS
    assert not TaskGroups(Confinement("none")).uses_cgroups
