"""A full disk, recognised: which failed write was refused for want of space, and where.

A write can fail because the disk under the database or under the bus's store is full, and the
caller should say so (REST answers 507 Insufficient Storage, not a 500) instead of guessing. The
signs differ by store:

- SQLite says SQLITE_FULL ("database or disk is full"); PostgreSQL says SQLSTATE 53100
  (disk_full); a file write says ENOSPC (or EDQUOT, a quota).
- JetStream answers a refused write with an API error: 10047 "insufficient storage resources
  available", 10023 "insufficient resources", or a store failure whose text carries the
  operating system's "no space left on device". But a stream whose file write failed with ENOSPC
  does not answer the publish at all (nats-server 2.15: the publisher times out), so where the
  bus's store is on this machine (``pai up``) its filesystem's free space is the sign.
"""

from __future__ import annotations

import errno
import os
import sqlite3
from pathlib import Path

import nats.js.errors

NO_SPACE = "no space left on device"
# Below this many free bytes a filesystem counts as full: a write of a few pages fails there.
LOW_SPACE_BYTES = 1 << 20
SQLITE_FULL_TEXT = "database or disk is full"
POSTGRES_DISK_FULL = "53100"
# JetStream's error codes for a write refused for want of storage (nats-server's errors.json).
JETSTREAM_NO_STORAGE = frozenset({10023, 10047})
_STORAGE_WORDS = (NO_SPACE, "insufficient storage", "insufficient resources")
_FULL_ERRNOS = frozenset({errno.ENOSPC, errno.EDQUOT})


def _chain(exc: BaseException) -> list[BaseException]:
    """The error, what it wraps (SQLAlchemy's ``orig``) and its causes, each once."""
    seen: list[BaseException] = []
    todo: list[BaseException | None] = [exc]
    while todo:
        current = todo.pop()
        if current is None or any(current is known for known in seen):
            continue
        seen.append(current)
        orig = getattr(current, "orig", None)
        todo += [orig if isinstance(orig, BaseException) else None, current.__cause__, current.__context__]
    return seen


def database_full(exc: BaseException) -> str | None:
    """The database's own words when ``exc`` is a write it refused for want of space, else None."""
    for error in _chain(exc):
        if isinstance(error, sqlite3.Error) and (
            getattr(error, "sqlite_errorcode", None) == sqlite3.SQLITE_FULL or SQLITE_FULL_TEXT in str(error)
        ):
            return SQLITE_FULL_TEXT
        if getattr(error, "sqlstate", None) == POSTGRES_DISK_FULL or getattr(error, "pgcode", None) == (
            POSTGRES_DISK_FULL
        ):
            return str(error).splitlines()[0] if str(error) else "disk full"
        if isinstance(error, OSError) and error.errno in _FULL_ERRNOS:
            return os.strerror(error.errno).lower()
    return None


def bus_full(exc: BaseException) -> str | None:
    """JetStream's words when ``exc`` carries its refusal of a write for want of storage, else None."""
    for error in _chain(exc):
        if isinstance(error, nats.js.errors.APIError):
            description = (error.description or "").strip()
            worded = any(word in description.lower() for word in _STORAGE_WORDS)
            if error.err_code in JETSTREAM_NO_STORAGE or worded:
                return f"{description or 'insufficient storage'} (JetStream error {error.err_code})"
        if isinstance(error, OSError) and error.errno in _FULL_ERRNOS:
            return os.strerror(error.errno).lower()
    return None


def free_bytes(path: Path) -> int | None:
    """Bytes an unprivileged writer may still use on the filesystem holding ``path``; None when
    it cannot be told (no such path)."""
    try:
        stats = os.statvfs(path)
    except OSError:
        return None
    return stats.f_bavail * stats.f_frsize


def filesystem_full(path: Path, low: int = LOW_SPACE_BYTES) -> bool:
    """Whether the filesystem holding ``path`` has (almost) no space left."""
    free = free_bytes(path)
    return free is not None and free < low
