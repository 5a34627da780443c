"""Change VCs, cells and per-user limits at run time, refusing changes that hurt running jobs.

The check is the operation HiveD performs on restart: build a policy from the new config, give
it the nodes, and re-add every running job's allocation. A job whose devices are no longer in
any cell would be killed; a job that no longer fits its VC's cells keeps running without its
guarantee (downgraded). Either outcome refuses the change unless the admin forces it, and the
answer names each job and why, so the admin can decide with facts rather than hope.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from services.scheduler.core.hived import HivedConfigError, HivedPolicy, HivedUserError
from services.scheduler.core.placements import JobDemand, NodeInventory, Placed
from services.scheduler.core.user_limits import (
    UserLimitedPolicy,
    UserLimitsError,
    VcUserLimit,
    parse_user_limits,
    user_limits_document,
)


class ReconfigurationError(ValueError):
    """The submitted document cannot be used; the text names the field and the fix."""


@dataclass(frozen=True)
class SchedulerConfig:
    """What the scheduler runs on: HiveD's config (None: derived from nodes) and user limits."""

    hived: dict[str, Any] | None = None
    user_limits: dict[str, VcUserLimit] = field(default_factory=dict)

    def document(self) -> dict[str, Any]:
        """The stored form (KV): the HiveD config with our `userLimits` extension beside it."""
        return {"hived": self.hived, "userLimits": user_limits_document(self.user_limits)}


def config_from_document(doc: Any) -> SchedulerConfig:
    """The stored form back into a config; errors name the field."""
    if not isinstance(doc, dict):
        raise ReconfigurationError("stored scheduler config: expected a mapping with hived and userLimits")
    hived = doc.get("hived")
    try:
        limits = parse_user_limits(doc.get("userLimits"))
    except UserLimitsError as err:
        raise ReconfigurationError(str(err)) from None
    return SchedulerConfig(hived if isinstance(hived, dict) else None, limits)


def merge_document(
    doc: Any, current: SchedulerConfig, current_hived: dict[str, Any] | None
) -> SchedulerConfig:
    """An admin's document (whole HiveD config, or its virtualClusters part, and/or userLimits).

    `current_hived` is the config in force (possibly derived from nodes): a partial document
    keeps its physical cells, and a document without `userLimits` keeps the current limits.
    """
    if not isinstance(doc, dict) or not doc:
        raise ReconfigurationError(
            "the document must be a mapping with virtualClusters (and physicalCluster for new cells), "
            "userLimits, or both"
        )
    if isinstance(doc.get("config"), dict) and "physicalCluster" in doc["config"]:
        # The hivedscheduler deployment layout keeps the cells under "config".
        doc = {**doc["config"], **({"userLimits": doc["userLimits"]} if "userLimits" in doc else {})}
    known = {"physicalCluster", "virtualClusters", "userLimits"}
    unknown = sorted(set(doc) - known)
    if unknown:
        raise ReconfigurationError(
            f"unknown top-level field(s) {unknown}; use physicalCluster, virtualClusters and userLimits"
        )
    base = current_hived or {}
    physical = doc.get("physicalCluster", base.get("physicalCluster"))
    vcs = doc.get("virtualClusters", base.get("virtualClusters"))
    if physical is None:
        raise ReconfigurationError(
            "physicalCluster: the cluster has no cells yet (no GPU node reported); "
            "send the whole HiveD config with physicalCluster"
        )
    if not isinstance(vcs, dict) or not vcs:
        raise ReconfigurationError("virtualClusters: must map at least one VC name to its virtualCells")
    try:
        limits = parse_user_limits(doc["userLimits"]) if "userLimits" in doc else current.user_limits
    except UserLimitsError as err:
        raise ReconfigurationError(str(err)) from None
    strangers = sorted(set(limits) - set(vcs))
    if strangers:
        raise ReconfigurationError(
            f"userLimits: VC(s) {strangers} are not in virtualClusters; remove them or add the VCs"
        )
    if set(doc) == {"userLimits"}:
        # Limits alone leave the cells as they are, even when they are derived from the nodes:
        # freezing a derived config here would keep nodes that join later out of every VC.
        return SchedulerConfig(current.hived, limits)
    return SchedulerConfig({"physicalCluster": physical, "virtualClusters": vcs}, limits)


def build_policy(config: SchedulerConfig, nodes: list[NodeInventory]) -> UserLimitedPolicy:
    """A fresh policy for `config` that knows `nodes`; config mistakes raise ReconfigurationError."""
    try:
        hived = HivedPolicy(config.hived)
    except HivedConfigError as err:
        raise ReconfigurationError(str(err)) from None
    policy = UserLimitedPolicy(hived, config.user_limits)
    policy.set_nodes(nodes)
    return policy


@dataclass(frozen=True)
class Impact:
    """What a new config would do to running jobs: job id -> a reason an admin can act on."""

    killed: dict[str, str]
    downgraded: dict[str, str]
    vcs: dict[str, str]  # job id -> its VC

    @property
    def safe(self) -> bool:
        return not self.killed and not self.downgraded

    def summary(self) -> str:
        parts = [f"{job} in VC {self.vcs[job]} would be killed: {why}" for job, why in self.killed.items()]
        parts += [f"{job} in VC {self.vcs[job]} would be {why}" for job, why in self.downgraded.items()]
        return "; ".join(parts)


def _lost_devices(hived: HivedPolicy, demand: JobDemand, placed: Placed) -> list[str]:
    algo = hived.algorithm
    gpu_tasks = {(t.role, t.index) for t in demand.tasks if t.gpu > 0}
    lost: list[str] = []
    for p in placed.tasks:
        if (p.role, p.index) not in gpu_tasks:
            continue
        leaves = algo.node_leaves.get(p.node, []) if algo is not None else []
        for index in p.gpu_indices:
            if not any(index in leaf.leaf_indices for leaf in leaves):
                lost.append(f"{p.node}/GPU{index}")
    return lost


def readd_running(
    policy: UserLimitedPolicy,
    running: list[tuple[JobDemand, Placed]],
    demoted_before: dict[str, str],
) -> Impact:
    """Re-add every running job into `policy` (as HiveD does on restart) and report the harm."""
    hived = policy.inner
    assert isinstance(hived, HivedPolicy)
    killed: dict[str, str] = {}
    vcs = {demand.job_id: demand.virtual_cluster for demand, _ in running}
    for demand, placed in running:
        lost = _lost_devices(hived, demand, placed)
        if lost:
            killed[demand.job_id] = f"its devices {', '.join(lost)} are in no cell of the new config"
            continue
        try:
            policy.restore(demand, placed)
        except (HivedUserError, KeyError, IndexError, ValueError) as err:
            killed[demand.job_id] = f"its allocation cannot be re-added ({err})"
    downgraded = {
        job: reason.replace("running without", "left running without")
        for job, reason in hived.demoted_jobs().items()
        if job not in demoted_before and job not in killed
    }
    return Impact(killed, downgraded, vcs)
