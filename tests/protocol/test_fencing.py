"""Which scheduler decision still counts: the fences of later leaders against a decision's epoch."""

from __future__ import annotations

import json

from libs.protocol.fencing import KEEP, Fence, decode, deposed, encode, with_cut, with_pending


def test_a_decision_without_an_epoch_always_counts() -> None:
    assert deposed(None, 10_000, [Fence(5, 1), Fence(6, None)]) is False


def test_a_decision_with_no_fence_counts() -> None:
    assert deposed(3, 50, []) is False


def test_a_decision_after_a_newer_leaders_cut_is_ignored() -> None:
    assert deposed(1, 11, [Fence(2, 10)]) is True


def test_a_decision_up_to_the_cut_counts() -> None:
    assert deposed(1, 10, [Fence(2, 10)]) is False
    assert deposed(1, 9, [Fence(2, 10)]) is False


def test_fences_of_the_decisions_own_epoch_or_older_do_not_touch_it() -> None:
    assert deposed(2, 99, [Fence(1, 10), Fence(2, 10)]) is False
    assert deposed(2, 99, [Fence(2, None)]) is False


def test_older_fences_listed_first_do_not_hide_a_newer_ones_cut() -> None:
    assert deposed(2, 11, [Fence(1, 5), Fence(2, 7), Fence(3, 10)]) is True
    assert deposed(2, 11, [Fence(1, None), Fence(3, None)]) is None


def test_a_newer_fence_still_being_raised_leaves_the_decision_undecided() -> None:
    assert deposed(1, 5, [Fence(2, None)]) is None
    assert deposed(1, 5, [Fence(2, None), Fence(3, 10)]) is None


def test_a_cut_passed_decides_even_after_an_undecided_fence() -> None:
    assert deposed(1, 11, [Fence(2, None), Fence(3, 10)]) is True
    assert deposed(1, 11, [Fence(3, 10), Fence(2, None)]) is True


def test_the_record_is_kept_sorted_by_epoch_and_read_back() -> None:
    fences = (Fence(3, None), Fence(1, 7), Fence(2, 12))
    raw = encode(fences)
    assert json.loads(raw) == [[1, 7], [2, 12], [3, None]]
    assert decode(raw) == (Fence(1, 7), Fence(2, 12), Fence(3, None))


def test_the_record_keeps_only_the_latest_fences() -> None:
    fences = [Fence(epoch, epoch * 10) for epoch in range(KEEP + 5, 0, -1)]
    kept = decode(encode(fences))
    assert len(kept) == KEEP == 100
    assert kept[0] == Fence(6, 60)
    assert kept[-1] == Fence(KEEP + 5, (KEEP + 5) * 10)


def test_no_record_reads_as_no_fence() -> None:
    assert decode(None) == ()
    assert decode(b"") == ()
    assert decode(b"[]") == ()
    assert decode(b'[["4", "9"]]') == (Fence(4, 9),)


def test_a_fence_being_raised_replaces_one_of_its_epoch() -> None:
    assert with_pending([Fence(1, 5), Fence(2, 8)], 2) == (Fence(1, 5), Fence(2, None))
    assert with_pending([Fence(1, 5)], 3) == (Fence(1, 5), Fence(3, None))
    assert with_pending([], 1) == (Fence(1, None),)


def test_a_cut_finishes_its_fence_and_any_older_left_unfinished() -> None:
    fences = [Fence(1, 5), Fence(2, None), Fence(3, None), Fence(4, None)]
    assert with_cut(fences, 3, 20) == (Fence(1, 5), Fence(2, 20), Fence(3, 20), Fence(4, None))
    assert with_cut([Fence(2, 7)], 2, 9) == (Fence(2, 9),)
