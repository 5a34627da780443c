"""Change VCs, cells and per-user limits at run time, refusing changes that hurt running jobs.

The check is the operation HiveD performs on restart: build a policy from the new config, give
it the nodes, and re-add every running job's allocation. A job whose devices are no longer in
any cell would be killed; a job that no longer fits its VC's cells keeps running without its
guarantee (downgraded). Either outcome refuses the change unless the admin forces it, and the
answer names each job and why, so the admin can decide with facts rather than hope.

Where the cells are derived from the nodes (no HiveD config given), a VC change keeps them so:
the VCs are stored as GPUs per leaf type (`vcs`) and carved from the cells of whatever nodes
report (hived/carving.py), so a node change (GPUs added at the next `pai up`) keeps the VCs
and puts the new cells in the default VC. Freezing the cells of the moment instead kept a
config made on a start without GPUs in force at the next start with GPUs, every VC at 0 GPUs.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from services.scheduler.core.hived import DEFAULT_VC, HivedConfigError, HivedPolicy, HivedUserError
from services.scheduler.core.hived.carving import by_type, chains_of, type_totals, vc_devices
from services.scheduler.core.placements import JobDemand, NodeInventory, Placed
from services.scheduler.core.user_limits import (
    UserLimitedPolicy,
    UserLimitsError,
    VcUserLimit,
    parse_user_limits,
    user_limits_document,
)
from services.scheduler.core.vc_quotas import (
    QuotaError,
    VcQuota,
    parse_quotas,
    quota_of,
    quotas_document,
)


class ReconfigurationError(ValueError):
    """The submitted document cannot be used; the text names the field and the fix."""


@dataclass(frozen=True)
class SchedulerConfig:
    """What the scheduler runs on: HiveD's config (None: cells derived from the nodes), user
    limits, and CPU and memory quotas; without a HiveD config, the VCs an admin set as GPUs per
    leaf type (None: one default VC holds every cell) and the GPUs per type the nodes had then."""

    hived: dict[str, Any] | None = None
    user_limits: dict[str, VcUserLimit] = field(default_factory=dict)
    vcs: dict[str, dict[str, int]] | None = None
    declared: dict[str, int] | None = None
    quotas: dict[str, VcQuota] = field(default_factory=dict)

    def document(self) -> dict[str, Any]:
        """The stored form (KV): the HiveD config with our extensions beside it."""
        doc: dict[str, Any] = {"hived": self.hived, "userLimits": user_limits_document(self.user_limits)}
        if self.vcs is not None:
            doc["vcs"] = {vc: dict(gpus) for vc, gpus in sorted(self.vcs.items())}
            doc["declaredGpus"] = dict(self.declared or {})
        if self.quotas:
            doc["quotas"] = quotas_document(self.quotas)
        return doc

    @property
    def vc_names(self) -> list[str] | None:
        """The VCs when the config names them (None: derived, the one default VC)."""
        if self.hived is not None:
            return [str(vc) for vc in self.hived.get("virtualClusters") or {}]
        if self.vcs is not None:
            return [DEFAULT_VC, *sorted(vc for vc in self.vcs if vc != DEFAULT_VC)]
        return None


def _counts(doc: Any) -> dict[str, dict[str, int]]:
    if not isinstance(doc, dict):
        return {}
    return {
        str(vc): {str(t): int(n) for t, n in gpus.items() if isinstance(n, int) and not isinstance(n, bool)}
        for vc, gpus in doc.items()
        if isinstance(gpus, dict)
    }


def config_from_document(doc: Any) -> SchedulerConfig:
    """The stored form back into a config; errors name the field."""
    if not isinstance(doc, dict):
        raise ReconfigurationError("stored scheduler config: expected a mapping with hived and userLimits")
    hived = doc.get("hived")
    try:
        limits = parse_user_limits(doc.get("userLimits"))
        quotas = parse_quotas(doc.get("quotas"))
    except (UserLimitsError, QuotaError) as err:
        raise ReconfigurationError(str(err)) from None
    hived = hived if isinstance(hived, dict) else None
    vcs = _counts(doc["vcs"]) if isinstance(doc.get("vcs"), dict) else None
    declared = doc.get("declaredGpus")
    declared = {str(t): int(n) for t, n in declared.items()} if isinstance(declared, dict) else None
    physical = (hived or {}).get("physicalCluster")
    if hived is not None and isinstance(physical, dict) and not physical.get("physicalCells"):
        # Stored by an older version on a start without GPUs: cells of no node at all, which
        # would keep every GPU of a later start out of every VC. Its VCs are kept, over cells
        # derived from the nodes; the GPUs the nodes have now go to the default VC.
        vcs = {str(vc): {} for vc in hived.get("virtualClusters") or {} if str(vc) != DEFAULT_VC}
        hived, declared = None, {}
    return SchedulerConfig(hived, limits, vcs, declared if vcs is not None else None, quotas)


def _split_quotas(vcs: dict[str, Any]) -> tuple[dict[str, Any], dict[str, VcQuota]]:
    """virtualClusters with each VC's `cpu` and `memoryMB` taken out as its quota."""
    cells: dict[str, Any] = {}
    quotas: dict[str, VcQuota] = {}
    for vc, entry in vcs.items():
        if entry is None:
            entry = {}
        if not isinstance(entry, dict):
            raise ReconfigurationError(f"virtualClusters.{vc}: must be a mapping with virtualCells")
        unknown = sorted(set(entry) - {"virtualCells", "pinnedCells", "cpu", "memoryMB"})
        if unknown:
            raise ReconfigurationError(
                f"virtualClusters.{vc}: unknown field(s) {unknown}; use virtualCells, pinnedCells, "
                "cpu and memoryMB"
            )
        try:
            quota = quota_of(str(vc), entry)
        except QuotaError as err:
            raise ReconfigurationError(str(err)) from None
        if quota is not None:
            quotas[str(vc)] = quota
        cells[str(vc)] = {k: v for k, v in entry.items() if k not in ("cpu", "memoryMB")}
    return cells, quotas


def derived_vcs(
    vcs: dict[str, Any], shape: dict[str, Any] | None
) -> tuple[dict[str, dict[str, int]], dict[str, int]]:
    """virtualClusters over cells derived from the nodes as GPUs per leaf type, and the GPUs per
    type the nodes have now."""
    chains = chains_of(shape)
    held = vc_devices({"virtualClusters": vcs}, chains)
    out: dict[str, dict[str, int]] = {}
    for vc, entry in vcs.items():
        if (entry or {}).get("pinnedCells"):
            raise ReconfigurationError(
                f"virtualClusters.{vc}.pinnedCells: cells derived from the nodes have no pinned cells; "
                "send physicalCluster with pinnedCellId to pin cells"
            )
        for j, cell in enumerate((entry or {}).get("virtualCells") or []):
            name = str(cell.get("cellType", ""))
            chain = chains.get(name.split(".")[0])
            if chain is None or chain.size_of(name) is None:
                known = ", ".join(sorted(c.cell_name(t) for c in chains.values() for t, _ in c.levels))
                raise ReconfigurationError(
                    f"virtualClusters.{vc}.virtualCells[{j}].cellType: {name!r} is not a cell type of the "
                    f"cells derived from the nodes (they are: {known or 'none, no node has a GPU'})"
                )
        if str(vc) != DEFAULT_VC:
            out[str(vc)] = by_type(held.get(str(vc), {}), chains)
    return out, type_totals(chains)


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
    quotas = current.quotas
    if "virtualClusters" in doc and isinstance(vcs, dict):
        vcs, quotas = _split_quotas(vcs)
    # Cells derived from the nodes stay derived unless the document brings other cells.
    derived = current.hived is None and (
        "physicalCluster" not in doc or doc["physicalCluster"] == base.get("physicalCluster")
    )
    if physical is None and not derived:
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
    strangers = sorted(set(quotas) - set(vcs) - ({DEFAULT_VC} if derived else set()))
    if strangers:
        raise ReconfigurationError(f"quotas: VC(s) {strangers} are not in virtualClusters")
    if set(doc) == {"userLimits"}:
        # Limits alone leave the cells as they are, even when they are derived from the nodes:
        # freezing a derived config here would keep nodes that join later out of every VC.
        return SchedulerConfig(current.hived, limits, current.vcs, current.declared, current.quotas)
    if derived:
        gpus, declared = derived_vcs(vcs, current_hived)
        return SchedulerConfig(None, limits, gpus, declared, quotas)
    return SchedulerConfig({"physicalCluster": physical, "virtualClusters": vcs}, limits, quotas=quotas)


def build_policy(config: SchedulerConfig, nodes: list[NodeInventory]) -> UserLimitedPolicy:
    """A fresh policy for `config` that knows `nodes`; config mistakes raise ReconfigurationError."""
    try:
        hived = HivedPolicy(config.hived, vcs=config.vcs, declared=config.declared)
        policy = UserLimitedPolicy(hived, config.user_limits, config.quotas)
        policy.set_nodes(nodes)
    except HivedConfigError as err:
        raise ReconfigurationError(str(err)) from None
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
