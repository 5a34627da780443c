"""Buddy allocation: turn a placement inside a VC's virtual cells into physical cells.

A VC cell that is not yet bound gets a physical cell of its level from the chain's free list,
splitting a bigger free cell when none of that level is free (buddy allocation), which is what
guarantees every VC can always get its quota. When the plain choice lands on a bad or
non-suggested node the search backtracks, and as a last resort splits a higher cell only as far
as the other VCs' free quota still fits (safe relaxed buddy allocation).
"""

from __future__ import annotations

from typing import Any

from services.scheduler.core.hived.cells import (
    ChainCellList,
    PhysicalCell,
    VirtualCell,
    lowest_priority_virtual,
    remove_from,
)
from services.scheduler.core.hived.priorities import OPPORTUNISTIC_PRIORITY

Placement = dict[int, list[list[Any]]]


class BindingVertex:
    """A virtual cell to bind, with the children below it that also need binding."""

    __slots__ = ("cell", "children")

    def __init__(self, cell: VirtualCell) -> None:
        self.cell = cell
        self.children: list[BindingVertex] = []


def binding_paths(
    placement: Placement, leaf_nums: list[int], bindings: dict[str, PhysicalCell]
) -> tuple[list[BindingVertex], list[list[BindingVertex]]]:
    """Group the unbound ancestors of a virtual placement's leaves into trees to bind."""
    vertices: dict[str, BindingVertex] = {}
    preassigned: list[BindingVertex] = []
    non_preassigned: list[list[BindingVertex]] = []
    for num in leaf_nums:
        for pod in placement[num]:
            for leaf in pod:
                if leaf.physical is not None:
                    bindings[leaf.address] = leaf.physical
                    continue
                path: list[VirtualCell] = []
                c: VirtualCell | None = leaf
                while c is not None and c.physical is None and c.address not in vertices:
                    path.append(c)
                    c = c.parent
                root = path[-1]
                vertex = BindingVertex(root)
                vertices[root.address] = vertex
                parent = root.parent
                if parent is None:
                    preassigned.append(vertex)
                elif parent.physical is not None:
                    for group in non_preassigned:
                        if group[0].cell.parent is parent:
                            group.append(vertex)
                            break
                    else:
                        non_preassigned.append([vertex])
                else:
                    vertices[parent.address].children.append(vertex)
                for cell in reversed(path[:-1]):
                    v = BindingVertex(cell)
                    vertices[cell.parent.address].children.append(v)
                    vertices[cell.address] = v
    return preassigned, non_preassigned


def usable_cells(
    candidates: list[Any], needed: int, suggested: set[str] | None, ignore_suggested: bool
) -> list[Any] | None:
    usable: list[Any] = []
    for c in candidates:
        if c.virtual is not None:
            continue
        if len(c.nodes) == 1 and not c.healthy:
            continue
        if not ignore_suggested and suggested is not None and not any(n in suggested for n in c.nodes):
            continue
        usable.append(c)
    if len(usable) < needed:
        return None

    # Cells with fewer opportunistic pods first, so guaranteed work preempts as little as possible
    # (stable, so without opportunistic pods the buddy order is untouched).
    def opportunistic(c: Any) -> int:
        return int(c.used_at_priority.get(OPPORTUNISTIC_PRIORITY, 0))

    candidates.sort(key=opportunistic)
    usable.sort(key=opportunistic)
    return usable


def map_cells(
    cells: list[BindingVertex],
    candidates: list[Any],
    suggested: set[str] | None,
    ignore_suggested: bool,
    bindings: dict[str, PhysicalCell],
) -> list[Any] | None:
    """Backtracking search mapping virtual cells onto distinct physical candidates."""
    usable = usable_cells(candidates, len(cells), suggested, ignore_suggested)
    if usable is None:
        return None
    picked: list[int] = [0] * len(cells)
    taken: set[int] = set()
    index = 0
    while index >= 0:
        candidate_index = picked[index]
        found = False
        while candidate_index < len(usable):
            if candidate_index not in taken:
                candidate = usable[candidate_index]
                if candidate.level == 1:
                    bindings[cells[index].cell.address] = candidate
                    ok = True
                else:
                    ok = (
                        map_cells(
                            cells[index].children, candidate.children, suggested, ignore_suggested, bindings
                        )
                        is not None
                    )
                if ok:
                    found = True
                    break
            candidate_index += 1
        if found:
            picked[index] = candidate_index
            taken.add(candidate_index)
            if index == len(cells) - 1:
                return [usable[i] for i in picked]
            index += 1
        else:
            # A failed position keeps its last start index, as in the reference search.
            index -= 1
            if index >= 0:
                taken.discard(picked[index])
                picked[index] += 1
    return None


def buddy_alloc(
    vertex: BindingVertex,
    free: ChainCellList,
    level: int,
    suggested: set[str] | None,
    ignore_suggested: bool,
    bindings: dict[str, PhysicalCell],
) -> bool:
    if level == vertex.cell.level:
        picked = map_cells([vertex], free[level], suggested, ignore_suggested, bindings)
        if picked is None:
            return False
        for c in picked:
            remove_from(free[level], c)
        return True
    candidates = usable_cells(free[level], 1, suggested, ignore_suggested)
    if candidates is None:
        return False
    for c in candidates:
        free[level - 1].extend(c.children)
        if buddy_alloc(vertex, free, level - 1, suggested, ignore_suggested, bindings):
            remove_from(free[level], c)
            return True
        free[level - 1] = []
    return False


def safe_relaxed_buddy_alloc(
    vertex: BindingVertex,
    free: ChainCellList,
    free_num: dict[int, int],
    level: int,
    suggested: set[str] | None,
    ignore_suggested: bool,
    bindings: dict[str, PhysicalCell],
) -> bool:
    top = len(free)
    splittable: dict[int, int] = {}
    probe: Any = None
    for i in range(top, 0, -1):
        splittable[i] = len(free[i]) - free_num.get(i, 0)
        if i < top and probe is not None:
            splittable[i] += splittable[i + 1] * len(probe.children)
        if probe is None and free[i]:
            probe = free[i][0]
        elif probe is not None:
            probe = probe.children[0]
        if splittable[i] < 0:
            return False
    for lvl in range(level + 1, top + 1):
        count = min(len(free[lvl]), splittable[lvl])
        if count <= 0:
            continue
        split: list[Any] = []
        for _ in range(count):
            cell = free[lvl][0]
            split.append(cell)
            remove_from(free[lvl], cell)
        splittable[lvl] -= count
        for _ in range(lvl, level, -1):
            split = [child for c in split for child in c.children]
        free[level] = split + free[level]
        picked = map_cells([vertex], free[level], suggested, ignore_suggested, bindings)
        if picked is not None:
            for c in picked:
                remove_from(free[level], c)
            return True
    return False


def lowest_free_level(free: ChainCellList, level: int) -> int:
    while level <= len(free):
        if free[level]:
            return level
        level += 1
    return -1


def map_virtual_to_physical(
    preassigned: list[BindingVertex],
    non_preassigned: list[list[BindingVertex]],
    free: ChainCellList,
    free_num: dict[int, int],
    suggested: set[str] | None,
    ignore_suggested: bool,
    bindings: dict[str, PhysicalCell],
) -> bool:
    for v in preassigned:
        start = lowest_free_level(free, v.cell.level)
        if start > 0 and buddy_alloc(v, free, start, suggested, ignore_suggested, bindings):
            free_num[v.cell.level] = free_num.get(v.cell.level, 0) - 1
        elif not safe_relaxed_buddy_alloc(
            v, free, free_num, v.cell.level, suggested, ignore_suggested, bindings
        ):
            return False
    for group in non_preassigned:
        parent = group[0].cell.parent
        assert parent is not None
        assert parent.physical is not None
        if map_cells(group, parent.physical.children, suggested, ignore_suggested, bindings) is None:
            return False
    return True


def map_physical_to_virtual(
    cell: PhysicalCell, vccl: ChainCellList, preassigned_level: int, priority: int
) -> tuple[VirtualCell | None, str]:
    """Find the VC cell a running leaf belongs to when pods are re-added (after a restart)."""
    if cell.virtual is not None:
        return cell.virtual, ""
    if cell.level == preassigned_level:
        found = lowest_priority_virtual(vccl.get(preassigned_level, []), priority)
        if found is None:
            return None, f"no free cell left in the VC at the preassigned level {preassigned_level}"
        return found, ""
    if cell.parent is None:
        return None, f"the physical hierarchy no longer reaches the preassigned level {preassigned_level}"
    parent, message = map_physical_to_virtual(cell.parent, vccl, preassigned_level, priority)
    if parent is None:
        return None, message
    return lowest_priority_virtual(parent.children, priority), ""
