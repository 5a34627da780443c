"""Port numbers for tasks: a pure assignment and a node-local reservation around it.

Tasks share the host network (as OpenPAI's pods do), so two tasks on one node must never be given
the same port. The orchestrator's local executor calls ``reserve_ports`` for each task before it
writes the task's spec: the reservation file, guarded by an exclusive lock, makes concurrent
reservations on one node see each other, and a bind test skips ports some other program holds.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import json
import os
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path

DEFAULT_PORT_LOW = 20000
DEFAULT_PORT_HIGH = 40000
"""OpenPAI schedules task ports in [20000, 40000)."""

ALWAYS_REQUESTED = ("ssh", "http")
"""OpenPAI gives every task one ssh and one http port even when the job asks for none."""

_LOCK_FILE = "ports.lock"
_RESERVATIONS_FILE = "ports.json"


class PortsExhaustedError(Exception):
    """Not enough free ports in the range for the request."""


def with_default_ports(requests: dict[str, int]) -> dict[str, int]:
    """The request plus OpenPAI's implicit ssh and http ports (one each unless asked for more)."""
    merged = dict(requests)
    for label in ALWAYS_REQUESTED:
        merged.setdefault(label, 1)
    return merged


def assign_ports(
    requests: dict[str, int], used: set[int], low: int, high: int, *, start: int | None = None
) -> dict[str, list[int]]:
    """Give each label its count of distinct ports from [low, high), none of them in ``used``.

    Deterministic: the lowest free ports, labels in the request's order; the search begins at
    ``start`` when every port below it is known to be used. Raises PortsExhaustedError when the
    range has too few free ports.
    """
    if low < 1 or high > 65536 or low >= high:
        raise ValueError(f"port range [{low}, {high}) must be non-empty and within 1..65535")
    for label, count in requests.items():
        if count < 0:
            raise ValueError(f"ports.{label}: the count must be 0 or more, not {count}")
    needed = sum(requests.values())
    free = _free_ports(used, max(low, start or low), high)
    chosen: list[int] = []
    for port in free:
        if len(chosen) == needed:
            break
        chosen.append(port)
    if len(chosen) < needed:
        raise PortsExhaustedError(
            f"{needed} ports requested but only {len(chosen)} are free in [{low}, {high})"
        )
    result: dict[str, list[int]] = {}
    at = 0
    for label, count in requests.items():
        result[label] = chosen[at : at + count]
        at += count
    return result


def _free_ports(used: set[int], low: int, high: int) -> Iterator[int]:
    return (p for p in range(low, high) if p not in used)


def port_is_bindable(port: int, host: str = "0.0.0.0") -> bool:
    """Whether a TCP socket can bind ``port`` on ``host`` right now."""
    # `_socket` is the C module that `socket` wraps: importing `socket` itself turns its constants
    # into enums, about 2 ms of every task's start-up, for nothing this bind test uses.
    import _socket

    sock = _socket.socket(_socket.AF_INET, _socket.SOCK_STREAM)
    try:
        # Lingering TIME_WAIT connections of an ended task must not count as a conflict.
        sock.setsockopt(_socket.SOL_SOCKET, _socket.SO_REUSEADDR, 1)
        try:
            sock.bind((host, port))
        except OSError as exc:
            if exc.errno in (errno.EADDRINUSE, errno.EACCES):
                return False
            raise
    finally:
        sock.close()
    return True


@contextlib.contextmanager
def _locked(directory: Path) -> Iterator[dict[str, list[int]]]:
    directory.mkdir(parents=True, exist_ok=True)
    with open(directory / _LOCK_FILE, "a+") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        try:
            path = directory / _RESERVATIONS_FILE
            table: dict[str, list[int]] = json.loads(path.read_text()) if path.exists() else {}
            before = {owner: list(ports) for owner, ports in table.items()}
            yield table
            if table != before:
                tmp = path.with_suffix(f".{os.getpid()}.tmp")
                tmp.write_text(json.dumps(table, sort_keys=True))
                os.replace(tmp, path)
        finally:
            fcntl.flock(lock, fcntl.LOCK_UN)


def reserve_ports(
    requests: dict[str, int],
    directory: Path,
    owner: str,
    low: int = DEFAULT_PORT_LOW,
    high: int = DEFAULT_PORT_HIGH,
    bindable: Callable[[int], bool] = port_is_bindable,
) -> dict[str, list[int]]:
    """Reserve ports for ``owner`` (e.g. ``<job uid>/<attempt>/<role>-<index>``) on this node.

    Ports reserved by any other owner in ``directory`` and ports that cannot be bound on 0.0.0.0
    are skipped. Reserving again for the same owner replaces its earlier reservation.
    """
    return reserve_many({owner: requests}, directory, low, high, bindable)[owner]


def reserve_many(
    wanted: dict[str, dict[str, int]],
    directory: Path,
    low: int = DEFAULT_PORT_LOW,
    high: int = DEFAULT_PORT_HIGH,
    bindable: Callable[[int], bool] = port_is_bindable,
) -> dict[str, dict[str, list[int]]]:
    """``reserve_ports`` for several owners (an attempt's tasks) under one lock, with one read and
    one write of the reservations: reserving them one by one rewrote every reservation of the
    node for each task, so a job's reservations cost the square of its size."""
    with _locked(directory) as table:
        for owner in wanted:
            table.pop(owner, None)
        used = {p for ports in table.values() for p in ports}
        start = low
        reserved: dict[str, dict[str, list[int]]] = {}
        for owner, requests in wanted.items():
            while True:
                assigned = assign_ports(requests, used, low, high, start=start)
                taken = [p for ports in assigned.values() for p in ports if not bindable(p)]
                if not taken:
                    break
                used.update(taken)
            chosen = sorted(p for ports in assigned.values() for p in ports)
            used.update(chosen)
            if chosen:  # every port below the highest chosen is now used
                start = chosen[-1] + 1
            table[owner] = chosen
            reserved[owner] = assigned
        return reserved


def release_ports(directory: Path, owners: Iterable[str]) -> None:
    """Forget the reservations of ``owners`` (when their tasks have ended)."""
    with _locked(directory) as table:
        for owner in owners:
            table.pop(owner, None)


def reserved_ports(directory: Path) -> dict[str, list[int]]:
    """Every current reservation, by owner."""
    with _locked(directory) as table:
        return {owner: list(ports) for owner, ports in table.items()}
