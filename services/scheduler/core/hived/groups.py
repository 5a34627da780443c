"""The requests HiveD schedules (pods of affinity groups) and what it remembers about groups.

A pod names its VC, priority, device type and count, and the affinity group (gang) it belongs
to with every member's shape; the whole group is placed at once when its first pod arrives, and
later pods of the group just take their share. These types carry that, plus the answer to one
scheduling call, in plain data that the replayer, the policy and the simulator all share.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from services.scheduler.core.hived.priorities import MAX_GUARANTEED_PRIORITY, OPPORTUNISTIC_PRIORITY

GROUP_ALLOCATED = "Allocated"
GROUP_PREEMPTING = "Preempting"
GROUP_BEING_PREEMPTED = "BeingPreempted"

# OpenPAI's job priority classes and the numbers HiveD sees for them.
PRIORITY_CLASSES: dict[str, int] = {"crit": 1000, "prod": 100, "test": 0, "oppo": OPPORTUNISTIC_PRIORITY}


class HivedUserError(ValueError):
    """The request can never be scheduled as written (the original answers HTTP 400)."""


@dataclass(frozen=True)
class PodSpec:
    """One pod's scheduling request, in HiveD's pod-scheduling-spec terms."""

    name: str
    virtual_cluster: str
    priority: int
    leaf_cell_number: int
    group_name: str
    members: tuple[tuple[int, int], ...]  # (podNumber, leafCellNumber)
    leaf_cell_type: str = ""
    pinned_cell_id: str = ""
    lazy_preemption: bool = True
    ignore_suggested_nodes: bool = True

    @staticmethod
    def from_dict(name: str, raw: dict[str, Any]) -> PodSpec:
        """Read HiveD's pod-scheduling-spec fields; raises HivedUserError naming a bad field."""
        try:
            group = raw.get("affinityGroup") or {}
            leaf_num = int(raw.get("leafCellNumber", raw.get("gpuNumber", 0)))
            members = tuple(
                (int(m["podNumber"]), int(m.get("leafCellNumber", m.get("gpuNumber", 0))))
                for m in group.get("members") or []
            )
            priority = raw.get("priority", 0)
            if isinstance(priority, str):
                if priority not in PRIORITY_CLASSES:
                    raise HivedUserError(
                        f"priority: unknown class {priority!r}; use one of {sorted(PRIORITY_CLASSES)}"
                    )
                priority = PRIORITY_CLASSES[priority]
            spec = PodSpec(
                name=name,
                virtual_cluster=str(raw.get("virtualCluster", "")),
                priority=int(priority),
                leaf_cell_number=leaf_num,
                group_name=str(group.get("name") or f"{name}-group"),
                members=members or ((1, leaf_num),),
                leaf_cell_type=str(raw.get("leafCellType", raw.get("gpuType", "")) or ""),
                pinned_cell_id=str(raw.get("pinnedCellId", "") or ""),
                lazy_preemption=bool(raw.get("lazyPreemptionEnable", True)),
                ignore_suggested_nodes=bool(raw.get("ignoreK8sSuggestedNodes", True)),
            )
        except (KeyError, TypeError, ValueError) as err:
            if isinstance(err, HivedUserError):
                raise
            raise HivedUserError(f"pod {name}: malformed scheduling spec ({err}); check its fields") from err
        spec.validate()
        return spec

    def validate(self) -> None:
        if not self.virtual_cluster:
            raise HivedUserError(f"pod {self.name}: virtualCluster is empty; name the VC to run in")
        if self.priority < OPPORTUNISTIC_PRIORITY:
            raise HivedUserError(f"pod {self.name}: priority is less than {OPPORTUNISTIC_PRIORITY}")
        if self.priority > MAX_GUARANTEED_PRIORITY:
            raise HivedUserError(f"pod {self.name}: priority is greater than {MAX_GUARANTEED_PRIORITY}")
        if self.leaf_cell_number < 0:
            raise HivedUserError(f"pod {self.name}: leafCellNumber must not be negative")
        if not any(num == self.leaf_cell_number for _, num in self.members):
            raise HivedUserError(
                f"pod {self.name}: affinityGroup.members has no member with leafCellNumber "
                f"{self.leaf_cell_number}; add this pod's shape to the group"
            )

    def pod_nums(self) -> dict[int, int]:
        nums: dict[int, int] = {}
        for count, leaves in self.members:
            nums[leaves] = nums.get(leaves, 0) + count
        return nums


@dataclass(frozen=True)
class PodPlacementInfo:
    node: str
    leaf_indices: tuple[int, ...]
    preassigned_types: tuple[str, ...] | None


@dataclass(frozen=True)
class BindInfo:
    """Where one pod goes, plus its whole group's placement (kept to re-add pods after restart)."""

    node: str
    leaf_indices: tuple[int, ...]
    chain: str
    group: tuple[tuple[int, tuple[PodPlacementInfo, ...]], ...]


@dataclass(frozen=True)
class ScheduleResult:
    kind: str  # "bind" | "preempt" | "wait"
    node: str = ""
    leaf_cells: tuple[int, ...] = ()
    victims: tuple[str, ...] = ()
    reason: str = ""
    bind_info: BindInfo | None = None
    victim_nodes: dict[str, tuple[str, ...]] = field(default_factory=dict)


class AffinityGroup:
    """A gang as HiveD tracks it once it holds (or is about to hold) cells."""

    def __init__(self, spec: PodSpec, state: str) -> None:
        self.name = spec.group_name
        self.vc = spec.virtual_cluster
        self.lazy_preemption = spec.lazy_preemption
        self.ignore_suggested = spec.ignore_suggested_nodes
        self.priority = spec.priority
        self.state = state
        self.total_pod_nums = spec.pod_nums()
        self.allocated_pods: dict[int, list[tuple[str, str] | None]] = {
            n: [None] * c for n, c in self.total_pod_nums.items()
        }
        self.preempting_pods: set[str] = set()
        self.physical: dict[int, list[list[Any]]] = {
            n: [[None] * n for _ in range(c)] for n, c in self.total_pod_nums.items()
        }
        self.virtual: dict[int, list[list[Any]]] | None = {
            n: [[None] * n for _ in range(c)] for n, c in self.total_pod_nums.items()
        }
        self.lazy_preempted_by: str | None = None
        self.bind_infos: dict[str, BindInfo] = {}

    def all_released(self) -> bool:
        return all(p is None for pods in self.allocated_pods.values() for p in pods)

    def pod_names(self) -> list[tuple[str, str]]:
        return [p for pods in self.allocated_pods.values() for p in pods if p is not None]
