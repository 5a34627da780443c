"""Kernel limits for local tasks: a cgroup per task attempt, or rlimits where there is none.

The numbers come from core/limits.py. Where they are enforced:

- **cgroup v1** (separate hierarchies per controller, as on machines in hybrid mode): a group per
  task in each of memory, cpu, pids and devices, under the orchestrator's own group of that
  controller, in ``pai-<platform>/``: a task's use still counts against whatever holds the
  platform itself;
- **cgroup v2** (one unified hierarchy with its controllers): a group per task under
  ``/sys/fs/cgroup/pai-<platform>/`` (the root may hold processes and delegate controllers; the
  orchestrator's own group usually may not). v2 has no devices file (it needs eBPF): GPUs are
  then held by CUDA_VISIBLE_DEVICES only, and ``pai up`` says so;
- **rlimits** when no group can be made (the platform is not root): the address space a task's
  process may allocate (RLIMIT_DATA, per process), nothing for CPU or processes.

The executor makes the groups before a task starts and names them in its spec; the runtime joins
them first thing (it is root then), so the runtime and everything it starts are inside before the
user's command runs, and a task cannot leave them (their files are root's). When the task has
ended the executor reads what its memory group saw (an OOM kill, the peak), kills whatever the
task left running in it (as a container's end does) and removes the groups.
"""

from __future__ import annotations

import contextlib
import errno
import hashlib
import os
import signal
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path

import structlog

from libs.protocol.capacity import read_machine, reserve_for, tasks_memory_mb, tasks_pids
from services.orchestrator.core.limits import LimitDefaults, TaskLimits

log = structlog.get_logger(__name__)

CGROUP_ROOT = Path("/sys/fs/cgroup")
V1_CONTROLLERS = ("memory", "cpu", "pids", "devices")
V2_CONTROLLERS = ("memory", "cpu", "pids")


class ConfinementError(Exception):
    """A task's limits could not be put in place: the task must not run (a platform failure, retried)."""


@dataclass(frozen=True)
class MemoryOutcome:
    """What a task's memory group saw over its life."""

    oom_kills: int
    peak_bytes: int
    limit_bytes: int
    limit_hits: int = 0
    """Times the group's usage met its limit, its children's included (a container nested under
    it is OOM-killed in a group of its own, whose count goes with it: this one stays)."""


@dataclass(frozen=True)
class Confinement:
    """What this machine enforces for local tasks, and by what; what it does not, and why."""

    mechanism: str  # "cgroup v1", "cgroup v2", "rlimits" or "none"
    enforced: dict[str, str] = field(default_factory=dict)
    missing: dict[str, str] = field(default_factory=dict)
    bases: dict[str, Path] = field(default_factory=dict)  # controller -> the platform's group
    budget: TasksBudget | None = None  # what all tasks together are held to

    def describe(self) -> str:
        held = ", ".join(f"{what} ({how})" for what, how in self.enforced.items()) or "nothing"
        line = f"task limits: {held}"
        if self.budget is not None:
            line += f"; {self.budget.describe()}"
        if self.missing:
            line += "; not enforced: " + "; ".join(f"{what} ({why})" for what, why in self.missing.items())
        return line


def platform_scope(data_dir: Path) -> str:
    """The platform's name among cgroups: two platforms on one machine never share a group."""
    return "pai-" + hashlib.sha256(str(data_dir.resolve()).encode()).hexdigest()[:12]


def _own_groups(text: str) -> dict[str, str]:
    """/proc/self/cgroup as controller -> path ("" for the unified hierarchy)."""
    groups: dict[str, str] = {}
    for line in text.splitlines():
        parts = line.split(":", 2)
        if len(parts) != 3:
            continue
        _, controllers, path = parts
        for name in controllers.split(",") if controllers else [""]:
            groups[name] = path
    return groups


def _make(directory: Path) -> None:
    try:
        directory.mkdir(mode=0o755, parents=True, exist_ok=True)
    except OSError as exc:
        raise ConfinementError(f"cannot create the cgroup {directory}: {exc.strerror}") from exc


@dataclass(frozen=True)
class TasksBudget:
    """What all of a platform's tasks together may hold (libs/protocol/capacity.py)."""

    memory_bytes: int
    pids: int

    def describe(self) -> str:
        return f"all tasks together: {self.memory_bytes // 2**20:,} MB memory, {self.pids:,} processes"


def tasks_budget(reserve_memory_mb: int | None = None, reserve_pids: int | None = None) -> TasksBudget:
    """This machine's, less the platform's reserve (the admin's figures where given)."""
    machine = read_machine()
    reserve = reserve_for(machine, memory_mb=reserve_memory_mb, pids=reserve_pids)
    return TasksBudget(tasks_memory_mb(machine, reserve) * 2**20, tasks_pids(machine, reserve))


def detect(
    data_dir: Path,
    *,
    root: Path = CGROUP_ROOT,
    self_cgroup: str | None = None,
    euid: int | None = None,
    budget: TasksBudget | None = None,
) -> Confinement:
    """What can be enforced here, trying to make the platform's groups (root only), all tasks
    held together to ``budget`` (the machine less the platform's reserve, by default)."""
    found = _detect(data_dir, root=root, self_cgroup=self_cgroup, euid=euid)
    if not found.bases:
        return found
    budget = budget or tasks_budget()
    try:
        _limit_all(found.bases, budget)
    except ConfinementError as exc:
        return Confinement(
            found.mechanism, found.enforced, {**found.missing, "all tasks together": str(exc)}, found.bases
        )
    return Confinement(found.mechanism, found.enforced, found.missing, found.bases, budget)


def _limit_all(bases: dict[str, Path], budget: TasksBudget) -> None:
    """The platform's own groups, parents of every task's: the budget, whatever tasks ask."""
    for controller, base in bases.items():
        if controller == "unified":
            _write(base, "memory.max", budget.memory_bytes)
            _write(base, "pids.max", budget.pids)
        elif controller == "memory":
            _write(base, "memory.limit_in_bytes", budget.memory_bytes)
            if (base / "memory.memsw.limit_in_bytes").exists():
                _write(base, "memory.memsw.limit_in_bytes", budget.memory_bytes)
        elif controller == "pids":
            _write(base, "pids.max", budget.pids)


def _detect(
    data_dir: Path, *, root: Path = CGROUP_ROOT, self_cgroup: str | None = None, euid: int | None = None
) -> Confinement:
    scope = platform_scope(data_dir)
    if self_cgroup is None:
        try:
            self_cgroup = Path("/proc/self/cgroup").read_text()
        except OSError:
            self_cgroup = ""
    own = _own_groups(self_cgroup)
    rlimits = Confinement(
        "rlimits",
        {"memory": "RLIMIT_DATA, per process"},
        {},
    )
    if (os.geteuid() if euid is None else euid) != 0:
        why = "the platform is not root: no cgroups"
        return Confinement(
            rlimits.mechanism, rlimits.enforced, {"cpu": why, "pids": why, "gpu devices": why, "disk": _DISK}
        )
    unified = root / "cgroup.controllers"
    if unified.exists() and not (root / "memory").is_dir():
        return _detect_v2(root, scope, rlimits)
    bases: dict[str, Path] = {}
    missing: dict[str, str] = {}
    for controller in V1_CONTROLLERS:
        mount = root / controller
        if not (mount / "cgroup.procs").exists():
            missing[controller] = f"no {controller} cgroup controller is mounted"
            continue
        base = mount / own.get(controller, "/").lstrip("/") / scope
        try:
            _make(base)
        except ConfinementError as exc:
            missing[controller] = str(exc)
            continue
        bases[controller] = base
    if not bases:
        return Confinement(rlimits.mechanism, rlimits.enforced, {**missing, "disk": _DISK})
    names = {"memory": "memory", "cpu": "cpu", "pids": "pids", "devices": "gpu devices"}
    enforced = {names[c]: "cgroup v1" for c in bases}
    missing = {names[c]: why for c, why in missing.items()}
    missing["disk"] = _DISK
    return Confinement("cgroup v1", enforced, missing, bases)


_DISK = "a task's work dir has no size cap (its logs are rotated); see docs/architecture.md"


def _detect_v2(root: Path, scope: str, rlimits: Confinement) -> Confinement:
    available = set((root / "cgroup.subtree_control").read_text().split())
    usable = [c for c in V2_CONTROLLERS if c in available]
    if not usable:
        why = "cgroup v2 without memory, cpu or pids delegated at its root"
        return Confinement(rlimits.mechanism, rlimits.enforced, {"cpu": why, "pids": why, "disk": _DISK})
    base = root / scope
    try:
        _make(base)
        (base / "cgroup.subtree_control").write_text(" ".join(f"+{c}" for c in usable))
    except OSError as exc:
        why = f"cannot create the cgroup {base}: {exc}"
        return Confinement(rlimits.mechanism, rlimits.enforced, {"cpu": why, "pids": why, "disk": _DISK})
    enforced = dict.fromkeys(usable, "cgroup v2")
    missing = {c: "not delegated at the cgroup v2 root" for c in V2_CONTROLLERS if c not in available}
    missing["gpu devices"] = "cgroup v2 has no devices file (it needs eBPF): CUDA_VISIBLE_DEVICES only"
    missing["disk"] = _DISK
    return Confinement("cgroup v2", enforced, missing, {"unified": base})


def _write(directory: Path, name: str, value: str | int) -> None:
    path = directory / name
    try:
        path.write_text(str(value))
    except OSError as exc:
        raise ConfinementError(f"cannot set {path} to {value}: {exc.strerror or exc}") from exc


class TaskGroups:
    """The cgroups of task attempts, by a name unique on this platform."""

    def __init__(self, confinement: Confinement, defaults: LimitDefaults | None = None) -> None:
        self.confinement = confinement
        self.defaults = defaults or LimitDefaults()

    @property
    def uses_cgroups(self) -> bool:
        return bool(self.confinement.bases)

    def create(self, name: str, limits: TaskLimits) -> list[Path]:
        """Make the task's groups with its limits; the directories its runtime joins."""
        made: list[Path] = []
        try:
            for controller, base in self.confinement.bases.items():
                directory = base / name
                _make(directory)
                made.append(directory)
                self._limit(controller, directory, limits)
        except ConfinementError:
            self.remove(made)
            raise
        return made

    def _limit(self, controller: str, directory: Path, limits: TaskLimits) -> None:
        if controller == "unified":
            _write(directory, "memory.max", limits.memory_bytes)
            with contextlib.suppress(ConfinementError):  # no swap accounting: nothing to cap
                _write(directory, "memory.swap.max", 0)
            _write(directory, "cpu.max", f"{limits.cpu_quota_us} {limits.cpu_period_us}")
            _write(directory, "pids.max", limits.pids)
        elif controller == "memory":
            _write(directory, "memory.limit_in_bytes", limits.memory_bytes)
            if (directory / "memory.memsw.limit_in_bytes").exists():
                # Memory and swap together: a task cannot go past its memory by swapping.
                _write(directory, "memory.memsw.limit_in_bytes", limits.memory_bytes)
        elif controller == "cpu":
            _write(directory, "cpu.cfs_period_us", limits.cpu_period_us)
            _write(directory, "cpu.cfs_quota_us", limits.cpu_quota_us)
            _write(directory, "cpu.shares", limits.cpu_shares)
        elif controller == "pids":
            _write(directory, "pids.max", limits.pids)
        elif controller == "devices":
            _write(directory, "devices.deny", limits.device_rules[0])
            for rule in limits.device_rules[1:]:
                _write(directory, "devices.allow", rule)

    def memory(self, groups: Iterable[Path]) -> MemoryOutcome | None:
        """What the task's memory group saw; None if it has none (or it is gone)."""
        for directory in groups:
            try:
                if (directory / "memory.oom_control").exists():  # v1
                    control = _fields((directory / "memory.oom_control").read_text())
                    return MemoryOutcome(
                        control.get("oom_kill", 0),
                        int((directory / "memory.max_usage_in_bytes").read_text()),
                        int((directory / "memory.limit_in_bytes").read_text()),
                        int((directory / "memory.failcnt").read_text()),
                    )
                if (directory / "memory.events").exists():  # v2
                    events = _fields((directory / "memory.events").read_text())
                    peak = directory / "memory.peak"
                    limit = (directory / "memory.max").read_text().strip()
                    return MemoryOutcome(
                        events.get("oom_kill", 0),
                        int(peak.read_text()) if peak.exists() else 0,
                        int(limit) if limit.isdigit() else 0,
                        events.get("max", 0),
                    )
            except (OSError, ValueError):
                continue
        return None

    def remove(self, groups: Iterable[Path]) -> list[Path]:
        """Kill what is left in the groups and remove them; those still busy, to try again later."""
        busy: list[Path] = []
        for directory in groups:
            with contextlib.suppress(OSError, ValueError):
                for pid in (directory / "cgroup.procs").read_text().split():
                    with contextlib.suppress(ProcessLookupError):
                        os.kill(int(pid), signal.SIGKILL)
            try:
                directory.rmdir()
            except FileNotFoundError:
                pass
            except OSError as exc:
                if exc.errno == errno.EBUSY:
                    busy.append(directory)
                else:
                    log.warning("cannot remove a task's cgroup", cgroup=str(directory), error=str(exc))
        return busy


def _fields(text: str) -> dict[str, int]:
    """``name value`` lines (memory.oom_control, memory.events) as numbers."""
    values: dict[str, int] = {}
    for line in text.splitlines():
        parts = line.split()
        if len(parts) == 2 and parts[1].lstrip("-").isdigit():
            values[parts[0]] = int(parts[1])
    return values
