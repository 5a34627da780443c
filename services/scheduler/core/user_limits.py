"""Per-user GPU limits inside a VC, as a wrapper around any placement policy.

HiveD guarantees a VC's share against other VCs but lets one user of a VC take all of it;
OpenPAI users asked for a cap per user. The cap is checked before the inner policy is asked,
so a job over its user's limit waits (with the limit named) without reserving or preempting
anything, and the inner policy never learns about users at all. VCs' CPU and memory quotas for
tasks without GPUs (vc_quotas.py) are held here the same way, before the inner policy is asked.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field, replace
from typing import Any

from libs.protocol.vc_fit import VcRoom
from libs.protocol.wording import counted
from services.scheduler.core.placements import (
    Decision,
    JobDemand,
    NodeInventory,
    Placed,
    PlacementPolicy,
    VirtualClusterStatus,
    Waiting,
)
from services.scheduler.core.vc_quotas import SHARED, VcQuota, bounds


class UserLimitsError(ValueError):
    """The `userLimits` section cannot be used as written; the text names the field."""


@dataclass(frozen=True)
class VcUserLimit:
    """GPUs one user may hold at once in a VC; `users` overrides the default per user name."""

    max_gpus_per_user: int | None = None
    users: dict[str, int] = field(default_factory=dict)

    def limit_for(self, user: str) -> int | None:
        return self.users.get(user, self.max_gpus_per_user)


def _count(value: Any, where: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise UserLimitsError(f"{where}: must be a whole number of GPUs (0 or more), got {value!r}")
    return value


def parse_user_limits(doc: Any) -> dict[str, VcUserLimit]:
    """`{vc: {maxGpusPerUser: N, users: {name: N}}}` into limits; errors name the field."""
    if doc is None:
        return {}
    if not isinstance(doc, dict):
        raise UserLimitsError("userLimits: must map VC names to {maxGpusPerUser: N, users: {name: N}}")
    out: dict[str, VcUserLimit] = {}
    for vc, raw in doc.items():
        where = f"userLimits.{vc}"
        if not isinstance(raw, dict):
            raise UserLimitsError(f"{where}: must be a mapping like {{maxGpusPerUser: 4}}")
        unknown = set(raw) - {"maxGpusPerUser", "users"}
        if unknown:
            raise UserLimitsError(f"{where}: unknown field(s) {sorted(unknown)}; use maxGpusPerUser or users")
        default = raw.get("maxGpusPerUser")
        users = raw.get("users") or {}
        if not isinstance(users, dict):
            raise UserLimitsError(f"{where}.users: must map user names to GPU counts")
        out[str(vc)] = VcUserLimit(
            None if default is None else _count(default, f"{where}.maxGpusPerUser"),
            {str(u): _count(n, f"{where}.users.{u}") for u, n in users.items()},
        )
    return out


def user_limits_document(limits: dict[str, VcUserLimit]) -> dict[str, Any]:
    """The inverse of `parse_user_limits`, for status replies and the stored config."""
    out: dict[str, Any] = {}
    for vc, limit in limits.items():
        entry: dict[str, Any] = {}
        if limit.max_gpus_per_user is not None:
            entry["maxGpusPerUser"] = limit.max_gpus_per_user
        if limit.users:
            entry["users"] = dict(limit.users)
        out[vc] = entry
    return out


def _free_use(demand: JobDemand) -> tuple[int, int]:
    """CPU and memory of a job's tasks without GPUs, which VC quotas bound."""
    free = [t for t in demand.tasks if t.gpu == 0]
    return sum(t.cpu for t in free), sum(t.memory_mb for t in free)


def _gpus(demand: JobDemand) -> int:
    """Whole GPUs, plus the job's shares of GPUs rounded up to whole ones (four halves count 2)."""
    shared = sum(t.gpu_milli for t in demand.tasks if t.shares_a_gpu)
    return sum(t.gpu for t in demand.tasks if not t.shares_a_gpu) + -(-shared // 1000)


class UserLimitedPolicy:
    """A `PlacementPolicy` that holds back jobs over their user's GPU limit in their VC."""

    def __init__(
        self,
        inner: PlacementPolicy,
        limits: dict[str, VcUserLimit] | None = None,
        quotas: dict[str, VcQuota] | None = None,
    ) -> None:
        self.inner = inner
        self.limits = dict(limits or {})
        self.quotas = dict(quotas or {})
        self._held: dict[str, tuple[str, str, int]] = {}  # job -> (vc, user, GPUs)
        # job -> (VC, or SHARED for VCs without a quota; CPU and memory of its tasks without GPUs)
        self._held_free: dict[str, tuple[str, int, int]] = {}
        self._free_sums: dict[str, tuple[int, int]] = {}  # group -> CPU and memory held
        self._nodes_cpu = 0
        self._nodes_memory = 0

    def quota_bounds(self) -> tuple[dict[str, VcQuota], VcQuota]:
        """Each VC's quota, and what the VCs without one share (nothing in force: both empty)."""
        return bounds(self.quotas, self._nodes_cpu, self._nodes_memory)

    def quota_of(self, vc: str) -> tuple[VcQuota, bool] | None:
        """The CPU and memory bound of a VC's tasks without GPUs, and whether it is shared; None
        when no VC has a quota."""
        if not self.quotas:
            return None
        own, shared = self.quota_bounds()
        return (own[vc], False) if vc in own else (shared, True)

    def _group(self, vc: str) -> str:
        return vc if vc in self.quotas else SHARED

    def _quota_wait(self, demand: JobDemand) -> Waiting | None:
        cpu, memory = _free_use(demand)
        if not self.quotas or not (cpu or memory):
            return None
        vc = demand.virtual_cluster
        bound, shared = self.quota_of(vc) or (VcQuota(0, 0), False)
        used_cpu, used_memory = self._free_sums.get(self._group(vc), (0, 0))
        if used_cpu + cpu <= bound.cpu and used_memory + memory <= bound.memory_mb:
            return None
        whose = (
            "the VCs without a quota share what the quotas leave of the nodes"
            if shared
            else f"VC {vc} has a quota of {counted(bound.cpu, 'CPU')} and {bound.memory_mb} MB memory"
        )
        return Waiting(
            demand.job_id,
            f"{whose} ({bound.cpu} CPU, {bound.memory_mb} MB) for tasks without GPUs; their running "
            f"jobs hold {used_cpu} CPU and {used_memory} MB and this job needs {cpu} CPU and {memory} MB; "
            "it starts when enough of them finish",
        )

    def used_by(self, vc: str, user: str) -> int:
        return sum(n for v, u, n in self._held.values() if v == vc and u == user)

    def usage(self) -> dict[str, dict[str, int]]:
        """GPUs held per VC and user, for the status reply."""
        out: dict[str, dict[str, int]] = {}
        for vc, user, gpus in self._held.values():
            out.setdefault(vc, {})
            out[vc][user] = out[vc].get(user, 0) + gpus
        return out

    def set_nodes(self, nodes: list[NodeInventory]) -> None:
        healthy = [n for n in nodes if n.healthy]
        self._nodes_cpu = sum(n.cpu for n in healthy)
        self._nodes_memory = sum(n.memory_mb for n in healthy)
        self.inner.set_nodes(nodes)

    def decide(self, demand: JobDemand) -> Decision:
        if demand.job_id not in self._held:
            limit = self.limits.get(demand.virtual_cluster)
            cap = limit.limit_for(demand.user) if limit is not None else None
            needed = _gpus(demand)
            if cap is not None and needed > 0:
                used = self.used_by(demand.virtual_cluster, demand.user)
                if used + needed > cap:
                    vc = demand.virtual_cluster
                    field_name = (
                        f"userLimits.{vc}.users.{demand.user}"
                        if limit is not None and demand.user in limit.users
                        else f"userLimits.{vc}.maxGpusPerUser"
                    )
                    return Waiting(
                        demand.job_id,
                        f"user {demand.user} may use at most {counted(cap, 'GPU')} at once in VC {vc} "
                        f"({field_name}); {used} are in use by their running jobs and this job "
                        f"needs {needed}; it starts when enough of them finish",
                    )
            waiting = self._quota_wait(demand)
            if waiting is not None:
                return waiting
        decision = self.inner.decide(demand)
        if isinstance(decision, Placed):
            self._hold(demand)
        return decision

    def _hold(self, demand: JobDemand) -> None:
        self._held[demand.job_id] = (demand.virtual_cluster, demand.user, _gpus(demand))
        cpu, memory = _free_use(demand)
        if (cpu or memory) and demand.job_id not in self._held_free:
            group = self._group(demand.virtual_cluster)
            self._held_free[demand.job_id] = (group, cpu, memory)
            held_cpu, held_memory = self._free_sums.get(group, (0, 0))
            self._free_sums[group] = (held_cpu + cpu, held_memory + memory)

    def restore(self, demand: JobDemand, placement: Placed) -> None:
        self.inner.restore(demand, placement)
        self._hold(demand)

    def release(self, job_id: str) -> None:
        self._held.pop(job_id, None)
        free = self._held_free.pop(job_id, None)
        if free is not None:
            group, cpu, memory = free
            held_cpu, held_memory = self._free_sums[group]
            self._free_sums[group] = (held_cpu - cpu, held_memory - memory)
        self.inner.release(job_id)

    def virtual_clusters(self) -> list[VirtualClusterStatus]:
        return self.inner.virtual_clusters()

    def vc_rooms(self) -> dict[str, VcRoom]:
        """The inner policy's, with each VC's CPU and memory quota where quotas are in force."""
        rooms: Callable[[], dict[str, VcRoom]] | None = getattr(self.inner, "vc_rooms", None)
        out = rooms() if rooms is not None else {}
        if not self.quotas:
            return out
        with_quotas: dict[str, VcRoom] = {}
        for vc, room in out.items():
            bound, _ = self.quota_of(vc) or (VcQuota(0, 0), False)
            with_quotas[vc] = replace(room, quota_cpu=bound.cpu, quota_memory_mb=bound.memory_mb)
        return with_quotas
