"""HiveD behind the service's `PlacementPolicy`: whole jobs in, whole placements out.

The service thinks in jobs and tasks; HiveD thinks in pods of affinity groups. Here each job's
GPU tasks are grouped by affinity group (and device type) into gangs, each gang is scheduled
pod by pod as HiveD expects, and the job is placed only if every gang binds. Tasks that ask for
no GPU still need CPU and memory, so they are fitted onto nodes by those alone (the local
development machine has no GPUs at all). Tasks that share a GPU go onto leaf cells HiveD holds
whole for their VC (`shares.py`): all of a job's tasks, shared or not, are placed at once or
none is. Without a HiveD config, one "default" VC covers every GPU node, with a hierarchy derived
from the node list; VCs an admin set over such cells (GPUs per leaf type) are carved out of it
anew at each node change (carving.py), the default VC holding the rest, and `notes` says what
changed since they were set.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from libs.protocol.vc_fit import VcRoom
from libs.protocol.wording import counted
from services.scheduler.core.gpu_share import ShareDemand
from services.scheduler.core.hived.algorithm import PREEMPTING_PHASE, HivedAlgorithm
from services.scheduler.core.hived.carving import split_by_type
from services.scheduler.core.hived.config import parse_config
from services.scheduler.core.hived.defaults import config_from_nodes
from services.scheduler.core.hived.groups import BindInfo, HivedUserError, PodPlacementInfo, PodSpec
from services.scheduler.core.hived.priorities import FREE_PRIORITY, MIN_GUARANTEED_PRIORITY
from services.scheduler.core.hived.shares import NodeRoom, PoolKey, ShareHost, ShareHosts, TenantKey
from services.scheduler.core.placements import (
    Decision,
    JobDemand,
    NodeInventory,
    Placed,
    Preempting,
    Rejected,
    TaskDemand,
    TaskPlacement,
    VirtualClusterStatus,
    Waiting,
)


@dataclass
class _Job:
    pods: list[tuple[PodSpec, BindInfo]] = field(default_factory=list)
    pending: list[PodSpec] = field(default_factory=list)
    usage: dict[str, tuple[int, int]] = field(default_factory=dict)  # node -> (cpu, memory_mb)
    placed: Placed | None = None
    shares: list[tuple[str, TenantKey]] = field(default_factory=list)  # (host, task) of shared tasks


def _gangs(demand: JobDemand) -> list[list[TaskDemand]]:
    gangs: dict[tuple[str, str, str], list[TaskDemand]] = {}
    for t in demand.tasks:
        if t.gpu > 0 and not t.shares_a_gpu:
            gangs.setdefault((t.affinity_group or "", t.sku_type or "", t.pinned_cell or ""), []).append(t)
    return list(gangs.values())


def _node_leaves(cfg: Any, chain: str) -> int:
    """The devices of one node of a chain (its node-level cell), the most one task may have."""
    for _, name in sorted(cfg.level_types.get(chain, {}).items()):
        info = cfg.cell_types[name]
        if info.has_node and not info.multi_nodes:
            return int(info.leaf_num)
    return 1 << 30


def _largest_on_one_node(cfg: Any, chain: str, cells: Mapping[int, Any]) -> int:
    """The most devices one task may have in these cells of a chain: their largest level, at
    most a node's (HiveD places a task inside one cell of its VC, on one node)."""
    node_level = _node_leaves(cfg, chain)
    return max(
        (
            min(cfg.level_leaf_num[chain].get(level, 1), node_level)
            for level, members in cells.items()
            if members
        ),
        default=0,
    )


def _free_leaves(cell: Any) -> int:
    if not cell.children:
        return 1 if cell.priority == FREE_PRIORITY else 0
    return sum(_free_leaves(child) for child in cell.children)


def _most_free_together(cells: Mapping[int, Any]) -> int:
    """The most free devices of these VC cells that one task could have together: inside one
    node-level cell, or one cell of the VC smaller than a node."""
    return max(
        (
            _free_leaves(cell)
            for members in cells.values()
            for cell in members
            if cell.is_node_level or (not cell.at_or_higher_than_node and cell.preassigned is cell)
        ),
        default=0,
    )


def _host_prefix(job_id: str) -> str:
    return f"{job_id}/gpu-share-"


class HivedPolicy:
    """A `PlacementPolicy` running the HiveD algorithm; pure and single-threaded."""

    def __init__(
        self,
        config: dict[str, Any] | None = None,
        rack_size: int = 0,
        detailed_reasons: bool = True,
        *,
        vcs: Mapping[str, Mapping[str, int]] | None = None,
        declared: Mapping[str, int] | None = None,
    ) -> None:
        self._doc = config
        # Without a config: VCs (GPUs per leaf type) an admin set over the cells derived from the
        # nodes, and the GPUs per type the nodes had then.
        self._vcs = vcs
        self._declared = declared
        self.notes: list[str] = []
        self._detailed = detailed_reasons
        self._rack_size = rack_size
        self._nodes: dict[str, NodeInventory] = {}
        parsed = parse_config(config) if config else None
        self._algo: HivedAlgorithm | None = HivedAlgorithm(parsed) if parsed else None
        self._jobs: dict[str, _Job] = {}
        self._pod_job: dict[str, str] = {}
        self._used: dict[str, tuple[int, int]] = {}  # node -> CPU and memory held by placed jobs
        self._node_names: set[str] = set()
        self._low_cpu = 0
        self._low_mem = 0
        self._low: set[str] = set()  # nodes with less than the low thresholds of CPU or memory free
        self._shape: dict[str, Any] | None = None
        self._shares = ShareHosts(parsed.sharing_policy) if parsed else ShareHosts()
        self._vc_rooms: dict[str, VcRoom] | None = None

    @property
    def shares(self) -> ShareHosts:
        """The leaf cells shared tasks use, with who holds how much of each."""
        return self._shares

    @property
    def algorithm(self) -> HivedAlgorithm | None:
        return self._algo

    def config_document(self) -> dict[str, Any] | None:
        """The HiveD config in force: the one given, or the one derived from the nodes."""
        return self._doc if self._doc is not None else self._shape

    def set_nodes(self, nodes: list[NodeInventory]) -> None:
        self._vc_rooms = None
        self._nodes = {n.name: n for n in nodes}
        healthy = [n for n in nodes if n.healthy]
        self._node_names = {n.name for n in healthy}
        self._low_cpu = min((n.cpu for n in healthy), default=0) // 2
        self._low_mem = min((n.memory_mb for n in healthy), default=0) // 2
        self._low = set()
        for name in list(self._used):
            self._account({name: (0, 0)}, 1)
        if self._doc is None:
            shape = config_from_nodes(nodes, self._rack_size)
            if self._vcs is not None:
                shape, self.notes = split_by_type(shape, self._vcs, self._declared)
            if shape != self._shape:
                self._shape = shape
                self._algo = HivedAlgorithm(parse_config(shape))
                for job in self._jobs.values():
                    for spec, info in job.pods:
                        self._algo.add_allocated_pod(spec, info)
                for host in self._shares.hosts.values():
                    self._algo.add_allocated_pod(host.spec, host.info)
        if self._algo is not None:
            for node in self._algo.all_nodes():
                inv = self._nodes.get(node)
                if inv is not None and inv.healthy:
                    self._algo.set_healthy_node(node)
                else:
                    self._algo.set_bad_node(node)

    def _suggested(self, gang: list[TaskDemand]) -> set[str] | None:
        """Nodes with the CPU and memory a gang member needs, as Kubernetes would suggest them.

        None (every node) when no node is short of them, which is the common case and lets the
        core skip the check altogether.
        """
        if not self._nodes:
            return None
        cpu = max(t.cpu for t in gang)
        mem = max(t.memory_mb for t in gang)
        if cpu <= self._low_cpu and mem <= self._low_mem:
            # Nodes outside the low set have at least the low thresholds free: only look there.
            short = {
                name
                for name in self._low
                if (inv := self._nodes.get(name)) is not None
                and (inv.cpu - self._used[name][0] < cpu or inv.memory_mb - self._used[name][1] < mem)
            }
        else:
            short = {
                n.name
                for n in self._nodes.values()
                if n.cpu - self._used.get(n.name, (0, 0))[0] < cpu
                or n.memory_mb - self._used.get(n.name, (0, 0))[1] < mem
            }
        if not short:
            return None
        return self._node_names - short

    def _pod_spec(
        self, demand: JobDemand, gang: list[TaskDemand], task: TaskDemand, ignore_suggested: bool = True
    ) -> PodSpec:
        members: dict[int, int] = {}
        for t in gang:
            members[t.gpu] = members.get(t.gpu, 0) + 1
        # One HiveD group per gang (`_gangs`): a pinned cell names its own group.
        group = f"{demand.job_id}/{task.affinity_group or 'gang'}/{task.sku_type or ''}"
        if task.pinned_cell:
            group += f"/{task.pinned_cell}"
        return PodSpec(
            name=f"{demand.job_id}/{task.role}-{task.index}",
            virtual_cluster=demand.virtual_cluster,
            priority=demand.priority,
            leaf_cell_number=task.gpu,
            group_name=group,
            members=tuple((count, gpus) for gpus, count in sorted(members.items())),
            leaf_cell_type=task.sku_type or "",
            pinned_cell_id=task.pinned_cell or "",
            lazy_preemption=demand.lazy_preemption,
            ignore_suggested_nodes=ignore_suggested,
        )

    def decide(self, demand: JobDemand) -> Decision:
        existing = self._jobs.get(demand.job_id)
        if existing is not None and existing.placed is not None:
            return existing.placed
        job = existing or _Job()
        self._jobs[demand.job_id] = job
        job.pods = []
        placements: dict[tuple[str, int], TaskPlacement] = {}
        victims: set[str] = set()
        for gang in _gangs(demand):
            if self._algo is None or not self._algo.full:
                needed = sum(t.gpu for t in gang)
                reason = (
                    f"the cluster has no GPU nodes yet; the job needs {counted(needed, 'GPU')} "
                    "(on a machine without GPUs, declare simulated ones with `pai up --gpus N`)"
                )
                return self._give_up(demand, Waiting(demand.job_id, reason))
            suggested = self._suggested(gang)
            for task in gang:
                spec = self._pod_spec(demand, gang, task, suggested is None)
                try:
                    result = self._algo.schedule(spec, suggested, PREEMPTING_PHASE)
                except HivedUserError as err:
                    return self._give_up(demand, Rejected(demand.job_id, str(err)))
                if result.kind == "wait":
                    return self._give_up(
                        demand, Waiting(demand.job_id, self._explain(demand, gang, result.reason))
                    )
                if result.kind == "preempt":
                    job.pending.append(spec)
                    victims.update(j for v in result.victims for j in self._victim_jobs(v))
                    break
                assert result.bind_info is not None
                self._algo.add_allocated_pod(spec, result.bind_info)
                self._pod_job[spec.name] = demand.job_id
                job.pods.append((spec, result.bind_info))
                placements[(task.role, task.index)] = TaskPlacement(
                    task.role, task.index, result.node, self._address(result.node), result.leaf_cells
                )
        shared = [t for t in demand.tasks if t.shares_a_gpu]
        if shared and not victims:
            outcome = self._place_shares(demand, job, shared, placements)
            if isinstance(outcome, Waiting | Rejected):
                return self._give_up(demand, outcome)
            victims.update(outcome)
        if victims:
            self._undo_pods(job)
            self._undo_shares(job)
            reason = (
                f"waiting for {len(victims)} lower-priority job(s) to stop in VC {demand.virtual_cluster}"
            )
            return Preempting(demand.job_id, tuple(sorted(victims - {demand.job_id})), reason)
        missing = self._fit_resources(demand, job, placements)
        if missing:
            return self._give_up(demand, Waiting(demand.job_id, missing))
        self._account(job.usage, 1)
        tasks = tuple(placements[(t.role, t.index)] for t in demand.tasks)
        job.placed = Placed(demand.job_id, tasks)
        if self._algo is not None:
            # A host reserved by an earlier preemption that this placement did not need is given up.
            bound = {name for name, _ in job.shares}
            for spec in job.pending:
                if spec.name.startswith(_host_prefix(demand.job_id)) and spec.name not in bound:
                    self._algo.delete_unallocated_pod(spec)
        job.pending = []
        return job.placed

    def _victim_jobs(self, pod: str) -> set[str]:
        """The jobs a preempted pod stands for: its job, or every tenant of a shared host."""
        if pod in self._shares.hosts:
            return self._shares.jobs_on(pod)
        return {self._pod_job.get(pod, pod)}

    def _rooms(self) -> dict[str, NodeRoom]:
        """CPU and memory left on each healthy node, after placed jobs and this job so far."""
        if not self._nodes:
            assert self._algo is not None
            return {n: NodeRoom(1 << 40, 1 << 40) for n in self._algo.all_nodes()}
        out: dict[str, NodeRoom] = {}
        for name in self._node_names:
            inv = self._nodes[name]
            cpu, mem = self._used.get(name, (0, 0))
            out[name] = NodeRoom(inv.cpu - cpu, inv.memory_mb - mem)
        return out

    def _host_spec(self, name: str, demand: JobDemand, task: TaskDemand, ignore_suggested: bool) -> PodSpec:
        return PodSpec(
            name=name,
            virtual_cluster=demand.virtual_cluster,
            priority=demand.priority,
            leaf_cell_number=1,
            group_name=name,
            members=((1, 1),),
            leaf_cell_type=task.sku_type or "",
            pinned_cell_id=task.pinned_cell or "",
            lazy_preemption=demand.lazy_preemption,
            ignore_suggested_nodes=ignore_suggested,
        )

    def _host_name(self, job_id: str, taken: set[str]) -> str:
        """The next host name of the job: the same on a retry, so a reservation is found again."""
        k = 0
        while (name := f"{_host_prefix(job_id)}{k}") in self._shares.hosts or name in taken:
            k += 1
        return name

    def _place_shares(
        self,
        demand: JobDemand,
        job: _Job,
        tasks: list[TaskDemand],
        placements: dict[tuple[str, int], TaskPlacement],
    ) -> Waiting | Rejected | set[str]:
        """Put each shared task on a host of its pool, opening hosts through HiveD when none has room.

        The sharing policy picks among existing hosts; the largest shares go first. Answers the
        jobs to preempt (empty when every task is placed), or why the job waits or is refused.
        """
        algo = self._algo
        if algo is None or not algo.full:
            needed = sum(t.gpu_milli for t in tasks) / 1000
            reason = (
                f"the cluster has no GPU nodes yet; the job needs {needed:g} GPU shared "
                "(on a machine without GPUs, declare simulated ones with `pai up --gpus N`)"
            )
            return Waiting(demand.job_id, reason)
        rooms = self._rooms()
        asked = {(t.role, t.index): t for t in demand.tasks}
        for p in placements.values():  # this job's whole-GPU tasks take their CPU and memory first
            t = asked[(p.role, p.index)]
            if p.node in rooms:
                r = rooms[p.node]
                rooms[p.node] = NodeRoom(r.cpu - t.cpu, r.memory_mb - t.memory_mb)
        mix = [ShareDemand(t.cpu * 1000, t.memory_mb, 1, t.gpu_milli) for t in tasks]
        opened: set[str] = set()
        victims: set[str] = set()  # every host the gang needs is reserved in one pass, not one a retry
        for task in sorted(tasks, key=lambda t: -t.gpu_milli):
            pool: PoolKey = (
                demand.virtual_cluster,
                demand.priority,
                task.sku_type or "",
                task.pinned_cell or "",
            )
            host = self._shares.choose(pool, task.gpu_milli, task.cpu, task.memory_mb, rooms, mix)
            if host is None:
                fit = {n for n, r in rooms.items() if r.cpu >= task.cpu and r.memory_mb >= task.memory_mb}
                suggested = None if not self._nodes or fit == self._node_names else fit
                name = self._host_name(demand.job_id, opened)
                spec = self._host_spec(name, demand, task, suggested is None)
                try:
                    result = algo.schedule(spec, suggested, PREEMPTING_PHASE)
                except HivedUserError as err:
                    return Rejected(demand.job_id, str(err))
                if result.kind == "wait":
                    return Waiting(demand.job_id, self._explain(demand, [task], result.reason))
                if result.kind == "preempt":
                    job.pending.append(spec)
                    opened.add(name)
                    victims.update(j for v in result.victims for j in self._victim_jobs(v))
                    continue
                assert result.bind_info is not None
                algo.add_allocated_pod(spec, result.bind_info)
                opened.add(name)
                host = ShareHost(name, pool, result.node, result.leaf_cells[0], spec, result.bind_info)
                self._shares.add_host(host)
            key: TenantKey = (demand.job_id, task.role, task.index)
            host.tenants[key] = task.gpu_milli
            job.shares.append((host.name, key))
            if host.node in rooms:
                r = rooms[host.node]
                rooms[host.node] = NodeRoom(r.cpu - task.cpu, r.memory_mb - task.memory_mb)
            placements[(task.role, task.index)] = TaskPlacement(
                task.role,
                task.index,
                host.node,
                self._address(host.node),
                (host.device,),
                task.gpu_milli,
                task.gpu_memory_mib,
            )
        return victims - {demand.job_id}

    def _undo_shares(self, job: _Job) -> None:
        """Take the job's shares off their hosts; a host left empty goes back to HiveD at once."""
        for name, key in job.shares:
            host = self._shares.hosts.get(name)
            if host is None:
                continue
            host.tenants.pop(key, None)
            if not host.tenants:
                if self._algo is not None:
                    self._algo.delete_allocated_pod(host.spec, host.info)
                self._shares.remove_host(host)
        job.shares = []

    def _address(self, node: str) -> str:
        inv = self._nodes.get(node)
        return inv.address if inv is not None else node

    def _fit_resources(
        self, demand: JobDemand, job: _Job, placements: dict[tuple[str, int], TaskPlacement]
    ) -> str:
        """Check CPU and memory of GPU tasks, and fit the tasks that need no GPU."""
        # What this job takes, over what the cluster already uses (not a copy of that: at
        # 12,500 nodes copying it cost more than the rest of a decision).
        base = self._used
        taken: dict[str, tuple[int, int]] = {}
        job.usage = {}

        def used(node: str) -> tuple[int, int]:
            return taken[node] if node in taken else base.get(node, (0, 0))

        def take(node: str, task: TaskDemand) -> None:
            cpu, mem = used(node)
            taken[node] = (cpu + task.cpu, mem + task.memory_mb)
            cpu, mem = job.usage.get(node, (0, 0))
            job.usage[node] = (cpu + task.cpu, mem + task.memory_mb)

        def fits(node: str, task: TaskDemand) -> bool:
            inv = self._nodes.get(node)
            if inv is None:
                return not self._nodes
            cpu, mem = used(node)
            return inv.healthy and cpu + task.cpu <= inv.cpu and mem + task.memory_mb <= inv.memory_mb

        for t in demand.tasks:
            if t.gpu > 0:
                p = placements[(t.role, t.index)]
                if not fits(p.node, t):
                    self._undo_pods(job)
                    return (
                        f"node {p.node} lacks the CPU ({t.cpu}) or memory ({t.memory_mb} MB) "
                        f"for {t.role}-{t.index}"
                    )
                take(p.node, t)
        for t in demand.tasks:
            if t.gpu > 0:
                continue
            candidates = [n for n in self._nodes.values() if fits(n.name, t)]
            if not candidates:
                self._undo_pods(job)
                job.usage = {}
                return (
                    f"no healthy node has {t.cpu} CPU and {t.memory_mb} MB memory free for "
                    f"{t.role}-{t.index} ({counted(len(self._nodes), 'node')} known)"
                )
            # Best fit: the node left with the least free CPU keeps big nodes whole.
            best = min(candidates, key=lambda n: (n.cpu - used(n.name)[0], n.name))
            take(best.name, t)
            placements[(t.role, t.index)] = TaskPlacement(t.role, t.index, best.name, best.address, ())
        return ""

    def _account(self, usage: dict[str, tuple[int, int]], sign: int) -> None:
        for node, (cpu, mem) in usage.items():
            c, m = self._used.get(node, (0, 0))
            c, m = c + sign * cpu, m + sign * mem
            if c or m:
                self._used[node] = (c, m)
            else:
                self._used.pop(node, None)
            inv = self._nodes.get(node)
            if (
                inv is not None
                and (c or m)
                and (inv.cpu - c < self._low_cpu or inv.memory_mb - m < self._low_mem)
            ):
                self._low.add(node)
            else:
                self._low.discard(node)

    def _undo_pods(self, job: _Job) -> None:
        assert self._algo is not None or not job.pods
        for spec, info in job.pods:
            if self._algo is not None:
                self._algo.delete_allocated_pod(spec, info)
            self._pod_job.pop(spec.name, None)
        job.pods = []

    def _give_up(self, demand: JobDemand, decision: Decision) -> Decision:
        self.release(demand.job_id)
        return decision

    def _explain(self, demand: JobDemand, gang: list[TaskDemand], core_reason: str) -> str:
        assert self._algo is not None
        if not self._detailed:
            return core_reason
        leaf_type = gang[0].sku_type or ""
        needed = sum(t.gpu for t in gang)
        shape = " + ".join(f"{t.gpu_milli / 1000:g}" if t.shares_a_gpu else f"{t.gpu}" for t in gang)
        kind = leaf_type or "GPU"
        chains = self._algo.cfg.leaf_type_chains.get(leaf_type) if leaf_type else list(self._algo.full)
        chains = chains or []
        vc = demand.virtual_cluster
        widest = max((t.gpu for t in gang if not t.shares_a_gpu), default=0)
        if demand.priority >= MIN_GUARANTEED_PRIORITY:
            cfg = self._algo.cfg
            mine = {c: cfg.vc_full.get(vc, {}).get(c, {}) for c in chains}
            leaves = [leaf for cells in mine.values() for leaf in cells.get(1, [])]
            free = sum(1 for leaf in leaves if leaf.priority == FREE_PRIORITY)
            # Free devices are no comfort to a task wider than any cell of the VC on one node,
            # nor when they are spread over cells and nodes with fewer free each.
            largest = max((_largest_on_one_node(cfg, c, cells) for c, cells in mine.items()), default=0)
            if leaves and widest > largest:
                return (
                    f"VC {vc} has no cell of {widest} {kind}s on one node (its largest: "
                    f"{counted(largest, kind)}); a task of the job needs {widest} on one node "
                    f"({core_reason})"
                )
            where = f"VC {vc} has {free} of its {len(leaves)} {kind} devices free"
            together = max((_most_free_together(cells) for cells in mine.values()), default=0)
            if widest > 1 and free >= widest > together:
                where += f", at most {together} of them together on one node"
        else:
            leaves = [leaf for c in chains for leaf in self._algo.full[c][1]]
            free = sum(1 for leaf in leaves if leaf.priority == FREE_PRIORITY and leaf.healthy)
            where = f"the cluster has {free} of {len(leaves)} {kind} devices free for opportunistic jobs"
        return f"{where}; the job needs {needed} at once as [{shape}] per task ({core_reason})"

    def restore(self, demand: JobDemand, placement: Placed) -> None:
        job = self._jobs.setdefault(demand.job_id, _Job())
        where = {(p.role, p.index): p for p in placement.tasks}
        for gang in _gangs(demand):
            specs = [self._pod_spec(demand, gang, t) for t in gang]
            members: dict[int, list[PodPlacementInfo]] = {}
            for t in gang:
                p = where[(t.role, t.index)]
                members.setdefault(t.gpu, []).append(
                    PodPlacementInfo(p.node, p.gpu_indices, self._types(demand, p))
                )
            group = tuple((n, tuple(ps)) for n, ps in sorted(members.items()))
            for t, spec in zip(gang, specs, strict=True):
                p = where[(t.role, t.index)]
                info = BindInfo(p.node, p.gpu_indices, "", group)
                if self._algo is not None:
                    self._algo.add_allocated_pod(spec, info)
                self._pod_job[spec.name] = demand.job_id
                job.pods.append((spec, info))
        for t in demand.tasks:
            if t.shares_a_gpu:
                self._restore_share(demand, job, t, where[(t.role, t.index)])
        for t in demand.tasks:
            p = where[(t.role, t.index)]
            cpu, mem = job.usage.get(p.node, (0, 0))
            job.usage[p.node] = (cpu + t.cpu, mem + t.memory_mb)
        self._account(job.usage, 1)
        job.placed = placement

    def _restore_share(self, demand: JobDemand, job: _Job, t: TaskDemand, p: TaskPlacement) -> None:
        """Put a running shared task back on its device's host, re-adding the host to HiveD if new."""
        device = p.gpu_indices[0] if p.gpu_indices else 0
        host = self._shares.host_at(p.node, device)
        if host is None:
            pool: PoolKey = (demand.virtual_cluster, demand.priority, t.sku_type or "", t.pinned_cell or "")
            name = self._host_name(demand.job_id, set())
            spec = self._host_spec(name, demand, t, True)
            mine = PodPlacementInfo(p.node, (device,), self._types(demand, p))
            info = BindInfo(p.node, (device,), "", ((1, (mine,)),))
            if self._algo is not None:
                self._algo.add_allocated_pod(spec, info)
            host = ShareHost(name, pool, p.node, device, spec, info)
            self._shares.add_host(host)
        key: TenantKey = (demand.job_id, t.role, t.index)
        host.tenants[key] = p.gpu_milli or t.gpu_milli
        job.shares.append((host.name, key))

    def _types(self, demand: JobDemand, p: TaskPlacement) -> tuple[str, ...] | None:
        """The VC cell level a running pod most likely used, so it keeps its guarantee."""
        if self._algo is None or demand.priority < MIN_GUARANTEED_PRIORITY:
            return tuple("" for _ in p.gpu_indices)
        # The chains with a leaf on the node, in the order of `full` (node_leaves is built in that
        # order): a look-up where a scan of every leaf cost a restart minutes at 100,000 GPUs.
        for chain in dict.fromkeys(leaf.chain for leaf in self._algo.node_leaves.get(p.node, ())):
            levels = self._algo.cfg.vc_preassigned.get(demand.virtual_cluster, {}).get(chain)
            if levels:
                name = self._algo.cfg.level_types[chain][min(levels)]
                return tuple(name for _ in p.gpu_indices)
        return None

    def demoted_jobs(self) -> dict[str, str]:
        """Jobs still running but no longer inside their VC's guarantee, with the reason.

        After a restart on a smaller VC, or when a higher-priority job took their VC cells
        lazily, jobs keep running as opportunistic work; the service shows this to users
        instead of leaving it silent.
        """
        if self._algo is None:
            return {}
        out: dict[str, str] = {}
        for job_id, job in self._jobs.items():
            hosts = [self._shares.hosts[name].spec for name, _ in job.shares if name in self._shares.hosts]
            for spec in [*(spec for spec, _ in job.pods), *hosts]:
                g = self._algo.groups.get(spec.group_name)
                if g is not None and g.lazy_preempted_by is not None and job_id not in out:
                    if g.lazy_preempted_by == g.name:
                        why = f"its devices no longer fit VC {g.vc} as configured"
                    else:
                        why = f"a higher-priority job took its cells in VC {g.vc}"
                    out[job_id] = f"running without its VC guarantee (preemptible): {why}"
        return out

    def release(self, job_id: str) -> None:
        job = self._jobs.pop(job_id, None)
        if job is None:
            return
        if job.placed is not None:
            self._account(job.usage, -1)
        self._undo_pods(job)
        self._undo_shares(job)
        if self._algo is not None:
            for spec in job.pending:
                self._algo.delete_unallocated_pod(spec)

    def vc_rooms(self) -> dict[str, VcRoom]:
        """The most each VC could ever hold: its cells' devices (per leaf type), the cluster's
        devices and what every node offers (kept until the nodes or the cells change)."""
        if self._vc_rooms is not None:
            return self._vc_rooms
        cpu = sum(n.cpu for n in self._nodes.values())
        memory = sum(n.memory_mb for n in self._nodes.values())
        rooms: dict[str, VcRoom] = {}
        if self._algo is None:
            self._vc_rooms = rooms
            return rooms
        cfg = self._algo.cfg
        cluster_gpus = sum(len(ccl.get(1, [])) for ccl in self._algo.full.values())
        for vc in cfg.vc_names:
            by_type: dict[str, int] = {}
            cells = [*cfg.vc_full.get(vc, {}).items()]
            phys = cfg.vc_pinned_physical.get(vc, {})
            cells += [(phys[pid].chain, ccl) for pid, ccl in cfg.vc_pinned.get(vc, {}).items() if pid in phys]
            largest = 0
            for chain, ccl in cells:
                leaf_type = cfg.cell_types[chain].leaf_type if chain in cfg.cell_types else chain
                by_type[leaf_type] = by_type.get(leaf_type, 0) + len(ccl.get(1, []))
                largest = max(largest, _largest_on_one_node(cfg, chain, ccl))
            rooms[vc] = VcRoom(
                vc,
                gpus=sum(by_type.values()),
                gpus_by_type=by_type,
                cluster_cpu=cpu,
                cluster_memory_mb=memory,
                cluster_gpus=cluster_gpus,
                largest_task_gpus=largest,
            )
        self._vc_rooms = rooms
        return rooms

    def virtual_clusters(self) -> list[VirtualClusterStatus]:
        if self._algo is None:
            return []
        out: list[VirtualClusterStatus] = []
        cfg = self._algo.cfg
        for vc in cfg.vc_names:
            quota = sum(len(ccl.get(1, [])) for ccl in cfg.vc_full[vc].values())
            quota += sum(len(ccl.get(1, [])) for ccl in cfg.vc_pinned[vc].values())
            nodes: dict[str, int] = {}
            for g in self._algo.groups.values():
                if g.vc != vc:
                    continue
                for pods in g.physical.values():
                    for pod in pods:
                        for leaf in pod:
                            if leaf is not None:
                                nodes[leaf.nodes[0]] = nodes.get(leaf.nodes[0], 0) + 1
            out.append(VirtualClusterStatus(vc, quota, sum(nodes.values()), quota, nodes))
        return out
