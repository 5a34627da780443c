"""Port assignment never hands out a port twice, and node-local reservations never collide."""

from __future__ import annotations

import json
import os
import socket
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from runtime import ports
from runtime.ports import (
    PortsExhaustedError,
    assign_ports,
    release_ports,
    reserve_many,
    reserve_ports,
    reserved_ports,
    with_default_ports,
)

labels = st.dictionaries(st.from_regex(r"[a-z]{1,6}", fullmatch=True), st.integers(0, 5), max_size=5)


@given(requests=labels, used=st.sets(st.integers(1000, 1100)), low=st.integers(1000, 1050))
def test_assigned_ports_are_distinct_unused_in_range_and_counted(
    requests: dict[str, int], used: set[int], low: int
) -> None:
    high = low + 60
    free = len([p for p in range(low, high) if p not in used])
    if sum(requests.values()) > free:
        with pytest.raises(PortsExhaustedError):
            assign_ports(requests, used, low, high)
        return
    assigned = assign_ports(requests, used, low, high)
    every = [p for ports in assigned.values() for p in ports]
    assert len(every) == len(set(every))
    assert not set(every) & used
    assert all(low <= p < high for p in every)
    assert {k: len(v) for k, v in assigned.items()} == requests


@given(tasks=st.lists(labels, min_size=1, max_size=8))
def test_successive_assignments_that_record_their_ports_never_conflict(tasks: list[dict[str, int]]) -> None:
    used: set[int] = set()
    for requests in tasks:
        assigned = assign_ports(requests, used, 20000, 20200)
        new = {p for ports in assigned.values() for p in ports}
        assert not new & used
        used |= new


def test_default_ports_add_ssh_and_http_without_overriding_the_request() -> None:
    assert with_default_ports({"ssh": 2, "grpc": 1}) == {"ssh": 2, "grpc": 1, "http": 1}


def test_concurrent_reservations_on_one_node_never_share_a_port(tmp_path: Path) -> None:
    def reserve(n: int) -> dict[str, list[int]]:
        return reserve_ports({"http": 1, "ssh": 1, "grpc": 2}, tmp_path, f"job/0/worker-{n}", 41000, 42000)

    with ThreadPoolExecutor(8) as pool:
        results = list(pool.map(reserve, range(24)))
    every = [p for r in results for ports in r.values() for p in ports]
    assert len(every) == len(set(every)) == 24 * 4
    assert len(reserved_ports(tmp_path)) == 24


def test_a_port_held_by_another_program_is_skipped(tmp_path: Path) -> None:
    with socket.socket() as holder:
        holder.bind(("0.0.0.0", 0))
        holder.listen()
        held = holder.getsockname()[1]
        got = reserve_ports({"http": 1}, tmp_path, "t", held, min(held + 5, 65536))
    assert got["http"] != [held]


def _a_free_port_below_the_ephemeral_range() -> int:
    """A port nothing holds now and the kernel hands out to no one (ephemeral ports start at 32768)."""
    for port in range(32700, 32000, -1):
        with socket.socket() as sock:
            try:
                sock.bind(("0.0.0.0", port))
            except OSError:
                continue
            return port
    raise AssertionError("no free port in 32000-32700 on this machine")


def test_released_ports_can_be_reserved_again(tmp_path: Path) -> None:
    port = _a_free_port_below_the_ephemeral_range()
    first = reserve_ports({"http": 1}, tmp_path, "a", port, port + 1)
    with pytest.raises(PortsExhaustedError):
        reserve_ports({"http": 1}, tmp_path, "b", port, port + 1)
    release_ports(tmp_path, ["a"])
    assert reserve_ports({"http": 1}, tmp_path, "b", port, port + 1) == first


@pytest.mark.parametrize("refused", [0, 7], ids=["all-bindable", "every-7th-held"])
def test_reserving_many_at_once_gives_what_reserving_one_by_one_gives(
    tmp_path: Path, refused: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    def bindable(port: int) -> bool:
        return not refused or port % refused != 0

    wanted = {f"job/0/worker-{n}": {"http": 1, "ssh": 1, "grpc": n % 3} for n in range(40)}
    reserve_ports({"http": 3}, tmp_path / "many", "other/0/a-0", 21000, 21500, bindable)
    reserve_ports({"http": 3}, tmp_path / "single", "other/0/a-0", 21000, 21500, bindable)
    one_by_one = {
        owner: reserve_ports(requests, tmp_path / "single", owner, 21000, 21500, bindable)
        for owner, requests in wanted.items()
    }
    writes: list[object] = []
    real_write = os.write

    def write(fd: int, data: Any) -> int:
        writes.append(data)
        return real_write(fd, data)

    monkeypatch.setattr(os, "write", write)
    together = reserve_many(wanted, tmp_path / "many", 21000, 21500, bindable)
    assert together == one_by_one
    assert len(writes) == 1  # one append of the 40 tasks' lines, not a write per task
    assert reserved_ports(tmp_path / "many") == reserved_ports(tmp_path / "single")
    every = [p for ports in reserved_ports(tmp_path / "many").values() for p in ports]
    assert len(every) == len(set(every))
    assert all(bindable(p) for p in every)


def journal(directory: Path) -> list[Any]:
    return [json.loads(line) for line in (directory / "ports.log").read_text().splitlines()]


def test_a_reservation_appends_its_own_line_and_another_process_reads_the_same(tmp_path: Path) -> None:
    for n in range(300):
        reserve_ports({"http": 1}, tmp_path, f"job{n}/0/main-0", 30000, 31000, lambda _: True)
    release_ports(tmp_path, [f"job{n}/0/main-0" for n in range(0, 300, 3)])
    before = (tmp_path / "ports.log").stat().st_size
    reserve_ports({"http": 2}, tmp_path, "late/0/main-0", 30000, 31000, lambda _: True)
    assert journal(tmp_path)[-1] == ["late/0/main-0", [30000, 30003]]  # the lowest two freed
    assert (tmp_path / "ports.log").stat().st_size - before == len('["late/0/main-0", [30000, 30003]]\n')
    mine = reserved_ports(tmp_path)
    ports._READ.clear()  # what a process that never read them sees
    assert reserved_ports(tmp_path) == mine
    assert len(mine) == 201


def test_a_long_journal_is_folded_into_the_snapshot(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(ports, "COMPACT_AFTER", 10)
    model: dict[str, list[int]] = {}
    for n in range(40):
        owner = f"job{n % 7}/0/main-0"
        if n % 3 == 2:
            release_ports(tmp_path, [owner])
            model.pop(owner, None)
        else:
            got = reserve_ports({"http": 1}, tmp_path, owner, 30000, 31000, lambda _: True)
            model[owner] = got["http"]
        assert reserved_ports(tmp_path) == model
    assert len(journal(tmp_path)) <= 10
    assert json.loads((tmp_path / "ports.json").read_text()) != {}
    ports._READ.clear()
    assert reserved_ports(tmp_path) == model


def test_a_line_torn_by_a_crash_is_cut_off(tmp_path: Path) -> None:
    reserve_ports({"http": 1}, tmp_path, "a/0/main-0", 30000, 31000, lambda _: True)
    with open(tmp_path / "ports.log", "ab") as log:
        log.write(b'["b/0/main-0", [300')  # the process died mid-append
    ports._READ.clear()
    assert reserved_ports(tmp_path) == {"a/0/main-0": [30000]}
    reserve_ports({"http": 1}, tmp_path, "c/0/main-0", 30000, 31000, lambda _: True)
    assert journal(tmp_path) == [["a/0/main-0", [30000]], ["c/0/main-0", [30001]]]
