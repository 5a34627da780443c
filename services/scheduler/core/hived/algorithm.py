"""The HiveD algorithm: schedule, add and delete pods of affinity groups over VC cells.

A new group is placed inside its VC's virtual cells by the topology-aware scheduler, then
mapped onto physical cells by buddy allocation; opportunistic groups (priority -1) are packed
onto the physical cluster directly, away from guaranteed work. A placement that needs cells of
lower-priority groups either lazily preempts them (they keep running, demoted to opportunistic)
or creates a preempting group that reserves the cells until the victims are gone, so two
preemptors never fight over the same cells. Groups are always preempted whole.
"""

from __future__ import annotations

from services.scheduler.core.hived.allocation import (
    Placement,
    binding_paths,
    map_virtual_to_physical,
)
from services.scheduler.core.hived.cells import PhysicalCell, shallow_copy
from services.scheduler.core.hived.config import ParsedConfig
from services.scheduler.core.hived.groups import (
    GROUP_ALLOCATED,
    AffinityGroup,
    BindInfo,
    HivedUserError,
    PodPlacementInfo,
    PodSpec,
    ScheduleResult,
)
from services.scheduler.core.hived.groups_state import HivedGroups, Victims, collect_victims
from services.scheduler.core.hived.priorities import MIN_GUARANTEED_PRIORITY, OPPORTUNISTIC_PRIORITY

PREEMPTING_PHASE = "Preempting"
FILTERING_PHASE = "Filtering"


class HivedAlgorithm(HivedGroups):
    """One scheduler instance over one config. Not thread-safe: callers serialise calls."""

    def __init__(self, cfg: ParsedConfig, bad_nodes: set[str] | None = None) -> None:
        super().__init__(cfg)
        self.groups: dict[str, AffinityGroup] = {}
        # Like the original, every configured node starts bad and is then reported healthy,
        # which settles the free lists in the same order the original ends up with.
        nodes = self.all_nodes()
        for node in nodes:
            self.set_bad_node(node)
        for node in nodes:
            if not bad_nodes or node not in bad_nodes:
                self.set_healthy_node(node)

    def all_nodes(self) -> list[str]:
        return list(self.node_leaves)

    # -- scheduling ------------------------------------------------------------------------------

    def schedule(
        self, spec: PodSpec, suggested: set[str] | None = None, phase: str = PREEMPTING_PHASE
    ) -> ScheduleResult:
        """Decide for one pod: bind, preempt (with victims) or wait (with a reason)."""
        spec.validate()
        physical: Placement | None = None
        virtual: Placement | None = None
        victims: Victims = {}
        reason = ""
        pod_index = 0
        if (g := self.groups.get(spec.group_name)) is not None:
            physical, virtual, victims, pod_index = self._from_existing(g, spec, suggested, phase)
        if spec.group_name not in self.groups:
            physical, virtual, victims, reason = self._from_new(spec, suggested, phase)
        if physical is None:
            return ScheduleResult("wait", reason=reason)
        if victims:
            names = sorted({pod for pods in victims.values() for pod, _ in pods})
            per_node = {n: tuple(sorted(p for p, _ in pods)) for n, pods in sorted(victims.items())}
            return ScheduleResult("preempt", victims=tuple(names), victim_nodes=per_node)
        info = self._bind_info(physical, virtual, spec.leaf_cell_number, pod_index)
        return ScheduleResult("bind", node=info.node, leaf_cells=info.leaf_indices, bind_info=info)

    def _from_existing(
        self, g: AffinityGroup, spec: PodSpec, suggested: set[str] | None, phase: str
    ) -> tuple[Placement | None, Placement | None, Victims, int]:
        bad_or_elsewhere = {
            leaf.nodes[0]
            for pods in g.physical.values()
            for pod in pods
            for leaf in pod
            if leaf is not None
            and (
                not leaf.healthy
                or (not g.ignore_suggested and suggested is not None and leaf.nodes[0] not in suggested)
            )
        }
        if g.state == GROUP_ALLOCATED:
            slots = g.allocated_pods.get(spec.leaf_cell_number)
            free_slots = [i for i, p in enumerate(slots or []) if p is None]
            if not free_slots:
                raise HivedUserError(
                    f"pod {spec.name}: group {g.name} already runs all its pods with "
                    f"{spec.leaf_cell_number} devices; add a member to the affinity group"
                )
            return g.physical, g.virtual, {}, free_slots[0]
        if phase == PREEMPTING_PHASE and bad_or_elsewhere:
            # The reserved cells are no longer all usable: give them up and schedule again.
            self._delete_preempting_group(g)
            return None, None, {}, 0
        victims, _ = collect_victims(g.physical)
        g.preempting_pods.add(spec.name)
        return g.physical, g.virtual, victims, 0

    def _from_new(
        self, spec: PodSpec, suggested: set[str] | None, phase: str
    ) -> tuple[Placement | None, Placement | None, Victims, str]:
        physical, virtual, reason = self._schedule_new_group(spec, suggested)
        if physical is None:
            return None, None, {}, reason
        victims, overlapping = collect_victims(physical)
        if phase == PREEMPTING_PHASE:
            for preemptor in overlapping:
                if preemptor.name in self.groups:
                    self._delete_preempting_group(preemptor)
            if victims:
                self._create_preempting_group(spec, physical, virtual)
        return physical, virtual, victims, reason

    def _schedule_new_group(
        self, spec: PodSpec, suggested: set[str] | None
    ) -> tuple[Placement | None, Placement | None, str]:
        vc = spec.virtual_cluster
        if vc not in self.vc_schedulers:
            raise HivedUserError(
                f"pod {spec.name}: VC {vc} does not exist; use one of {sorted(self.vc_schedulers)}"
            )
        if spec.pinned_cell_id:
            if spec.pinned_cell_id not in self.pinned_schedulers[vc]:
                raise HivedUserError(
                    f"pod {spec.name}: VC {vc} does not have pinned cell {spec.pinned_cell_id}"
                )
            if spec.priority == OPPORTUNISTIC_PRIORITY:
                raise HivedUserError(
                    f"pod {spec.name}: opportunistic pods cannot use pinned cell {spec.pinned_cell_id}"
                )
            chain = self.cfg.vc_pinned_physical[vc][spec.pinned_cell_id].chain
            return self._process(spec, chain, suggested)
        if spec.leaf_cell_type:
            if spec.leaf_cell_type not in self.cfg.leaf_type_chains:
                raise HivedUserError(
                    f"pod {spec.name}: leaf cell type {spec.leaf_cell_type} does not exist in the cluster; "
                    f"use one of {sorted(self.cfg.leaf_type_chains)}"
                )
            return self._schedule_for_type(spec, spec.leaf_cell_type, suggested, True)
        reason = ""
        for leaf_type in self.cfg.leaf_type_chains:
            physical, virtual, why = self._schedule_for_type(spec, leaf_type, suggested, False)
            if physical is not None:
                return physical, virtual, ""
            reason = why or reason
        return None, None, reason

    def _schedule_for_type(
        self, spec: PodSpec, leaf_type: str, suggested: set[str] | None, specified: bool
    ) -> tuple[Placement | None, Placement | None, str]:
        has_type = False
        reason = ""
        for chain in self.cfg.leaf_type_chains[leaf_type]:
            if (
                spec.priority < MIN_GUARANTEED_PRIORITY
                or chain in self.cfg.vc_preassigned[spec.virtual_cluster]
            ):
                has_type = True
                physical, virtual, reason = self._process(spec, chain, suggested)
                if physical is not None:
                    return physical, virtual, ""
        if specified and spec.priority >= MIN_GUARANTEED_PRIORITY and not has_type:
            raise HivedUserError(
                f"pod {spec.name}: requests leaf cell type {leaf_type} "
                f"which VC {spec.virtual_cluster} does not have"
            )
        return None, None, reason

    def _process(
        self, spec: PodSpec, chain: str, suggested: set[str] | None
    ) -> tuple[Placement | None, Placement | None, str]:
        if spec.priority >= MIN_GUARANTEED_PRIORITY:
            return self._schedule_guaranteed(spec, chain, suggested)
        placement, reason = self.opportunistic[chain].schedule(
            spec.pod_nums(), OPPORTUNISTIC_PRIORITY, suggested, spec.ignore_suggested_nodes
        )
        if placement is None:
            return None, None, f"{reason} when scheduling in physical cluster"
        return placement, None, ""

    def _schedule_guaranteed(
        self, spec: PodSpec, chain: str, suggested: set[str] | None
    ) -> tuple[Placement | None, Placement | None, str]:
        vc = spec.virtual_cluster
        if spec.pinned_cell_id:
            scheduler = self.pinned_schedulers[vc].get(spec.pinned_cell_id)
        else:
            scheduler = self.vc_schedulers[vc].get(chain)
        virtual, reason = (None, "insufficient capacity")
        if scheduler is not None:
            virtual, reason = scheduler.schedule(
                spec.pod_nums(), spec.priority, suggested, spec.ignore_suggested_nodes
            )
        if virtual is None:
            return None, None, f"{reason} when scheduling in VC {vc}"
        leaf_nums = sorted(virtual)
        lazy = self._try_lazy_preempt(virtual, leaf_nums, spec.group_name)
        bindings: dict[str, PhysicalCell] = {}
        preassigned, non_preassigned = binding_paths(virtual, leaf_nums, bindings)
        free = shallow_copy(self.free.get(chain, {}))
        free_num = dict(self.all_vc_free.get(chain, {}))
        if map_virtual_to_physical(
            preassigned, non_preassigned, free, free_num, suggested, spec.ignore_suggested_nodes, bindings
        ):
            physical = {
                n: [[bindings[leaf.address] for leaf in pod] for pod in virtual[n]] for n in leaf_nums
            }
            return physical, virtual, ""
        for name, placement in lazy.items():
            self._revert_lazy_preempt(self.groups[name], placement)
        shown = {
            pod[0].preassigned.address: [leaf.address for leaf in pod]
            for n in leaf_nums
            for pod in virtual[n]
        }
        return (
            None,
            None,
            (
                "Mapping the virtual placement would need to use at least one bad or non-suggested node "
                f"(virtual placement : {shown})"
            ),
        )

    def _bind_info(
        self, physical: Placement, virtual: Placement | None, leaf_num: int, pod_index: int
    ) -> BindInfo:
        members: list[tuple[int, tuple[PodPlacementInfo, ...]]] = []
        for num in sorted(physical):
            pods: list[PodPlacementInfo] = []
            for i, pod in enumerate(physical[num]):
                node = next((leaf.nodes[0] for leaf in pod if leaf is not None), "")
                types: list[str] = []
                for j, _ in enumerate(pod):
                    v = virtual[num][i][j] if virtual is not None else None
                    types.append(self.cfg.level_types[v.chain][v.preassigned.level] if v is not None else "")
                indices = tuple(leaf.leaf_indices[0] if leaf is not None else -1 for leaf in pod)
                pods.append(PodPlacementInfo(node, indices, tuple(types)))
            members.append((num, tuple(pods)))
        mine = dict(members)[leaf_num][pod_index]
        first = physical[leaf_num][pod_index][0] if physical[leaf_num][pod_index] else None
        return BindInfo(
            mine.node, mine.leaf_indices, first.chain if first is not None else "", tuple(members)
        )
