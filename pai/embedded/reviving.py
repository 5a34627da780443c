"""Reviving the bus after its disk was full: a restart once there is room again.

nats-server (2.15, standalone) meets a full disk badly. A stream whose file write fails with
ENOSPC keeps that error: every later write to it fails the same way ("Critical write error",
then "JetStream failed to store a msg ... no space left on device") and goes unanswered, long
after space was freed; a server may also turn JetStream off ("JetStream out of resources, will
be DISABLED"). Either lasts until the server restarts, which reloads every stream from its
files, with nothing lost. Under `pai up` the store is in the data dir, whose disk tasks share:
one task's large file wedged submissions and left finished tasks RUNNING until `pai up` was
started again.

So the bus's supervisor (``NatsChild`` in supervising.py) asks a ``SpaceWatch`` every second
whether to restart it. Trouble is a line of the server's log, since its start, naming a lack of
space, or the store's filesystem seen full: the log is on that same disk, so lines written while
it is full may be lost. Once the filesystem has room again (``ROOM_BYTES``, or a tenth of a
smaller filesystem), the bus is restarted on its port and store as after a crash; services
reconnect and resume. A server that was not hurt loses nothing by the restart either.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from libs.backbone.space import LOW_SPACE_BYTES

CHECK_EVERY = 1.0
# Free space after which a restart is worth it: the restarted server has room to write, and
# the task that filled the disk is most likely gone. A small filesystem needs a tenth of itself.
ROOM_BYTES = 64 << 20
ROOM_SHARE = 10
# What the server logs when a write met a full disk (or it gave up JetStream for that reason).
MARKERS = (b"no space left on device", b"will be DISABLED")
# At most this much of the log is read per check; a flood beyond it is skipped.
LOG_READ_LIMIT = 1 << 20

Usage = Callable[[Path], tuple[int, int] | None]
"""Free bytes (for an unprivileged writer) and total bytes of the filesystem holding a path."""


def disk_usage(path: Path) -> tuple[int, int] | None:
    try:
        stats = os.statvfs(path)
    except OSError:
        return None
    return stats.f_bavail * stats.f_frsize, stats.f_blocks * stats.f_frsize


def room_needed(total: int, room: int = ROOM_BYTES) -> int:
    """Free bytes that count as room again on a filesystem of ``total`` bytes."""
    return min(room, max(total // ROOM_SHARE, LOW_SPACE_BYTES * 2))


@dataclass
class SpaceWatch:
    """Whether the bus whose store is ``store_dir`` and log ``log_path`` needs a restart."""

    store_dir: Path
    log_path: Path
    usage: Usage = disk_usage
    low: int = LOW_SPACE_BYTES
    room: int = ROOM_BYTES
    _offset: int = 0
    _trouble: str | None = None

    def started(self) -> None:
        """A new server: the last one's trouble is gone; its log is read from here on (a line
        the new one writes while it starts is read too)."""
        self._offset = self._log_size()
        self._trouble = None

    @property
    def trouble(self) -> str | None:
        """What the server met since its start (a log line, a full filesystem), if anything."""
        return self._trouble

    def restart_because(self) -> str | None:
        """Why the bus should be restarted now: trouble met since its start, and room again."""
        logged = self._read_log()
        if self._trouble is None:
            self._trouble = logged
        usage = self.usage(self.store_dir)
        if usage is None:
            return None
        free, total = usage
        if free < self.low and self._trouble is None:
            self._trouble = f"its filesystem was full ({free} bytes free)"
        if self._trouble is not None and free >= room_needed(total, self.room):
            return self._trouble
        return None

    def _log_size(self) -> int:
        try:
            return self.log_path.stat().st_size
        except OSError:
            return 0

    def _read_log(self) -> str | None:
        """The first line naming a lack of space among the whole lines logged since the last
        read; whole lines only, so a line half written is read next time."""
        size = self._log_size()
        if size < self._offset:  # a new file: read it from its start
            self._offset = 0
        if size == self._offset:
            return None
        try:
            with self.log_path.open("rb") as log:
                log.seek(self._offset)
                chunk = log.read(LOG_READ_LIMIT)
        except OSError:
            return None
        end = chunk.rfind(b"\n") + 1
        if end == 0:
            if len(chunk) < LOG_READ_LIMIT:
                return None  # a line still being written
            end = len(chunk)  # no line end in a whole chunk: skip it
        self._offset += end
        for line in chunk[:end].splitlines():
            if any(marker in line for marker in MARKERS):
                return line.decode(errors="replace").strip()
        return None
