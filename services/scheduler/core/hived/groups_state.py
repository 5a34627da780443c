"""Affinity groups that hold cells: preemption (lazy or reserving) and pods added or deleted.

Two ways a group gives cells up: lazily, by leaving its VC and running on as opportunistic work
(nothing is killed unless the cells are really needed), or by being preempted, when the
preemptor reserves the cells at once so no other group can race for them. Pods are added when
bound (or re-added after a restart, possibly under a new config, where a pod whose cells no
longer fit its VC keeps running demoted rather than being killed) and deleted when they end.
"""

from __future__ import annotations

from services.scheduler.core.hived.allocation import Placement, map_physical_to_virtual
from services.scheduler.core.hived.cells import (
    CELL_FREE,
    CELL_RESERVED,
    CELL_RESERVING,
    CELL_USED,
    PhysicalCell,
    VirtualCell,
    set_state,
)
from services.scheduler.core.hived.groups import (
    GROUP_ALLOCATED,
    GROUP_BEING_PREEMPTED,
    GROUP_PREEMPTING,
    AffinityGroup,
    BindInfo,
    PodPlacementInfo,
    PodSpec,
)
from services.scheduler.core.hived.priorities import OPPORTUNISTIC_PRIORITY
from services.scheduler.core.hived.state import HivedState

Victims = dict[str, set[tuple[str, str]]]


class HivedGroups(HivedState):
    """Group lifecycle on top of the cell bookkeeping."""

    groups: dict[str, AffinityGroup]

    # -- preemption --------------------------------------------------------------------------------

    def _try_lazy_preempt(
        self, virtual: Placement, leaf_nums: list[int], preemptor: str
    ) -> dict[str, Placement]:
        preempted: dict[str, Placement] = {}
        for num in leaf_nums:
            for pod in virtual[num]:
                for leaf in pod:
                    p = leaf.physical
                    if p is not None and p.state == CELL_USED and p.using_group is not None:
                        g = p.using_group
                        if g.lazy_preemption and g.virtual is not None:
                            preempted[g.name] = self._lazy_preempt(g, preemptor)
        return preempted

    def _lazy_preempt(self, victim: AffinityGroup, preemptor: str) -> Placement:
        original = victim.virtual
        assert original is not None
        for pods in original.values():
            for pod in pods:
                for v in pod:
                    if v is not None and v.physical is not None:
                        p = v.physical
                        self.release_leaf(p, victim.vc)
                        self.allocate_leaf(p, None, OPPORTUNISTIC_PRIORITY, victim.vc)
        victim.virtual = None
        victim.lazy_preempted_by = preemptor
        return original

    def _revert_lazy_preempt(self, g: AffinityGroup, virtual: Placement) -> None:
        for num, pods in g.physical.items():
            for i, pod in enumerate(pods):
                for j, p in enumerate(pod):
                    if p is not None:
                        self.release_leaf(p, g.vc)
                        self.allocate_leaf(p, virtual[num][i][j], g.priority, g.vc)
        g.virtual = virtual
        g.lazy_preempted_by = None

    def _create_preempting_group(self, spec: PodSpec, physical: Placement, virtual: Placement | None) -> None:
        g = AffinityGroup(spec, GROUP_PREEMPTING)
        g.physical, g.virtual = physical, virtual
        for num, pods in physical.items():
            for i, pod in enumerate(pods):
                for j, p in enumerate(pod):
                    if p.state == CELL_USED and p.using_group is not None:
                        self.release_leaf(p, p.using_group.vc)
                        p.using_group.state = GROUP_BEING_PREEMPTED
                    self.allocate_leaf(p, virtual[num][i][j] if virtual else None, spec.priority, g.vc)
                    p.reserving_group = g
                    set_state(p, CELL_RESERVING if p.state == CELL_USED else CELL_RESERVED)
        g.preempting_pods.add(spec.name)
        self.groups[g.name] = g

    def _delete_preempting_group(self, g: AffinityGroup) -> None:
        """Cancel a preemption: reserved cells go free, cells still in use go back to their group.

        A victim none of whose cells another preemptor still reserves is an ordinary allocated
        group again: here a preemption can be cancelled before its victims were ever told to stop
        (a gang whose later member must wait gives up every reservation it made).
        """
        victims: dict[str, AffinityGroup] = {}
        for pods in g.physical.values():
            for pod in pods:
                for p in pod:
                    self.release_leaf(p, g.vc)
                    p.reserving_group = None
                    if p.state == CELL_RESERVING:
                        set_state(p, CELL_USED)
                        victim = p.using_group
                        assert victim is not None
                        v = _virtual_of(victim, p) if victim.virtual is not None else None
                        self.allocate_leaf(p, v, victim.priority, victim.vc)
                        victims[victim.name] = victim
                    else:
                        set_state(p, CELL_FREE)
        self.groups.pop(g.name, None)
        for victim in victims.values():
            if victim.state == GROUP_BEING_PREEMPTED and not any(
                p is not None and p.state == CELL_RESERVING
                for pods in victim.physical.values()
                for pod in pods
                for p in pod
            ):
                victim.state = GROUP_ALLOCATED

    # -- pods that exist ---------------------------------------------------------------------------

    def add_allocated_pod(self, spec: PodSpec, info: BindInfo) -> None:
        """Record a pod that was bound (or that runs already, after a restart)."""
        g = self.groups.get(spec.group_name)
        if g is not None and g.state == GROUP_PREEMPTING:
            for pods in g.physical.values():
                for pod in pods:
                    for p in pod:
                        p.reserving_group = None
                        p.using_group = g
                        set_state(p, CELL_USED)
            g.state = GROUP_ALLOCATED
            g.preempting_pods = set()
        elif g is None:
            self._create_allocated_group(spec, info)
        g = self.groups[spec.group_name]
        index = _pod_index(info, spec.leaf_cell_number)
        if index >= 0:
            g.allocated_pods[spec.leaf_cell_number][index] = (spec.name, info.node)
            g.bind_infos[spec.name] = info

    def delete_allocated_pod(self, spec: PodSpec, info: BindInfo) -> None:
        g = self.groups.get(spec.group_name)
        index = _pod_index(info, spec.leaf_cell_number)
        if g is None or index < 0 or spec.leaf_cell_number not in g.allocated_pods:
            return
        g.allocated_pods[spec.leaf_cell_number][index] = None
        g.bind_infos.pop(spec.name, None)
        if g.all_released():
            for pods in g.physical.values():
                for pod in pods:
                    for p in pod:
                        if p is None:
                            continue
                        if p.using_group is g:
                            p.using_group = None
                        if p.state == CELL_USED:
                            self.release_leaf(p, g.vc)
                            set_state(p, CELL_FREE)
                        else:
                            set_state(p, CELL_RESERVED)
            del self.groups[g.name]

    def delete_unallocated_pod(self, spec: PodSpec) -> None:
        g = self.groups.get(spec.group_name)
        if g is not None and g.state == GROUP_PREEMPTING:
            g.preempting_pods.discard(spec.name)
            if not g.preempting_pods:
                self._delete_preempting_group(g)

    def _create_allocated_group(self, spec: PodSpec, info: BindInfo) -> None:
        g = AffinityGroup(spec, GROUP_ALLOCATED)
        lazy = False
        for num, placements in info.group:
            if num not in g.physical:
                continue
            for i, pp in enumerate(placements[: len(g.physical[num])]):
                for j in range(len(pp.leaf_indices)):
                    p, v, flag = self._find_allocated_leaf(j, pp, info.chain, lazy, spec, g)
                    if p is None:
                        continue
                    g.physical[num][i][j] = p
                    if flag is None:
                        g.virtual = None
                    elif v is not None:
                        if g.virtual is not None:
                            g.virtual[num][i][j] = v
                        if v.physical is not None and v.physical.using_group is not None:
                            other = v.physical.using_group
                            if other.virtual is not None:
                                self._lazy_preempt(other, g.name)
                    else:
                        lazy = lazy or flag
                    safe, _ = self.allocate_leaf(p, v, spec.priority, g.vc)
                    p.using_group = g
                    set_state(p, CELL_USED)
                    lazy = lazy or not safe
        if lazy and g.virtual is not None:
            for pods in g.virtual.values():
                for pod in pods:
                    for k, v in enumerate(pod):
                        if v is not None and v.physical is None:
                            pod[k] = None
            self._lazy_preempt(g, g.name)
        self.groups[g.name] = g

    def _find_allocated_leaf(
        self, j: int, pp: PodPlacementInfo, chain: str, lazy: bool, spec: PodSpec, g: AffinityGroup
    ) -> tuple[PhysicalCell | None, VirtualCell | None, bool | None]:
        p = self._find_physical_leaf(chain, pp.node, pp.leaf_indices[j])
        if p is None:
            return None, None, False
        if pp.preassigned_types is None:
            return p, None, True
        if g.virtual is None or lazy:
            return p, None, False
        wanted = pp.preassigned_types[j]
        if not wanted:
            return p, None, None
        levels = [lvl for lvl, t in self.cfg.level_types[p.chain].items() if t == wanted]
        vc = spec.virtual_cluster
        if not levels or vc not in self.cfg.vc_preassigned:
            return p, None, True
        if spec.pinned_cell_id:
            vccl = self.cfg.vc_pinned[vc].get(spec.pinned_cell_id)
        else:
            vccl = self.cfg.vc_preassigned[vc].get(p.chain)
        if vccl is None:
            return p, None, True
        v, _ = map_physical_to_virtual(p, vccl, levels[-1], spec.priority)
        return (p, None, True) if v is None else (p, v, False)

    def _find_physical_leaf(self, chain: str, node: str, index: int) -> PhysicalCell | None:
        found = [leaf for leaf in self.node_leaves.get(node, []) if index in leaf.leaf_indices]
        for leaf in found:
            if leaf.chain == chain:
                return leaf
        # After a reconfiguration the device may sit in another chain now.
        return found[0] if found else None


def collect_victims(physical: Placement) -> tuple[Victims, list[AffinityGroup]]:
    victims: Victims = {}
    overlapping: list[AffinityGroup] = []
    for pods in physical.values():
        for pod in pods:
            for p in pod:
                if p is None:
                    continue
                if p.state in (CELL_USED, CELL_RESERVING) and p.using_group is not None:
                    for name, node in p.using_group.pod_names():
                        victims.setdefault(node, set()).add((name, node))
                reserving = p.reserving_group
                if p.state in (CELL_RESERVING, CELL_RESERVED) and reserving and reserving not in overlapping:
                    overlapping.append(reserving)
    return victims, overlapping


def _virtual_of(g: AffinityGroup, p: PhysicalCell) -> VirtualCell | None:
    assert g.virtual is not None
    for num, pods in g.physical.items():
        for i, pod in enumerate(pods):
            for j, cell in enumerate(pod):
                if cell is p:
                    return g.virtual[num][i][j]  # type: ignore[no-any-return]
    return None


def _pod_index(info: BindInfo, leaf_num: int) -> int:
    first = info.leaf_indices[0] if info.leaf_indices else -1
    for num, placements in info.group:
        if num == leaf_num:
            for i, pp in enumerate(placements):
                if pp.node == info.node and first in pp.leaf_indices:
                    return i
    return -1
