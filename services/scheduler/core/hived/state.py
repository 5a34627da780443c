"""HiveD's cluster-wide bookkeeping: free lists, VC quota counts, bad and doomed cells.

The counts here are what make the VC guarantee checkable: for every chain and level, how many
cells each VC may still claim, how many the cluster can still hand out, and which free cells
sit on bad nodes. When bad nodes leave fewer healthy cells than a VC is owed, some of that VC's
free cells are marked "doomed bad" so its own scheduler stops counting on them.
"""

from __future__ import annotations

from typing import Any

from services.scheduler.core.hived.cells import (
    CellList,
    ChainCellList,
    PhysicalCell,
    VirtualCell,
    bind,
    in_free_list,
    remove_from,
    set_priority,
    unbind,
    unbound_virtual,
    update_used,
)
from services.scheduler.core.hived.config import HivedConfigError, ParsedConfig
from services.scheduler.core.hived.priorities import MIN_GUARANTEED_PRIORITY, OPPORTUNISTIC_PRIORITY
from services.scheduler.core.hived.topology import TopologyAwareScheduler


class HivedState:
    """Cells and counts of one scheduler instance; the algorithm builds on it."""

    def __init__(self, cfg: ParsedConfig) -> None:
        self.cfg = cfg
        self.full = cfg.full_cells
        self.free = cfg.free_cells
        self.vc_free_num = cfg.vc_free_cell_num
        self.all_vc_free: dict[str, dict[int, int]] = {}
        self.total_left: dict[str, dict[int, int]] = {}
        self.bad_free: dict[str, ChainCellList] = {}
        self.vc_doomed: dict[str, dict[str, ChainCellList]] = {}
        self.all_vc_doomed: dict[str, dict[int, int]] = {}
        self.bad_nodes: set[str] = set()
        self.unhealthy_cells = 0  # physical cells whose healthy flag is off

        def all_healthy() -> bool:
            return self.unhealthy_cells == 0

        self.vc_schedulers: dict[str, dict[str, TopologyAwareScheduler]] = {}
        self.pinned_schedulers: dict[str, dict[str, TopologyAwareScheduler]] = {}
        for vc in cfg.vc_names:
            self.vc_schedulers[vc] = {
                chain: TopologyAwareScheduler(ccl, cfg.level_leaf_num[chain], True, all_healthy)
                for chain, ccl in cfg.vc_full[vc].items()
            }
            self.pinned_schedulers[vc] = {
                pid: TopologyAwareScheduler(ccl, cfg.level_leaf_num[ccl[1][0].chain], True, all_healthy)
                for pid, ccl in cfg.vc_pinned[vc].items()
            }
        self.opportunistic = {
            chain: TopologyAwareScheduler(ccl, cfg.level_leaf_num[chain], False, all_healthy)
            for chain, ccl in self.full.items()
        }
        # Leaves by node, so health changes and re-added pods find their cells without a scan.
        self.node_leaves: dict[str, list[PhysicalCell]] = {}
        for ccl in self.full.values():
            for leaf in ccl[1]:
                self.node_leaves.setdefault(leaf.nodes[0], []).append(leaf)
        self._init_counts()
        for vc in cfg.vc_names:
            for pid, physical in cfg.vc_pinned_physical[vc].items():
                self.allocate_preassigned(physical, vc)
                virtual_list = cfg.vc_pinned[vc][pid]
                bind(physical, virtual_list[max(virtual_list)][0])

    def _init_counts(self) -> None:
        for vc, per_chain in self.vc_free_num.items():
            self.vc_doomed[vc] = {}
            for chain, per_level in per_chain.items():
                self.vc_doomed[vc][chain] = {}
                totals = self.all_vc_free.setdefault(chain, {})
                for level, num in per_level.items():
                    totals[level] = totals.get(level, 0) + num
        for chain, needed in self.all_vc_free.items():
            ccl = self.full[chain]
            top = len(ccl)
            available = len(ccl[top])
            self.total_left[chain] = {top: available}
            self.bad_free[chain] = {level: CellList() for level in range(1, top + 1)}
            self.all_vc_doomed[chain] = {}
            for level in range(top, 0, -1):
                left = available - needed.get(level, 0)
                if left < 0:
                    raise HivedConfigError(
                        f"virtualClusters: the VCs ask for {needed.get(level, 0)} cells of type "
                        f"{self.cfg.level_types[chain][level]} (chain {chain}, level {level}) but only "
                        f"{available} remain in physicalCells; reduce cellNumber or add cells"
                    )
                if level > 1:
                    children = len(ccl[level][0].children)
                    available = left * children
                    self.total_left[chain][level - 1] = self.total_left[chain][level] * children
        for vc in self.vc_doomed:
            for chain in self.full:
                self.vc_doomed[vc].setdefault(chain, {})

    def _doomed_list(self, vc: str, chain: str, level: int) -> list[Any]:
        try:
            return self.vc_doomed[vc][chain][level]
        except KeyError:
            return self.vc_doomed[vc].setdefault(chain, {}).setdefault(level, CellList())

    def _bad_free_list(self, chain: str, level: int) -> list[Any]:
        try:
            return self.bad_free[chain][level]
        except KeyError:
            return self.bad_free.setdefault(chain, {}).setdefault(level, CellList())

    # -- node health ---------------------------------------------------------------------------

    def set_bad_node(self, node: str) -> None:
        if node in self.bad_nodes:
            return
        self.bad_nodes.add(node)
        for leaf in self.node_leaves.get(node, []):
            self._set_bad_cell(leaf)

    def set_healthy_node(self, node: str) -> None:
        if node not in self.bad_nodes:
            return
        self.bad_nodes.discard(node)
        for leaf in self.node_leaves.get(node, []):
            self._set_healthy_cell(leaf)

    def _set_bad_cell(self, c: PhysicalCell) -> None:
        if not c.healthy:
            return
        c.healthy = False
        self.unhealthy_cells += 1
        if c.parent is not None:
            self._set_bad_cell(c.parent)
        if in_free_list(c):
            self._add_bad_free(c)
        elif c.virtual is None and not c.split and c.parent is not None and c.parent.virtual is not None:
            # An ancestor is bound: bind this cell too so the VC's scheduler sees it as bad.
            vc = unbound_virtual(c.parent.virtual.children)
            if vc is not None:
                c.virtual, vc.physical = vc, c

    def _set_healthy_cell(self, c: PhysicalCell) -> None:
        if c.healthy:
            return
        c.healthy = True
        self.unhealthy_cells -= 1
        if in_free_list(c):
            self._remove_bad_free(c)
        elif (vc := c.virtual) is not None and vc.parent is None and c.priority >= MIN_GUARANTEED_PRIORITY:
            # A doomed cell that got real work is an ordinary allocation once healthy again.
            doomed = self._doomed_list(vc.vc, c.chain, c.level)
            if c in doomed:
                remove_from(doomed, c)
                self.all_vc_doomed[c.chain][c.level] -= 1
        elif (vc := c.virtual) is not None and not c.pinned and c.priority < MIN_GUARANTEED_PRIORITY:
            # The binding existed only because the cell was bad and nothing runs there.
            c.virtual, vc.physical = None, None
            if vc.parent is None:
                remove_from(self._doomed_list(vc.vc, c.chain, c.level), c)
                self.all_vc_doomed[c.chain][c.level] -= 1
                self.release_preassigned(c, vc.vc)
        if c.parent is not None and all(b.healthy for b in c.parent.children):
            self._set_healthy_cell(c.parent)

    def _healthy_left(self, chain: str, level: int) -> int:
        return self.total_left[chain].get(level, 0) - len(self._bad_free_list(chain, level))

    def _add_bad_free(self, c: PhysicalCell) -> None:
        self._bad_free_list(c.chain, c.level).append(c)
        if self.all_vc_free.get(c.chain, {}).get(c.level, 0) > self._healthy_left(c.chain, c.level):
            self._try_bind_doomed(c.chain, c.level)

    def _remove_bad_free(self, c: PhysicalCell) -> None:
        remove_from(self._bad_free_list(c.chain, c.level), c)
        self._try_unbind_doomed(c.chain, c.level)

    def _try_bind_doomed(self, chain: str, level: int) -> None:
        for vc, per_chain in self.vc_free_num.items():
            if chain not in per_chain:
                continue
            while per_chain[chain].get(level, 0) > self._healthy_left(chain, level):
                vcell = unbound_virtual(self.cfg.vc_preassigned[vc].get(chain, {}).get(level, []))
                if vcell is None or not self._bad_free_list(chain, level):
                    break
                pc = self._bad_free_list(chain, level)[0]
                pc.virtual, vcell.physical = vcell, pc
                self._doomed_list(vc, chain, level).append(pc)
                doomed = self.all_vc_doomed.setdefault(chain, {})
                doomed[level] = doomed.get(level, 0) + 1
                self.allocate_preassigned(pc, vc)

    def _try_unbind_doomed(self, chain: str, level: int) -> None:
        for vc, per_chain in self.vc_free_num.items():
            if chain not in per_chain:
                continue
            doomed = self._doomed_list(vc, chain, level)
            while doomed and per_chain[chain].get(level, 0) < self._healthy_left(chain, level):
                pc = doomed[0]
                if pc.virtual is not None:
                    pc.virtual.physical = None
                    pc.virtual = None
                remove_from(doomed, pc)
                self.all_vc_doomed[chain][level] -= 1
                self.release_preassigned(pc, vc)

    # -- preassigned cells and the free list ---------------------------------------------------

    def allocate_preassigned(self, c: PhysicalCell, vc: str) -> tuple[bool, str]:
        chain, level = c.chain, c.level
        safe, reason = True, ""
        self.vc_free_num[vc][chain][level] -= 1
        self.all_vc_free[chain][level] -= 1
        self.total_left[chain][level] -= 1
        split_up_to = self._remove_from_free(c)
        parent = c.parent
        for lvl in range(level + 1, split_up_to + 1):
            self.total_left[chain][lvl] -= 1
            if self.total_left[chain][lvl] < self.all_vc_free[chain].get(lvl, 0):
                safe, reason = False, self._unsafe(chain, lvl)
            if not parent.healthy:
                bad = self._bad_free_list(chain, lvl)
                if parent in bad:
                    remove_from(bad, parent)
            else:
                self._try_bind_doomed(chain, lvl)
            parent = parent.parent
        if not c.healthy:
            self._allocate_bad(c)
        else:
            self._try_bind_doomed(chain, level)
        reduce = len(c.children)
        for lvl in range(level - 1, 0, -1):
            self.total_left[chain][lvl] -= reduce
            if self.total_left[chain][lvl] < self.all_vc_free[chain].get(lvl, 0):
                safe, reason = False, self._unsafe(chain, lvl)
            self._try_bind_doomed(chain, lvl)
            reduce *= len(self.full[chain][lvl][0].children)
        return safe, reason

    def _unsafe(self, chain: str, level: int) -> str:
        return (
            f"adding the pod would break VC safety: cell type {self.cfg.level_types[chain][level]} has "
            f"{self.total_left[chain][level]} left but the VCs are owed "
            f"{self.all_vc_free[chain].get(level, 0)}"
        )

    def _allocate_bad(self, c: PhysicalCell) -> None:
        bad = self._bad_free_list(c.chain, c.level)
        if c in bad:
            remove_from(bad, c)
        if c.virtual is None and c.parent is not None and c.parent.virtual is not None:
            vc = unbound_virtual(c.parent.virtual.children)
            if vc is not None:
                c.virtual, vc.physical = vc, c
        for child in c.children:
            if not child.healthy:
                self._allocate_bad(child)

    def release_preassigned(self, c: PhysicalCell, vc: str) -> None:
        chain, level = c.chain, c.level
        self.vc_free_num[vc][chain][level] += 1
        self.all_vc_free[chain][level] += 1
        self.total_left[chain][level] += 1
        merge_up_to = self._add_to_free(c)
        parent = c.parent
        for lvl in range(level + 1, merge_up_to + 1):
            self.total_left[chain][lvl] += 1
            if not parent.healthy:
                self._bad_free_list(chain, lvl).append(parent)
            else:
                self._try_unbind_doomed(chain, lvl)
            parent = parent.parent
        if not c.healthy:
            self._release_bad(c)
        else:
            self._try_unbind_doomed(chain, level)
        add = len(c.children)
        for lvl in range(level - 1, 0, -1):
            self.total_left[chain][lvl] += add
            self._try_unbind_doomed(chain, lvl)
            add *= len(self.full[chain][lvl][0].children)

    def _release_bad(self, c: PhysicalCell, top: bool = True) -> None:
        if (vc := c.virtual) is not None:
            c.virtual, vc.physical = None, None
        if not top:
            self._bad_free_list(c.chain, c.level).append(c)
        for child in c.children:
            if not child.healthy:
                self._release_bad(child, False)
        if top:
            # A bad cell coming back to the free list may leave a VC short of healthy cells again,
            # so it can be doomed at once (a released cell on a bad node stays bad for its VC).
            self._add_bad_free(c)

    def _remove_from_free(self, c: PhysicalCell) -> int:
        free = self.free[c.chain]
        while True:
            parent = c.parent
            terminate = parent is None or parent.split
            if parent is not None and not parent.split:
                free[c.level].extend(parent.children)
                parent.split = True
            remove_from(free[c.level], c)
            if terminate:
                return c.level
            c = parent

    def _add_to_free(self, c: PhysicalCell) -> int:
        free = self.free[c.chain]
        while True:
            parent = c.parent
            if parent is not None and all(b is c or b in free[c.level] for b in parent.children):
                for b in parent.children:
                    if b is not c:
                        remove_from(free[c.level], b)
                parent.split = False
                c = parent
                continue
            free[c.level].append(c)
            return c.level

    # -- one leaf cell ---------------------------------------------------------------------------

    def allocate_leaf(
        self, p: PhysicalCell, v: VirtualCell | None, priority: int, vc: str
    ) -> tuple[bool, str]:
        if v is None:
            set_priority(p, OPPORTUNISTIC_PRIORITY)
            update_used(p, OPPORTUNISTIC_PRIORITY, True)
            return True, ""
        set_priority(v, priority)
        update_used(v, priority, True)
        set_priority(p, priority)
        update_used(p, priority, True)
        preassigned = v.preassigned
        newly_bound = preassigned.physical is None
        if p.virtual is None:
            bind(p, v)
        if newly_bound and preassigned.physical is not None:
            return self.allocate_preassigned(preassigned.physical, vc)
        return True, ""

    def release_leaf(self, p: PhysicalCell, vc: str) -> None:
        v = p.virtual
        # A binding left by a bad node is not a VC allocation: only a used virtual cell is one.
        if v is not None and v.priority >= MIN_GUARANTEED_PRIORITY:
            vc = v.vc
            update_used(v, v.priority, False)
            set_priority(v, -2)
            preassigned_physical = v.preassigned.physical
            if p.healthy:
                unbind(p)
            if (
                preassigned_physical is not None
                and not preassigned_physical.pinned
                and v.preassigned.priority < MIN_GUARANTEED_PRIORITY
                and preassigned_physical
                not in self._doomed_list(vc, preassigned_physical.chain, preassigned_physical.level)
            ):
                self.release_preassigned(preassigned_physical, vc)
        update_used(p, p.priority, False)
        set_priority(p, -2)
