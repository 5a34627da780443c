"""The cell model of HiveD: physical cells, virtual (VC) cells, and the bookkeeping on them.

A cell is a node in a hierarchy whose leaves are single devices (GPUs). Physical cells describe
the machines; virtual cells describe a VC's quota with the same shapes. A virtual cell is bound
to a physical cell only while something runs in it, which is what lets HiveD move quota around
without fragmenting it. Every helper that changes priorities, usage counts, states or bindings
lives here, so the invariants (a parent's priority is the maximum of its children's, a parent is
used when any child is) are kept in one place.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from services.scheduler.core.hived.priorities import FREE_PRIORITY, MAX_GUARANTEED_PRIORITY

if TYPE_CHECKING:
    from services.scheduler.core.hived.groups import AffinityGroup

CELL_FREE = "Free"
CELL_USED = "Used"
CELL_RESERVING = "Reserving"
CELL_RESERVED = "Reserved"


class Cell:
    """What physical and virtual cells share: place in the hierarchy, priority, usage."""

    __slots__ = (
        "address",
        "at_or_higher_than_node",
        "cell_type",
        "chain",
        "children",
        "is_node_level",
        "leaf_num",
        "level",
        "parent",
        "priority",
        "used_at_priority",
        "views",
    )

    def __init__(
        self,
        chain: str,
        level: int,
        cell_type: str,
        address: str,
        leaf_num: int,
        at_or_higher_than_node: bool,
        is_node_level: bool,
    ) -> None:
        self.chain = chain
        self.level = level
        self.cell_type = cell_type
        self.address = address
        self.leaf_num = leaf_num
        self.at_or_higher_than_node = at_or_higher_than_node
        self.is_node_level = is_node_level
        self.parent: Any = None
        self.children: list[Any] = []
        self.priority = FREE_PRIORITY
        self.used_at_priority: dict[int, int] = {}
        # The topology schedulers whose view lists this cell, with its index there.
        self.views: list[tuple[Any, int]] | None = None

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.address})"


class PhysicalCell(Cell):
    """A cell of real devices. `nodes` and `leaf_indices` say where it is."""

    __slots__ = (
        "healthy",
        "leaf_indices",
        "nodes",
        "pinned",
        "reserving_group",
        "split",
        "state",
        "using_group",
        "virtual",
    )

    def __init__(
        self,
        chain: str,
        level: int,
        cell_type: str,
        address: str,
        leaf_num: int,
        at_or_higher_than_node: bool,
        is_node_level: bool,
    ) -> None:
        super().__init__(chain, level, cell_type, address, leaf_num, at_or_higher_than_node, is_node_level)
        self.nodes: list[str] = []
        self.leaf_indices: list[int] = []
        self.state = CELL_FREE
        self.using_group: AffinityGroup | None = None
        self.reserving_group: AffinityGroup | None = None
        self.virtual: VirtualCell | None = None
        self.split = False
        self.pinned = False
        self.healthy = True


class VirtualCell(Cell):
    """A cell of a VC's quota; `preassigned` is the top of the VC cell it belongs to."""

    __slots__ = ("physical", "preassigned", "vc")

    def __init__(
        self,
        vc: str,
        chain: str,
        level: int,
        cell_type: str,
        address: str,
        leaf_num: int,
        at_or_higher_than_node: bool,
        is_node_level: bool,
    ) -> None:
        super().__init__(chain, level, cell_type, address, leaf_num, at_or_higher_than_node, is_node_level)
        self.vc = vc
        self.preassigned: VirtualCell = self
        self.physical: PhysicalCell | None = None


class CellList(list[Any]):
    """A list of cells that knows where each cell is, so that removing one (the last cell moved
    into its hole, the original's order) and asking whether it is there take constant time at any
    cluster size. A cell listed twice, or a change through any method not overridden here, makes
    the index be rebuilt (or dropped, if cells repeat, for the plain list's linear behaviour)."""

    __slots__ = ("_at",)

    def __init__(self, cells: Any = ()) -> None:
        super().__init__(cells)
        self._at: dict[int, int] | None = None
        self._reindex()

    def _reindex(self) -> None:
        at = {id(c): i for i, c in enumerate(self)}
        self._at = at if len(at) == len(self) else None

    def append(self, cell: Any) -> None:
        super().append(cell)
        if self._at is not None:
            if id(cell) in self._at:
                self._at = None
            else:
                self._at[id(cell)] = len(self) - 1

    def extend(self, cells: Any) -> None:
        for cell in cells:
            self.append(cell)

    def __contains__(self, cell: object) -> bool:
        if self._at is not None:
            return id(cell) in self._at
        return any(c is cell or c == cell for c in self)

    def discard_moving_last(self, cell: Any) -> None:
        """Remove ``cell``: the last cell takes its place (ValueError if it is not listed)."""
        at = self._at
        if at is None:
            for i, c in enumerate(self):
                if c is cell:
                    self[i] = self[-1]
                    self.pop()
                    return
            raise ValueError(f"cell {cell.address} is not in the list")
        i = at.pop(id(cell), -1)
        if i < 0:
            raise ValueError(f"cell {cell.address} is not in the list")
        last = super().pop()
        if last is not cell:
            super().__setitem__(i, last)
            at[id(last)] = i

    def pop(self, index: Any = -1) -> Any:
        if index in (-1, len(self) - 1):
            cell = super().pop()
            if self._at is not None:
                self._at.pop(id(cell), None)
            return cell
        cell = super().pop(index)
        self._reindex()
        return cell

    def __setitem__(self, index: Any, value: Any) -> None:
        super().__setitem__(index, value)
        self._reindex()

    def __delitem__(self, index: Any) -> None:
        super().__delitem__(index)
        self._reindex()

    def __iadd__(self, cells: Any) -> CellList:  # type: ignore[misc]
        self.extend(cells)
        return self

    def insert(self, index: Any, cell: Any) -> None:
        super().insert(index, cell)
        self._reindex()

    def remove(self, cell: Any) -> None:
        super().remove(cell)
        self._reindex()

    def clear(self) -> None:
        super().clear()
        self._reindex()

    def sort(self, *args: Any, **kwargs: Any) -> None:
        super().sort(*args, **kwargs)
        self._reindex()

    def reverse(self) -> None:
        super().reverse()
        self._reindex()


ChainCellList = dict[int, list[Any]]


def new_chain_cell_list(top: int) -> ChainCellList:
    return {level: CellList() for level in range(1, top + 1)}


def remove_from(cells: list[Any], cell: Any) -> None:
    """Remove by moving the last element into the hole, as the original does.

    The order of free lists decides which buddy is picked next, so the replacement order has to
    be the same as the reference implementation's for placements to agree.
    """
    if isinstance(cells, CellList):
        cells.discard_moving_last(cell)
        return
    for i, c in enumerate(cells):
        if c is cell:
            cells[i] = cells[-1]
            cells.pop()
            return
    raise ValueError(f"cell {cell.address} is not in the list")


def shallow_copy(ccl: ChainCellList) -> ChainCellList:
    return {level: list(cells) for level, cells in ccl.items()}


def set_priority(cell: Cell, priority: int) -> None:
    """Set a cell's priority and keep every ancestor at the maximum of its children."""
    original = cell.priority
    cell.priority = priority
    parent = cell.parent
    if parent is None:
        return
    if priority > parent.priority:
        set_priority(parent, priority)
    elif original == parent.priority and priority < original:
        set_priority(parent, max([FREE_PRIORITY, *(b.priority for b in parent.children)]))


def update_used(cell: Cell | None, priority: int, increase: bool) -> None:
    delta = 1 if increase else -1
    while cell is not None:
        cell.used_at_priority[priority] = cell.used_at_priority.get(priority, 0) + delta
        if cell.used_at_priority[priority] == 0:
            del cell.used_at_priority[priority]
        if cell.views is not None:
            for view, index in cell.views:
                view.used_changed(index, priority, delta)
        cell = cell.parent


def set_state(cell: PhysicalCell, state: str) -> None:
    """A parent is Used when any child is; otherwise it takes a state all its children share."""
    cell.state = state
    parent = cell.parent
    if parent is not None and (state == CELL_USED or all(c.state == state for c in parent.children)):
        set_state(parent, state)


def bind(pc: PhysicalCell, vc: VirtualCell) -> None:
    """Bind a leaf pair and walk up until an already bound ancestor."""
    p: PhysicalCell | None = pc
    v: VirtualCell | None = vc
    while v is not None and p is not None and v.physical is None:
        p.virtual = v
        v.physical = p
        v = v.parent
        p = p.parent


def unbind(pc: PhysicalCell) -> None:
    """Undo bindings from a leaf upwards while no sibling still needs the parent's binding."""
    bound = pc.virtual
    while bound is not None and bound.physical is not None and not bound.physical.pinned:
        physical = bound.physical
        bound.physical = None
        physical.virtual = None
        parent = bound.parent
        if parent is None or any(c.physical is not None for c in parent.children):
            return
        bound = parent


def unbound_virtual(cells: list[Any]) -> VirtualCell | None:
    for c in cells:
        if c.physical is None:
            return c  # type: ignore[no-any-return]
    return None


def lowest_priority_virtual(cells: list[Any], priority: int) -> VirtualCell | None:
    """A free unbound cell, else the lowest-priority cell below `priority` (for re-adding pods)."""
    lowest = MAX_GUARANTEED_PRIORITY
    found: VirtualCell | None = None
    for vc in cells:
        if vc.priority == FREE_PRIORITY:
            if vc.physical is None:
                return vc  # type: ignore[no-any-return]
            continue
        if vc.priority < priority and vc.priority < lowest:
            lowest = vc.priority
            found = vc
    return found


def in_free_list(cell: PhysicalCell) -> bool:
    """Whether the cell, or an ancestor of it, sits unsplit in the physical free list."""
    c: PhysicalCell = cell
    while True:
        if c.virtual is not None or c.split:
            return False
        if c.parent is None or c.parent.split:
            return True
        c = c.parent
