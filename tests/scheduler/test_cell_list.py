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
