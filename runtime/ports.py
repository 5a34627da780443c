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
_JOURNAL_FILE = "ports.log"
COMPACT_AFTER = 1024
"""Journal lines after which (and after twice the reservations) the snapshot is written again."""


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


class _Read:
    """What this process last read of a directory's reservations (valid while the files match).
    A plain class: the runtime imports this module, and dataclasses would cost its start-up."""

    def __init__(
        self,
        snapshot: tuple[int, int, int] | None,  # the snapshot's inode, mtime and size, if it exists
        journal_inode: int | None,
        offset: int,  # bytes of the journal read
        lines: int,  # lines in the journal
        table: dict[str, list[int]],
    ) -> None:
        self.snapshot = snapshot
        self.journal_inode = journal_inode
        self.offset = offset
        self.lines = lines
        self.table = table


_READ: dict[Path, _Read] = {}
"""Per directory, used only while holding its lock (so by one thread at a time)."""


def _identity(path: Path) -> tuple[int, int, int] | None:
    try:
        found = path.stat()
    except FileNotFoundError:
        return None
    return found.st_ino, found.st_mtime_ns, found.st_size


class _Reservations:
    """The node's reservations while its lock is held.

    They are a snapshot (``ports.json``) and a journal of changes after it (``ports.log``, one
    JSON line ``[owner, ports]``, or ``[owner, null]`` for a release). A change appends a line
    instead of rewriting every reservation of the node, so reserving for a job costs the same
    with a thousand tasks running as with none. This process keeps what it read and reads only
    the journal's new lines, unless the snapshot changed. Past ``COMPACT_AFTER`` lines (and twice
    the reservations) the snapshot is written again and the journal emptied. A crash between the
    two leaves lines the new snapshot already holds: each line sets its owner's state, so reading
    them again changes nothing. A line torn by a crash is cut off before the next append.
    """

    def __init__(self, directory: Path) -> None:
        self.directory = directory
        self.snapshot_path = directory / _RESERVATIONS_FILE
        self.journal_path = directory / _JOURNAL_FILE
        self.changes: dict[str, list[int] | None] = {}
        snapshot = _identity(self.snapshot_path)
        cached = _READ.pop(directory, None)
        journal = _identity(self.journal_path)
        if (
            cached is not None
            and cached.snapshot == snapshot
            and journal is not None
            and cached.journal_inode == journal[0]
            and journal[2] >= cached.offset
        ):
            self.read = cached
        else:
            table = json.loads(self.snapshot_path.read_text()) if snapshot is not None else {}
            self.read = _Read(snapshot, journal[0] if journal else None, 0, 0, table)
        if journal is not None and journal[2] > self.read.offset:
            self._replay(journal[0])
        self.table = self.read.table

    def _replay(self, inode: int) -> None:
        with open(self.journal_path, "rb") as journal:
            journal.seek(self.read.offset)
            data = journal.read()
        whole = data[: data.rfind(b"\n") + 1]
        for line in whole.splitlines():
            owner, ports = json.loads(line)
            if ports is None:
                self.read.table.pop(owner, None)
            else:
                self.read.table[owner] = ports
            self.read.lines += 1
        self.read.offset += len(whole)
        self.read.journal_inode = inode
        if len(whole) < len(data):  # a line torn by a crash: never completed, so never in force
            os.truncate(self.journal_path, self.read.offset)

    def set(self, owner: str, ports: list[int]) -> None:
        self.table[owner] = self.changes[owner] = ports

    def drop(self, owner: str) -> None:
        if self.table.pop(owner, None) is not None:
            self.changes[owner] = None

    def save(self) -> None:
        """Append the changes (and compact when the journal has grown long); remember the read."""
        if self.changes:
            data = b"".join(
                json.dumps([owner, ports]).encode() + b"\n" for owner, ports in self.changes.items()
            )
            fd = os.open(self.journal_path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
            try:
                written = 0
                while written < len(data):
                    written += os.write(fd, data[written:])
                self.read.journal_inode = os.fstat(fd).st_ino
            finally:
                os.close(fd)
            self.read.offset += len(data)
            self.read.lines += len(self.changes)
            if self.read.lines > max(COMPACT_AFTER, 2 * len(self.table)):
                tmp = self.snapshot_path.with_suffix(f".{os.getpid()}.tmp")
                tmp.write_text(json.dumps(self.table, sort_keys=True))
                os.replace(tmp, self.snapshot_path)
                os.truncate(self.journal_path, 0)
                self.read.offset = self.read.lines = 0
                self.read.snapshot = _identity(self.snapshot_path)
        _READ[self.directory] = self.read


@contextlib.contextmanager
def _locked(directory: Path) -> Iterator[_Reservations]:
    directory.mkdir(parents=True, exist_ok=True)
    with open(directory / _LOCK_FILE, "a+") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        try:
            reservations = _Reservations(directory)
            yield reservations
            reservations.save()
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
    """``reserve_ports`` for several owners (an attempt's tasks) under one lock and with one
    append to the journal, instead of a lock and an append per task."""
    with _locked(directory) as reservations:
        for owner in wanted:
            reservations.drop(owner)
        used = {p for ports in reservations.table.values() for p in ports}
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
            reservations.set(owner, chosen)
            reserved[owner] = assigned
        return reserved


def release_ports(directory: Path, owners: Iterable[str]) -> None:
    """Forget the reservations of ``owners`` (when their tasks have ended)."""
    with _locked(directory) as reservations:
        for owner in owners:
            reservations.drop(owner)


def reserved_ports(directory: Path) -> dict[str, list[int]]:
    """Every current reservation, by owner."""
    with _locked(directory) as reservations:
        return {owner: list(ports) for owner, ports in reservations.table.items()}
