"""What the scheduler service asks of a placement policy, and what a policy answers.

The service speaks only these types, so the first local policy and the HiveD core are
interchangeable behind `PlacementPolicy`, and the simulator drives the very same policy
objects in virtual time.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Protocol


@dataclass(frozen=True)
class TaskDemand:
    """One task (one pod) of a job, with what it needs on a single node."""

    role: str
    index: int
    cpu: int
    memory_mb: int
    gpu: int
    sku_type: str | None = None
    pinned_cell: str | None = None
    affinity_group: str | None = None
    # A share of one GPU (extras.gpuShare): thousandths of the device, 0 for whole devices.
    gpu_milli: int = 0
    gpu_memory_mib: int | None = None

    @property
    def shares_a_gpu(self) -> bool:
        return 0 < self.gpu_milli < 1000


@dataclass(frozen=True)
class JobDemand:
    """A whole job as the scheduler sees it: every task is placed at once or none is."""

    job_id: str
    user: str
    virtual_cluster: str
    priority: int
    tasks: tuple[TaskDemand, ...]
    lazy_preemption: bool = True


@dataclass(frozen=True)
class NodeInventory:
    """What a node offers; `gpus` counts devices, `healthy` false keeps new work away."""

    name: str
    address: str
    cpu: int
    memory_mb: int
    gpus: int
    gpu_model: str | None = None
    healthy: bool = True


@dataclass(frozen=True)
class TaskPlacement:
    role: str
    index: int
    node: str
    node_address: str
    gpu_indices: tuple[int, ...] = ()
    # Set when the task shares its one device: the thousandths it holds, and its memory cap.
    gpu_milli: int | None = None
    gpu_memory_mib: int | None = None


@dataclass(frozen=True)
class Placed:
    """Every task has a node and its devices; the policy has already recorded the allocation."""

    job_id: str
    tasks: tuple[TaskPlacement, ...]


@dataclass(frozen=True)
class Waiting:
    """The job cannot run now; `reason` is written for the user who submitted it."""

    job_id: str
    reason: str


@dataclass(frozen=True)
class Preempting:
    """The job can run once `victims` (job ids, whole jobs) have been stopped."""

    job_id: str
    victims: tuple[str, ...]
    reason: str


@dataclass(frozen=True)
class Rejected:
    """The request can never be satisfied as written (unknown VC, impossible shape...)."""

    job_id: str
    reason: str


Decision = Placed | Waiting | Preempting | Rejected


@dataclass(frozen=True)
class VirtualClusterStatus:
    name: str
    capacity_gpus: int
    used_gpus: int
    guaranteed_gpus: int
    nodes: dict[str, int] = field(default_factory=dict)


class PlacementPolicy(Protocol):
    """A pure, single-threaded placement engine. The service serialises every call."""

    def set_nodes(self, nodes: list[NodeInventory]) -> None:
        """Replace the node inventory (health included)."""

    def decide(self, demand: JobDemand) -> Decision:
        """Place the whole job, or say why not. A `Placed` answer is already allocated."""

    def restore(self, demand: JobDemand, placement: Placed) -> None:
        """Re-record an allocation that exists (after a restart), without deciding anew."""

    def release(self, job_id: str) -> None:
        """Free everything the job holds; unknown ids are ignored."""

    def virtual_clusters(self) -> list[VirtualClusterStatus]:
        """Capacity, use and guarantee of every virtual cluster."""
