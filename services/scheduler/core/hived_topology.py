"""Topology-aware packing of a gang onto a set of cells (virtual inside a VC, or physical).

Nodes are sorted so that healthy, suggested, already busy nodes come first (packing keeps big
cells whole), and the gang is placed at the lowest priority first so that preemption is only
used when nothing free fits. Inside a node, devices are chosen with the lowest common ancestor
(best affinity), preferring free devices over ones that would need preemption.
"""

from __future__ import annotations

from typing import Any

from services.scheduler.core.hived_cells import (
    FREE_PRIORITY,
    OPPORTUNISTIC_PRIORITY,
    ChainCellList,
    PhysicalCell,
    VirtualCell,
)

HIGHEST_LEVEL = 1 << 30


class _Node:
    __slots__ = ("address", "cell", "free_at_priority", "healthy", "suggested", "used_higher", "used_same")

    def __init__(self, cell: Any) -> None:
        self.cell = cell
        self.free_at_priority = 0
        self.used_same = 0
        self.used_higher = 0
        self.healthy = True
        self.suggested = True
        self.address = ""


def _ancestor_no_higher_than_node(cell: Any) -> Any:
    while not cell.at_or_higher_than_node and cell.parent is not None:
        cell = cell.parent
    return cell


class TopologyAwareScheduler:
    """Places pods of one gang on the cells of one chain (or one pinned cell)."""

    def __init__(self, ccl: ChainCellList, level_leaf_num: dict[int, int], cross_priority_pack: bool) -> None:
        self.level_leaf_num = level_leaf_num
        self.cross_priority_pack = cross_priority_pack
        top = max(ccl) if ccl else 0
        level = 1
        while level <= top and not (ccl[level] and ccl[level][0].at_or_higher_than_node):
            level += 1
        level = min(level, top)
        seen: set[int] = set()
        self.view: list[_Node] = []
        for lvl in range(level, 0, -1):
            for c in ccl.get(lvl, []):
                if id(_ancestor_no_higher_than_node(c)) not in seen:
                    self.view.append(_Node(c))
                    seen.add(id(c))

    def _update(self, priority: int, suggested: set[str] | None, ignore_suggested: bool) -> None:
        cross = self.cross_priority_pack
        check_suggested = not ignore_suggested and suggested is not None
        for n in self.view:
            used = n.cell.used_at_priority
            free = n.cell.leaf_num
            same = 0
            higher = 0
            if used:
                same = used.get(priority, 0)
                for p, num in used.items():
                    if p >= priority:
                        free -= num
                        if p != priority:
                            if cross:
                                same += num
                            else:
                                higher += num
                    elif cross:
                        same += num
            n.used_same, n.used_higher, n.free_at_priority = same, higher, free
            cell = n.cell
            physical = cell if cell.__class__ is PhysicalCell else cell.physical
            if physical is None:
                n.healthy, n.suggested, n.address = True, True, ""
            else:
                n.healthy = physical.healthy
                n.suggested = not check_suggested or physical.nodes[0] in suggested  # type: ignore[operator]
                n.address = physical.address

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
        self._update(at, suggested, ignore_suggested)
        picked, reason = self._find_nodes(sizes)
        if picked is None and priority > OPPORTUNISTIC_PRIORITY:
            at = priority
            self._update(at, suggested, ignore_suggested)
            picked, reason = self._find_nodes(sizes)
        if picked is None:
            return None, reason
        placements: dict[int, list[list[Any]]] = {}
        available: dict[int, list[Any]] = {}
        for size, node_index in zip(sizes, picked, strict=True):
            node = self.view[node_index].cell
            chosen, available[id(node)] = find_leaves_in_node(
                node, size, at, available.get(id(node)), self.level_leaf_num
            )
            placements.setdefault(size, []).append(chosen)
        return placements, ""

    def _find_nodes(self, sizes: list[int]) -> tuple[list[int] | None, str]:
        self.view.sort(key=lambda n: (not n.healthy, not n.suggested, -n.used_same, n.used_higher))
        picked: list[int] = []
        taken = 0
        index = 0
        while index < len(self.view):
            n = self.view[index]
            if n.free_at_priority - taken >= sizes[len(picked)]:
                if not n.healthy:
                    return None, f"have to use at least one bad node {n.address}"
                if not n.suggested:
                    return None, f"have to use at least one non-suggested node {n.address}"
                picked.append(index)
                taken += sizes[len(picked) - 1]
                if len(picked) == len(sizes):
                    return picked, ""
            else:
                taken = 0
                index += 1
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


def is_virtual(cell: Any) -> bool:
    return isinstance(cell, VirtualCell)
