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

if TYPE_CHECKING:
    from services.scheduler.core.hived_groups import AffinityGroup

FREE_PRIORITY = -2
OPPORTUNISTIC_PRIORITY = -1
MIN_GUARANTEED_PRIORITY = 0
MAX_GUARANTEED_PRIORITY = 1000

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


ChainCellList = dict[int, list[Any]]


def new_chain_cell_list(top: int) -> ChainCellList:
    return {level: [] for level in range(1, top + 1)}


def remove_from(cells: list[Any], cell: Any) -> None:
    """Remove by moving the last element into the hole, as the original does.

    The order of free lists decides which buddy is picked next, so the replacement order has to
    be the same as the reference implementation's for placements to agree.
    """
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


def leaves_of(cell: Cell) -> list[Any]:
    if cell.level == 1:
        return [cell]
    out: list[Any] = []
    for child in cell.children:
        out.extend(leaves_of(child))
    return out
