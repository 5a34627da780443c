"""Topology-aware packing of a gang onto a set of cells (virtual inside a VC, or physical).

Nodes are sorted so that healthy, suggested, already busy nodes come first (packing keeps big
cells whole), and the gang is placed at the lowest priority first so that preemption is only
used when nothing free fits. Inside a node, devices are chosen with the lowest common ancestor
(best affinity), preferring free devices over ones that would need preemption.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

from services.scheduler.core.hived.cells import ChainCellList, PhysicalCell
from services.scheduler.core.hived.priorities import FREE_PRIORITY, OPPORTUNISTIC_PRIORITY

HIGHEST_LEVEL = 1 << 30
_SAME_SHIFT = 30  # the sort key: not healthy, not suggested, -same, higher, in one int64


def _ancestor_no_higher_than_node(cell: Any) -> Any:
    while not cell.at_or_higher_than_node and cell.parent is not None:
        cell = cell.parent
    return cell


class TopologyAwareScheduler:
    """Places pods of one gang on the cells of one chain (or one pinned cell).

    The view (one entry per node, or per cell below a node that no node-level cell of the view
    covers) is kept as arrays: how many leaves each entry uses at each priority (updated by
    `cells.update_used` as cells are used and released) and the view's order, which every
    decision sorts stably by (not healthy, not suggested, -used at the same priority, used at
    higher ones), ties kept in the previous order, as the original sorts its list of nodes. At
    100,000 GPUs a VC's view has 1,568 nodes and the opportunistic one 12,544: per node Python
    work on each decision cost about 10 ms, the arrays a fraction of one.
    """

    def __init__(
        self,
        ccl: ChainCellList,
        level_leaf_num: dict[int, int],
        cross_priority_pack: bool,
        all_healthy: Callable[[], bool] = lambda: False,
    ) -> None:
        self.level_leaf_num = level_leaf_num
        self.cross_priority_pack = cross_priority_pack
        self._all_healthy = all_healthy
        top = max(ccl) if ccl else 0
        level = 1
        while level <= top and not (ccl[level] and ccl[level][0].at_or_higher_than_node):
            level += 1
        level = min(level, top)
        seen: set[int] = set()
        self.cells: list[Any] = []
        for lvl in range(level, 0, -1):
            for c in ccl.get(lvl, []):
                if id(_ancestor_no_higher_than_node(c)) not in seen:
                    self.cells.append(c)
                    seen.add(id(c))
        n = len(self.cells)
        self.order = np.arange(n, dtype=np.int64)
        self._leaf_num = np.array([c.leaf_num for c in self.cells], dtype=np.int64)
        self._priorities: list[int] = []
        self._used = np.zeros((n, 0), dtype=np.int64)
        for i, c in enumerate(self.cells):
            c.views = [*(c.views or ()), (self, i)]
            for priority, count in c.used_at_priority.items():
                self.used_changed(i, priority, count)
        self._free = self._leaf_num
        self._healthy = np.ones(n, dtype=bool)
        self._suggested = np.ones(n, dtype=bool)

    def used_changed(self, index: int, priority: int, delta: int) -> None:
        """Entry ``index`` uses ``delta`` more leaves at ``priority`` (from `update_used`)."""
        if priority not in self._priorities:
            self._priorities.append(priority)
            self._used = np.hstack([self._used, np.zeros((len(self.cells), 1), dtype=np.int64)])
        self._used[index, self._priorities.index(priority)] += delta

    def _physical(self, i: int) -> PhysicalCell | None:
        cell = self.cells[i]
        return cell if cell.__class__ is PhysicalCell else cell.physical

    def _update(self, priority: int, suggested: set[str] | None, ignore_suggested: bool) -> np.ndarray:
        """The sort key of each entry at ``priority``; its free leaves go to ``self._free``."""
        used = self._used
        columns = np.array(self._priorities, dtype=np.int64)
        n = len(self.cells)
        at_or_above = used[:, columns >= priority].sum(axis=1) if len(columns) else np.zeros(n, np.int64)
        self._free = self._leaf_num - at_or_above
        if self.cross_priority_pack:
            same = used.sum(axis=1) if len(columns) else np.zeros(n, np.int64)
            higher = np.zeros(n, dtype=np.int64)
        else:
            same = used[:, columns == priority].sum(axis=1) if len(columns) else np.zeros(n, np.int64)
            higher = at_or_above - same
        if self._all_healthy():
            self._healthy = np.ones(n, dtype=bool)
        else:
            self._healthy = np.array(
                [p is None or p.healthy for p in map(self._physical, range(n))], dtype=bool
            )
        if ignore_suggested or suggested is None:
            self._suggested = np.ones(n, dtype=bool)
        else:
            self._suggested = np.array(
                [p is None or p.nodes[0] in suggested for p in map(self._physical, range(n))], dtype=bool
            )
        return (
            (~self._healthy).astype(np.int64) << 62
            | (~self._suggested).astype(np.int64) << 61
            | (((1 << _SAME_SHIFT) - 1 - same) << _SAME_SHIFT)
            | higher
        )

    def _address(self, i: int) -> str:
        physical = self._physical(i)
        return "" if physical is None else physical.address

    def schedule(
        self,
        pod_leaf_nums: dict[int, int],
        priority: int,
        suggested: set[str] | None,
        ignore_suggested: bool,
    ) -> tuple[dict[int, list[list[Any]]] | None, str]:
        """Return leaf cells for each pod (by leaf count, in order), or why none fit."""
        sizes = sorted(n for n, count in pod_leaf_nums.items() for _ in range(count))
        at = OPPORTUNISTIC_PRIORITY
        picked, reason = self._find_nodes(sizes, self._update(at, suggested, ignore_suggested))
        if picked is None and priority > OPPORTUNISTIC_PRIORITY:
            at = priority
            picked, reason = self._find_nodes(sizes, self._update(at, suggested, ignore_suggested))
        if picked is None:
            return None, reason
        placements: dict[int, list[list[Any]]] = {}
        available: dict[int, list[Any]] = {}
        for size, node_index in zip(sizes, picked, strict=True):
            node = self.cells[node_index]
            chosen, available[id(node)] = find_leaves_in_node(
                node, size, at, available.get(id(node)), self.level_leaf_num
            )
            placements.setdefault(size, []).append(chosen)
        return placements, ""

    def _find_nodes(self, sizes: list[int], key: np.ndarray) -> tuple[list[int] | None, str]:
        """The entries the pods go on (several pods may share one), in the view's new order."""
        order = self.order[np.argsort(key[self.order], kind="stable")]
        self.order = order
        free = self._free[order]
        # An entry with fewer free leaves than the smallest pod is passed over whatever happens.
        candidates = np.flatnonzero(free >= sizes[0]).tolist()
        picked: list[int] = []
        for position in candidates:
            taken = 0
            entry = int(order[position])
            room = int(free[position])
            while room - taken >= sizes[len(picked)]:
                if not self._healthy[entry]:
                    return None, f"have to use at least one bad node {self._address(entry)}"
                if not self._suggested[entry]:
                    return None, f"have to use at least one non-suggested node {self._address(entry)}"
                picked.append(entry)
                taken += sizes[len(picked) - 1]
                if len(picked) == len(sizes):
                    return picked, ""
        return None, "insufficient capacity"


def _leaves_at_priority(cell: Any, priority: int, free: list[Any], preemptible: list[Any]) -> None:
    if cell.level > 1:
        for child in cell.children:
            _leaves_at_priority(child, priority, free, preemptible)
    elif cell.priority == FREE_PRIORITY:
        free.append(cell)
    elif cell.priority < priority:
        preemptible.append(cell)


def _lca(a: Any, b: Any) -> Any:
    while a is not None and b is not None and a is not b:
        if a.level <= b.level:
            a = a.parent
        else:
            b = b.parent
    return a if a is b else None


def _optimal_affinity(count: int, level_leaf_num: dict[int, int]) -> int:
    for level in sorted(level_leaf_num):
        if level_leaf_num[level] >= count:
            return level
    return HIGHEST_LEVEL


def find_leaves_in_node(
    node: Any, count: int, priority: int, available: list[Any] | None, level_leaf_num: dict[int, int]
) -> tuple[list[Any], list[Any]]:
    """Pick `count` leaves of `node` with the lowest common ancestor; return them and the rest."""
    if available is None:
        free: list[Any] = []
        preemptible: list[Any] = []
        _leaves_at_priority(node, priority, free, preemptible)
        available = free + preemptible
    optimal = _optimal_affinity(count, level_leaf_num)
    best_level = HIGHEST_LEVEL
    best: list[int] = []
    current: list[int] = []
    affinity: list[Any] = []

    # Depth-first search over index combinations in order; a branch is cut as soon as its common
    # ancestor is already no better than the best found, and the search stops at the optimum.
    def search(start: int) -> bool:
        nonlocal best_level, best
        for i in range(start, len(available) - (count - len(current)) + 1):
            cell = available[i]
            lca = cell if not affinity else _lca(cell, affinity[-1])
            level = HIGHEST_LEVEL if lca is None else lca.level
            if affinity and level >= best_level:
                continue
            current.append(i)
            affinity.append(lca)
            if len(current) == count:
                if level < best_level:
                    best_level, best = level, list(current)
                    if level <= optimal:
                        return True
            elif search(i + 1):
                return True
            current.pop()
            affinity.pop()
        return False

    search(0)
    if not best:
        raise AssertionError(f"no {count} leaves found in picked node {node.address}")
    chosen = [available[i] for i in best]
    picked = set(best)
    rest = [c for i, c in enumerate(available) if i not in picked]
    return chosen, rest
