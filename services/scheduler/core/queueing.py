"""The scheduler's state machine: which jobs wait, which hold resources, what to announce.

`SchedulerCore.apply` folds one event into the state; it never decides, so replaying the whole
job stream after a restart rebuilds exactly the allocations that exist (no double allocation).
`SchedulerCore.decide` walks the queue in priority order, and within a priority in fair-share
order (core/fair_share.py: the user holding the least of the VC first), and returns the
announcements to publish; each carries a deterministic message id, so a decision repeated after
a crash is deduplicated by the bus. A job its VC could never hold waits with a reason that says
so (libs/protocol/vc_fit.py), where the policy would only say the VC is full.
"""

from __future__ import annotations

import dataclasses
import hashlib
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, ClassVar

from libs.protocol.events import (
    Event,
    EventBase,
    FailureInfo,
    JobCompleted,
    JobPending,
    JobPreempting,
    JobRetrying,
    JobScheduled,
    JobState,
    JobStopRequested,
    JobSubmitted,
    NodeCordoned,
    NodeLost,
    NodeReported,
)
from libs.protocol.events import TaskPlacement as EventPlacement
from libs.protocol.jobs import JobConfig
from libs.protocol.vc_fit import VcDemand, VcRoom, never_fits
from services.scheduler.core.fair_share import Candidate, FairQueue, Share, fair_order, hold
from services.scheduler.core.placements import (
    JobDemand,
    NodeInventory,
    Placed,
    PlacementPolicy,
    Preempting,
    Rejected,
    TaskDemand,
    TaskPlacement,
    Waiting,
)

# A policy that can say how much each VC could ever hold (HivedPolicy, and the wrapper of it).
VcRooms = Callable[[], dict[str, VcRoom]]

PRIORITY_CLASSES = {"crit": 1000, "prod": 100, "test": 10, "oppo": -1}
# The most tasks one job may ask of the scheduler. REST refuses bigger jobs at validation
# (10,000 by default); this bound holds for what reaches the stream anyway (a job from before
# the limits, a raised REST limit), so one job never costs unbounded time or memory here.
MAX_JOB_TASKS = 100_000
# The exit code of a job the scheduler refuses to place, ever (failure type permanent).
REFUSED_EXIT_CODE = -1400


def refusal(config: JobConfig, limit: int) -> str | None:
    """Why a job can never be placed by this scheduler, decided in constant time per task role.

    A config whose counts are not whole numbers never decodes (libs/protocol/jobs.py), so what
    is left to refuse here is size."""
    count = config.total_tasks
    if count > limit:
        return (
            f"the job asks for {count:,} tasks, more than the {limit:,} tasks the scheduler places for one "
            "job; submit it with fewer instances"
        )
    return None


def demand_from_config(job_id: str, user: str, virtual_cluster: str, config: JobConfig) -> JobDemand:
    """The scheduler's view of a job config: one demand per task, its role's resources and hints."""
    hived = config.extras.hived_scheduler if config.extras is not None else None
    role_hints = (hived.task_roles if hived is not None else None) or {}
    priority = PRIORITY_CLASSES.get(config.priority_class or "", 0)
    shares = config.gpu_shares
    tasks: list[TaskDemand] = []
    for role, spec in config.task_roles.items():
        resources = spec.resource_per_instance
        hint = role_hints.get(role)
        share = shares.get(role)
        for index in range(spec.instances):
            tasks.append(
                TaskDemand(
                    role=role,
                    index=index,
                    cpu=resources.cpu,
                    memory_mb=resources.memory_mb,
                    gpu=1 if share is not None else resources.gpu,
                    sku_type=hint.sku_type if hint is not None else None,
                    pinned_cell=hint.pinned_cell_id if hint is not None else None,
                    affinity_group=hint.affinity_group_name if hint is not None else None,
                    gpu_milli=share.gpu_milli if share is not None else 0,
                    gpu_memory_mib=share.gpu_memory_mib if share is not None else None,
                )
            )
    return JobDemand(job_id, user, virtual_cluster, priority, tuple(tasks))


@dataclass
class _Job:
    demand: JobDemand
    seq: int
    attempt: int = 0
    placed: bool = False
    last_reason: str = ""
    preempting: set[str] = field(default_factory=set)
    placement: Placed | None = None


Announcement = JobScheduled | JobPending | JobPreempting | JobCompleted


class SchedulerCore:
    def __init__(self, policy: PlacementPolicy, max_job_tasks: int = MAX_JOB_TASKS) -> None:
        self._policy = policy
        # Node events only mark the nodes changed; the policy gets them all at its next use.
        # A replay after a restart reads one report per node: handing the policy every node on
        # each of 12,500 reports was quadratic (minutes at 100,000 GPUs).
        self._nodes_changed = False
        self.max_job_tasks = max_job_tasks
        self._jobs: dict[str, _Job] = {}
        # Jobs refused at once (too large, unreadable), with why: failed at the next decision,
        # forgotten when their job.completed is read back, so a replay refuses them again cheaply.
        self._refused: dict[str, tuple[int, str]] = {}
        self._told: set[str] = set()
        self._nodes: dict[str, NodeInventory] = {}
        self._cordoned: set[str] = set()
        self._seq = 0
        # Deciding is incremental: a new job is tried alone; every waiting job is tried again
        # only when capacity may have grown (a release, a node change, a new policy).
        self._fresh: set[str] = set()
        self._everyone = True
        # What each user holds in each VC, and the placement counter at their last placement:
        # the fair-share order of jobs of one priority (core/fair_share.py).
        self._shares: dict[tuple[str, str], Share] = {}
        self._placements = 0
        self._queue_order: dict[str, tuple[int, int, str]] | None = None

    @property
    def policy(self) -> PlacementPolicy:
        """The placement policy, holding every node reported so far."""
        if self._nodes_changed:
            self._nodes_changed = False
            self._policy.set_nodes(
                [
                    dataclasses.replace(node, healthy=False) if node.name in self._cordoned else node
                    for node in self._nodes.values()
                ]
            )
        return self._policy

    @property
    def queued(self) -> list[str]:
        return [job_id for job_id, job in self._ordered() if not job.placed]

    def apply(self, event: Event) -> None:
        """Fold one event into the state by its type's rule (``_RULES``); other types change nothing."""
        rule = self._RULES.get(type(event))
        if rule is not None:
            self._queue_order = None
            rule(self, event)

    def refuse_unreadable(self, job_id: str, why: str) -> None:
        """A job whose job.submitted never decodes ends FAILED with why at the next decision,
        instead of waiting for a submission the scheduler cannot read."""
        if job_id not in self._jobs:
            self._refused.setdefault(job_id, (0, why))

    def _hold(self, job: _Job, sign: int) -> None:
        """Count a job's resources to its user in its VC (placed: +1, released: -1)."""
        gpus, cpu = _size(job.demand)
        demand = job.demand
        if sign > 0:
            self._placements += 1
            hold(self._shares, demand.virtual_cluster, demand.user, gpus, cpu, self._placements)
        else:
            hold(self._shares, demand.virtual_cluster, demand.user, -gpus, -cpu)

    def _submitted(self, event: JobSubmitted) -> None:
        if event.job_id in self._refused:
            return
        if event.job_id not in self._jobs and (why := refusal(event.config, self.max_job_tasks)):
            self._refused[event.job_id] = (0, why)
            return
        if event.job_id not in self._jobs:
            self._seq += 1
            demand = demand_from_config(event.job_id, event.user, event.virtual_cluster, event.config)
            if event.priority and not demand.priority:
                demand = JobDemand(
                    demand.job_id, demand.user, demand.virtual_cluster, event.priority, demand.tasks
                )
            self._jobs[event.job_id] = _Job(demand, self._seq)
            self._fresh.add(event.job_id)

    def _scheduled(self, event: JobScheduled) -> None:
        job = self._jobs.get(event.job_id)
        if job is not None and not job.placed and event.attempt >= job.attempt:
            job.attempt = event.attempt
            job.placed = True
            self._hold(job, 1)
            placed = Placed(event.job_id, tuple(_from_event(p) for p in event.placements))
            job.placement = placed
            self.policy.restore(job.demand, placed)

    def _pending(self, event: JobPending) -> None:
        job = self._jobs.get(event.job_id)
        if job is not None:
            job.last_reason = event.reason

    def _preempting(self, event: JobPreempting) -> None:
        preemptor = self._jobs.get(event.by_job_id)
        if preemptor is not None:
            preemptor.preempting.add(event.job_id)

    def _retrying(self, event: JobRetrying) -> None:
        job = self._jobs.get(event.job_id)
        if job is not None and event.next_attempt > job.attempt:
            self.policy.release(event.job_id)
            self._everyone = True
            if job.placed:
                self._hold(job, -1)
            job.attempt = event.next_attempt
            job.placed = False
            job.placement = None
            job.last_reason = ""
            for other in self._jobs.values():
                other.preempting.discard(event.job_id)

    def _completed(self, event: JobCompleted) -> None:
        self._refused.pop(event.job_id, None)
        self._told.discard(event.job_id)
        job = self._jobs.pop(event.job_id, None)
        if job is not None:
            self.policy.release(event.job_id)
            self._everyone = True
            if job.placed:
                self._hold(job, -1)
        for other in self._jobs.values():
            other.preempting.discard(event.job_id)

    def _stop_requested(self, event: JobStopRequested) -> None:
        job = self._jobs.get(event.job_id)
        if job is not None and not job.placed:
            # Not placed: nothing to free; never place it again. The orchestrator ends it.
            del self._jobs[event.job_id]

    def _node_reported(self, event: NodeReported) -> None:
        node = NodeInventory(
            event.name,
            event.address,
            event.cpu,
            event.memory_mb,
            event.gpus,
            event.gpu_model,
            event.healthy,
        )
        if self._nodes.get(event.name) != node:  # periodic reports of an unchanged node change nothing
            self._nodes[event.name] = node
            self._set_nodes()

    def _node_cordoned(self, event: NodeCordoned) -> None:
        before = set(self._cordoned)
        if event.cordoned:
            self._cordoned.add(event.name)
        else:
            self._cordoned.discard(event.name)
        if before != self._cordoned:
            self._set_nodes()

    def _node_lost(self, event: NodeLost) -> None:
        if event.name in self._nodes:
            lost = self._nodes[event.name]
            self._nodes[event.name] = dataclasses.replace(lost, healthy=False)
            self._set_nodes()

    # One rule per event type (cosmicpython's message bus).
    _RULES: ClassVar[dict[type[EventBase], Callable[[SchedulerCore, Any], None]]] = {
        JobSubmitted: _submitted,
        JobScheduled: _scheduled,
        JobPending: _pending,
        JobPreempting: _preempting,
        JobRetrying: _retrying,
        JobCompleted: _completed,
        JobStopRequested: _stop_requested,
        NodeReported: _node_reported,
        NodeCordoned: _node_cordoned,
        NodeLost: _node_lost,
    }

    def _set_nodes(self) -> None:
        """The policy gets every node (a cordoned one as unhealthy: nothing new lands on it) at
        its next use."""
        self._nodes_changed = True
        self._everyone = True

    def decide(self) -> list[Announcement]:
        """Try every waiting job in priority order, each priority in fair-share order; the
        announcements to publish, in order."""
        out: list[Announcement] = []
        self._queue_order = None
        ids = self._jobs if self._everyone else [job_id for job_id in self._fresh if job_id in self._jobs]
        waiting = [self._jobs[job_id] for job_id in ids]
        queue = FairQueue(
            (_candidate(job) for job in waiting if not job.placed and not job.preempting), self._shares
        )
        self._fresh.clear()
        self._everyone = False
        out.extend(self._refusals())
        rooms: dict[str, VcRoom] | None = None
        for candidate in queue:
            job_id, job = candidate.job_id, self._jobs[candidate.job_id]
            decision = self.policy.decide(job.demand)
            if isinstance(decision, Waiting):
                if rooms is None:
                    rooms = self._rooms()
                decision = _never_fits(job.demand, rooms) or decision
            if isinstance(decision, Placed):
                job.placed = True
                job.placement = decision
                self._hold(job, 1)
                out.append(
                    JobScheduled(
                        event_id=f"{job_id}.scheduled.{job.attempt}",
                        job_id=job_id,
                        attempt=job.attempt,
                        placements=tuple(_to_event(p) for p in decision.tasks),
                    )
                )
            elif isinstance(decision, Preempting):
                job.preempting.update(decision.victims)
                out.extend(
                    JobPreempting(
                        event_id=f"{victim}.preempting.{job_id}.{job.attempt}",
                        job_id=victim,
                        by_job_id=job_id,
                        reason=decision.reason,
                    )
                    for victim in decision.victims
                )
            elif isinstance(decision, Waiting | Rejected) and decision.reason != job.last_reason:
                job.last_reason = decision.reason
                digest = hashlib.sha256(decision.reason.encode()).hexdigest()[:12]
                out.append(
                    JobPending(
                        event_id=f"{job_id}.pending.{job.attempt}.{digest}",
                        job_id=job_id,
                        reason=decision.reason,
                    )
                )
        return out

    def _refusals(self) -> list[JobCompleted]:
        """A job the scheduler cannot handle ends FAILED with the reason, instead of waiting forever."""
        told = [
            JobCompleted(
                event_id=f"{job_id}.refused.{attempt}",
                job_id=job_id,
                attempt=attempt,
                state=JobState.FAILED,
                exit_code=REFUSED_EXIT_CODE,
                diagnostics=f"The scheduler refused the job: {why}.",
                failure=FailureInfo(
                    code=REFUSED_EXIT_CODE,
                    phrase="JobRefusedByScheduler",
                    type="permanent",
                    reason=f"The scheduler refused the job: {why}.",
                    solution="Submit the job again within the cluster's limits (GET /api/v2/info).",
                    issuer="PAI_SCHEDULER",
                    causer="USER_JOB",
                ),
            )
            for job_id, (attempt, why) in self._refused.items()
            if job_id not in self._told
        ]
        self._told.update(self._refused)
        return told

    @property
    def nodes(self) -> list[NodeInventory]:
        return list(self._nodes.values())

    def running(self) -> list[tuple[JobDemand, Placed]]:
        """Every job that holds resources, with its placement, in the order they were queued."""
        return [
            (job.demand, job.placement)
            for _, job in sorted(self._jobs.items(), key=lambda item: item[1].seq)
            if job.placed and job.placement is not None
        ]

    def demands(self) -> dict[str, JobDemand]:
        return {job_id: job.demand for job_id, job in self._jobs.items()}

    def waiting_reasons(self) -> dict[str, str]:
        """The last reason told to each job that still waits."""
        return {job_id: job.last_reason for job_id, job in self._ordered() if not job.placed}

    def replace_policy(self, policy: PlacementPolicy) -> None:
        """Switch to `policy`, which already holds the nodes and every running job's allocation.

        Waiting jobs are told their reason again under the new policy: the old one may not hold.
        """
        self._policy = policy
        self._everyone = True
        for job in self._jobs.values():
            if not job.placed:
                job.last_reason = ""

    def _rooms(self) -> dict[str, VcRoom]:
        """How much each VC could ever hold, where the policy can say; empty where it cannot."""
        rooms: VcRooms | None = getattr(self.policy, "vc_rooms", None)
        return rooms() if rooms is not None else {}

    def queue_position(self, job_id: str) -> tuple[int, int, str] | None:
        """A waiting job's place in its VC's queue: (position from 1, jobs waiting there, VC).

        The order the scheduler would place the VC's waiting jobs in were each placed in its turn
        (priority, then fair share); None for a job that is not waiting. Computed once per change.
        """
        if self._queue_order is None:
            order = fair_order(
                (_candidate(job) for job in self._jobs.values() if not job.placed), self._shares
            )
            totals: dict[str, int] = {}
            for candidate in order:
                totals[candidate.vc] = totals.get(candidate.vc, 0) + 1
            seen: dict[str, int] = {}
            positions: dict[str, tuple[int, int, str]] = {}
            for candidate in order:
                seen[candidate.vc] = seen.get(candidate.vc, 0) + 1
                positions[candidate.job_id] = (seen[candidate.vc], totals[candidate.vc], candidate.vc)
            self._queue_order = positions
        return self._queue_order.get(job_id)

    def _ordered(self) -> list[tuple[str, _Job]]:
        return sorted(self._jobs.items(), key=lambda item: (-item[1].demand.priority, item[1].seq))


def _size(demand: JobDemand) -> tuple[int, int]:
    """GPUs (a job's shares of GPUs rounded up to whole ones) and CPU a job holds while it runs."""
    shared = sum(t.gpu_milli for t in demand.tasks if t.shares_a_gpu)
    gpus = sum(t.gpu for t in demand.tasks if not t.shares_a_gpu) + -(-shared // 1000)
    return gpus, sum(t.cpu for t in demand.tasks)


def _candidate(job: _Job) -> Candidate:
    gpus, cpu = _size(job.demand)
    d = job.demand
    return Candidate(d.job_id, d.virtual_cluster, d.user, d.priority, job.seq, gpus, cpu)


def _never_fits(demand: JobDemand, rooms: dict[str, VcRoom]) -> Waiting | None:
    """A waiting reason saying the job could never start in its VC, or None when it could."""
    room = rooms.get(demand.virtual_cluster)
    if room is None:
        return None
    gpus, _ = _size(demand)
    by_type: dict[str, int] = {}
    for t in demand.tasks:
        if t.sku_type and t.gpu and not t.shares_a_gpu:
            by_type[t.sku_type] = by_type.get(t.sku_type, 0) + t.gpu
    free = [t for t in demand.tasks if t.gpu == 0]
    needs = VcDemand(
        gpus=gpus,
        gpus_by_type=by_type,
        free_cpu=sum(t.cpu for t in free),
        free_memory_mb=sum(t.memory_mb for t in free),
        cpu=sum(t.cpu for t in demand.tasks),
        memory_mb=sum(t.memory_mb for t in demand.tasks),
        priority=demand.priority,
        tasks=len(demand.tasks),
        largest_task_gpus=max((t.gpu for t in demand.tasks if not t.shares_a_gpu), default=0),
    )
    why = never_fits(needs, room)
    if why is None:
        return None
    return Waiting(demand.job_id, f"{why.message}. {why.hint}")


def _from_event(p: EventPlacement) -> TaskPlacement:
    return TaskPlacement(
        p.role, p.index, p.node, p.node_address, tuple(p.gpu_indices), p.gpu_milli, p.gpu_memory_mib
    )


def _to_event(p: TaskPlacement) -> EventPlacement:
    return EventPlacement(
        role=p.role,
        index=p.index,
        node=p.node,
        node_address=p.node_address,
        gpu_indices=p.gpu_indices,
        gpu_milli=p.gpu_milli,
        gpu_memory_mib=p.gpu_memory_mib,
    )
