"""An aiosqlite connection whose small calls run on the event loop's own thread.

aiosqlite runs every call (cursor, execute, fetch, close, commit) on a worker thread and hands
the result back to the event loop. Each hand-off waits for the loop to come round to it, and for
the GIL, which a busy loop gives up only every switch interval (5 ms): a transaction of a dozen
statements then spends most of its time in hand-offs, not in SQLite, and the one writer
connection a process has becomes its bottleneck (bench/RESULTS.md, sustained submissions).

SQLite's own work for a small statement takes microseconds, far less than a hand-off. Here each
call runs at once on the caller's thread, except what may take long: an ``executemany`` of many
rows, an ``executescript``, and the rest of a result past its first ``INLINE_ROWS`` rows, which
go to aiosqlite's worker thread as before so that the loop keeps serving meanwhile. Calls never
overlap: SQLAlchemy awaits each one before the next, so the sqlite3 connection (opened with
``check_same_thread=False``) is used by one thread at a time.

A call made on the loop's thread can still wait for SQLite's write lock, held by another process
(the marketplace shares the embedded database file): that wait blocks the loop, bounded by the
connection's busy timeout, and such transactions are short.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Awaitable, Callable
from typing import Any

import aiosqlite

INLINE_ROWS = 256
"""Rows fetched on the loop's thread before the rest of a result goes to the worker thread; also
the most parameter sets of an ``executemany`` run on the loop's thread."""


_on_worker: Callable[..., Awaitable[Any]] = aiosqlite.Connection._execute
"""aiosqlite's own call: queued to the connection's worker thread (its types left out)."""


class LoopConnection(aiosqlite.Connection):
    """aiosqlite's connection with small calls made on the calling thread (see the module)."""

    async def _execute(self, fn: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
        if not self._running or not self._connection:
            raise ValueError("Connection closed")
        name = getattr(fn, "__name__", "")
        if name == "fetchall" and isinstance(getattr(fn, "__self__", None), sqlite3.Cursor):
            cursor: sqlite3.Cursor = fn.__self__  # type: ignore[attr-defined]
            rows = cursor.fetchmany(INLINE_ROWS)
            if len(rows) == INLINE_ROWS:
                rows.extend(await _on_worker(self, cursor.fetchall))
            return rows
        if name == "executescript" or (name == "executemany" and _many(args)):
            return await _on_worker(self, fn, *args, **kwargs)
        return fn(*args, **kwargs)


def _many(args: tuple[Any, ...]) -> bool:
    rows = args[1] if len(args) > 1 else None
    return not isinstance(rows, list | tuple) or len(rows) > INLINE_ROWS


def connect(path: str, *, timeout: float) -> LoopConnection:
    """An unopened connection to the database file at ``path`` (await it to open)."""

    def connector() -> sqlite3.Connection:
        return sqlite3.connect(path, timeout=timeout, check_same_thread=False)

    connection = LoopConnection(connector, 64)
    connection._thread.daemon = True  # as SQLAlchemy makes aiosqlite's: never holds up an exit
    return connection
