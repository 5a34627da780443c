"""The indexed cell list behaves as the plain list it replaces: same order after every change."""

from __future__ import annotations

import random

import pytest

from services.scheduler.core.hived.cells import CellList, remove_from


class _Cell:
    def __init__(self, address: str) -> None:
        self.address = address


def _plain_remove(cells: list[_Cell], cell: _Cell) -> None:
    i = next(i for i, c in enumerate(cells) if c is cell)
    cells[i] = cells[-1]
    cells.pop()


@pytest.mark.parametrize("seed", range(5))
def test_removal_moves_the_last_cell_into_the_hole_as_the_plain_list_does(seed: int) -> None:
    rng = random.Random(seed)
    pool = [_Cell(str(i)) for i in range(60)]
    indexed, plain = CellList(), []
    for _ in range(2000):
        absent = [c for c in pool if c not in plain]
        op = rng.random()
        if op < 0.45 and absent:
            cell = rng.choice(absent)
            indexed.append(cell)
            plain.append(cell)
        elif op < 0.55 and absent:
            cells = rng.sample(absent, min(3, len(absent)))
            indexed.extend(cells)
            plain.extend(cells)
        elif op < 0.6 and plain:
            assert indexed.pop() is plain.pop()
        elif op < 0.65 and len(plain) > 1:
            indexed.insert(0, plain[-1])
            plain.insert(0, plain[-1])
            assert indexed == plain
            del indexed[0]
            del plain[0]
        elif plain:
            cell = rng.choice(plain)
            remove_from(indexed, cell)
            _plain_remove(plain, cell)
        assert list(indexed) == plain
        assert all(c in indexed for c in plain)
        assert all(c not in indexed for c in pool if c not in plain)


def test_removing_a_cell_that_is_not_listed_names_it() -> None:
    cells = CellList([_Cell("a")])
    with pytest.raises(ValueError, match="cell b is not in the list"):
        remove_from(cells, _Cell("b"))


def test_a_cell_listed_twice_falls_back_to_the_plain_lists_behaviour() -> None:
    a, b = _Cell("a"), _Cell("b")
    cells = CellList([a, b, a])
    plain = [a, b, a]
    remove_from(cells, a)
    _plain_remove(plain, a)
    assert list(cells) == plain
    assert a in cells


@pytest.mark.parametrize("seed", range(4))
def test_every_list_method_keeps_the_order_and_the_membership_of_a_plain_list(seed: int) -> None:
    """Every change a list allows, cells listed twice included (the index dropped, then rebuilt
    once they are distinct again): the same cells in the same order, and `in` agrees."""
    rng = random.Random(seed)
    pool = [_Cell(str(i)) for i in range(40)]
    indexed, plain = CellList(pool[:4]), list(pool[:4])
    for _ in range(3000):
        op = rng.randrange(13)
        absent = [c for c in pool if all(p is not c for p in plain)]
        # Mostly a cell not listed yet (the index kept), now and then one listed already.
        cell = rng.choice(absent) if absent and rng.random() < 0.9 else rng.choice(pool)
        if op == 0:
            indexed.append(cell)
            plain.append(cell)
        elif op == 1:
            cells = rng.sample(absent, 2) if len(absent) > 1 else rng.sample(pool, 2)
            indexed += cells
            plain += cells
        elif op == 2 and plain:
            at = rng.randrange(len(plain))
            assert indexed.pop(at) is plain.pop(at)
        elif op == 3 and plain:
            assert indexed.pop(len(plain) - 1) is plain.pop(len(plain) - 1)
        elif op == 4 and any(p is cell for p in plain):
            indexed.remove(cell)
            plain.remove(cell)
        elif op == 5:
            indexed.sort(key=lambda c: c.address)
            plain.sort(key=lambda c: c.address)
        elif op == 6:
            indexed.reverse()
            plain.reverse()
        elif op == 7 and plain:
            at = rng.randrange(len(plain))
            indexed[at] = cell
            plain[at] = cell
        elif op == 8 and plain:
            at = rng.randrange(len(plain))
            del indexed[at]
            del plain[at]
        elif op == 9:
            at = rng.randrange(len(plain) + 1)
            indexed.insert(at, cell)
            plain.insert(at, cell)
        elif op in (4, 10) and plain:
            cell = rng.choice(plain)
            remove_from(indexed, cell)
            _plain_remove(plain, cell)
        elif op == 11 and rng.random() < 0.05:
            indexed.clear()
            plain.clear()
        elif op == 12 and len({id(c) for c in plain}) < len(plain):
            twice = next(c for i, c in enumerate(plain) if any(p is c for p in plain[i + 1 :]))
            indexed.remove(twice)  # distinct again: the index comes back
            plain.remove(twice)
        assert list(indexed) == plain
        for c in pool:
            assert (c in indexed) == any(p is c for p in plain), c.address


def test_a_cell_not_listed_is_named_whether_the_list_is_indexed_or_not() -> None:
    a, b = _Cell("a"), _Cell("b")
    for cells in (CellList([a]), CellList([a, a])):
        with pytest.raises(ValueError, match="cell b is not in the list"):
            cells.discard_moving_last(b)
        assert b not in cells
        assert a in cells
