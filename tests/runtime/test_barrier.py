"""The gang barrier: who is missing comes from one listing, and a large gang polls less often."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import pytest

from runtime import barrier
from runtime.spec import TaskPlacement


def test_missing_peers_are_those_without_a_ready_file(tmp_path: Path) -> None:
    expected = [("worker", i) for i in range(5)]
    assert barrier.missing_peers(tmp_path / "absent", expected) == [f"worker-{i}" for i in range(5)]
    announce(tmp_path, 0, 3)
    (tmp_path / ".worker-1.ready.77.tmp").write_text("{}")  # a peer still writing its file
    assert barrier.missing_peers(tmp_path, expected) == ["worker-1", "worker-2", "worker-4"]


def test_the_poll_interval_grows_with_the_gang_up_to_half_a_second() -> None:
    assert barrier.poll_interval(2) == barrier.POLL_INTERVAL_S
    assert barrier.poll_interval(99) == barrier.POLL_INTERVAL_S
    assert barrier.poll_interval(501) == 5 * barrier.POLL_INTERVAL_S
    assert barrier.poll_interval(10_000) == barrier.MAX_POLL_INTERVAL_S


def test_a_waiting_task_polls_at_its_gangs_interval_and_passes_once_all_are_ready(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    expected = [("worker", i) for i in range(300)]
    announce(tmp_path, *range(299))
    now = [0.0]
    slept: list[float] = []
    listings = count_listings(monkeypatch)

    def sleep(seconds: float) -> None:
        slept.append(seconds)
        now[0] += seconds
        if len(slept) == 3:  # the last peer arrives while this task waits, and finds all ready
            announce(tmp_path, 299)
            assert barrier.wait_for_peers(tmp_path, expected, 60.0, clock=lambda: now[0]) == []

    missing = barrier.wait_for_peers(tmp_path, expected, 60.0, clock=lambda: now[0], sleep=sleep)
    assert missing == []
    assert slept == [barrier.poll_interval(300)] * 3
    # One listing by this task (its first poll), one by the last peer; the later polls looked at
    # the one file the last peer wrote.
    assert listings == [tmp_path, tmp_path]
    assert (tmp_path / barrier.ALL_READY).exists()


def test_the_gang_passes_even_if_the_last_peer_dies_before_saying_all_are_ready(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    expected = [("worker", i) for i in range(3)]
    announce(tmp_path, 0, 1)
    slept: list[float] = []
    listings = count_listings(monkeypatch)

    def sleep(seconds: float) -> None:
        slept.append(seconds)
        if len(slept) == 1:  # announces itself, then dies before it lists the directory
            announce(tmp_path, 2)

    assert barrier.wait_for_peers(tmp_path, expected, 60.0, clock=lambda: 0.0, sleep=sleep) == []
    # The waiting task lists the directory itself every LIST_EVERY polls, and says all are ready.
    assert len(slept) == barrier.LIST_EVERY
    assert len(listings) == 2
    assert (tmp_path / barrier.ALL_READY).exists()


def test_a_stopped_or_timed_out_wait_names_the_missing_peers(tmp_path: Path) -> None:
    expected = [("worker", i) for i in range(3)]
    announce(tmp_path, 1)
    now = [0.0]

    def sleep(seconds: float) -> None:
        now[0] += seconds

    assert barrier.wait_for_peers(tmp_path, expected, 1.0, clock=lambda: now[0], sleep=sleep) == [
        "worker-0",
        "worker-2",
    ]
    assert barrier.wait_for_peers(tmp_path, expected, 60.0, lambda: True) == ["worker-0", "worker-2"]
    assert not (tmp_path / barrier.ALL_READY).exists()


def count_listings(monkeypatch: pytest.MonkeyPatch) -> list[Path]:
    """The directories the barrier lists, in order."""
    listed: list[Path] = []
    listdir = os.listdir

    def counting(path: Any) -> list[str]:
        listed.append(Path(path))
        return listdir(path)

    monkeypatch.setattr(os, "listdir", counting)
    return listed


def announce(directory: Path, *indices: int) -> None:
    """Workers of these indices say they are ready, as their runtimes do."""
    for index in indices:
        barrier.announce(directory, TaskPlacement(role="worker", index=index, host_ip="127.0.0.1"))
