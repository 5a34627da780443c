"""A write refused for want of space is told from other failures, and where it happened."""

from __future__ import annotations

import errno
import sqlite3
from pathlib import Path

import nats.errors
import nats.js.errors
import pytest
from sqlalchemy.exc import OperationalError

from libs.backbone.errors import TemporaryError
from libs.backbone.space import bus_full, database_full, filesystem_full, free_bytes


def sqlite_full_error(tmp_path: Path) -> sqlite3.Error:
    """SQLite's own refusal: a database that may not grow past its pages."""
    connection = sqlite3.connect(tmp_path / "full.db")
    try:
        connection.execute("CREATE TABLE t (v TEXT)")
        pages = connection.execute("PRAGMA page_count").fetchone()[0]
        connection.execute(f"PRAGMA max_page_count = {pages}")
        with pytest.raises(sqlite3.Error) as refused:
            connection.executemany("INSERT INTO t VALUES (?)", [("x" * 2000,)] * 100)
        return refused.value
    finally:
        connection.close()


class PostgresError(Exception):
    """What asyncpg raises, as far as the check reads it: the SQLSTATE."""

    def __init__(self, message: str, sqlstate: str) -> None:
        super().__init__(message)
        self.sqlstate = sqlstate


def wrapped(orig: BaseException) -> OperationalError:
    """The error as SQLAlchemy hands it to the caller."""
    return OperationalError("INSERT INTO jobs ...", {}, orig)


def test_sqlites_own_refusal_is_a_full_database_wrapped_or_not(tmp_path: Path) -> None:
    error = sqlite_full_error(tmp_path)
    assert error.sqlite_errorcode == sqlite3.SQLITE_FULL
    assert database_full(error) == "database or disk is full"
    assert database_full(wrapped(error)) == "database or disk is full"


@pytest.mark.parametrize(
    ("error", "said"),
    [
        pytest.param(
            wrapped(PostgresError("could not extend file: No space left on device", "53100")),
            "could not extend file: No space left on device",
            id="postgresql-disk-full",
        ),
        pytest.param(
            OSError(errno.ENOSPC, "No space left on device"), "no space left on device", id="enospc"
        ),
        pytest.param(OSError(errno.EDQUOT, "Disk quota exceeded"), "disk quota exceeded", id="quota"),
        pytest.param(wrapped(sqlite3.OperationalError("database is locked")), None, id="sqlite-locked"),
        pytest.param(wrapped(PostgresError("deadlock detected", "40P01")), None, id="postgresql-deadlock"),
        pytest.param(OSError(errno.EACCES, "Permission denied"), None, id="permission-denied"),
    ],
)
def test_a_database_write_refused_for_space_is_told_from_other_failures(
    error: BaseException, said: str | None
) -> None:
    assert database_full(error) == said


def published(refusal: BaseException) -> BaseException:
    """The refusal as the publishing code re-raises it, the bus's error as its cause."""
    try:
        raise refusal
    except BaseException as cause:
        try:
            raise TemporaryError("JetStream unavailable for pai.job.x.job.submitted") from cause
        except TemporaryError as error:
            return error


@pytest.mark.parametrize(
    ("error", "said"),
    [
        pytest.param(
            nats.js.errors.ServerError(
                code=500, err_code=10047, description="insufficient storage resources available"
            ),
            "insufficient storage resources available (JetStream error 10047)",
            id="insufficient-storage-10047",
        ),
        pytest.param(
            published(
                nats.js.errors.ServiceUnavailableError(
                    code=503, err_code=10023, description="insufficient resources"
                )
            ),
            "insufficient resources (JetStream error 10023)",
            id="insufficient-resources-10023-as-a-cause",
        ),
        pytest.param(
            nats.js.errors.ServiceUnavailableError(
                code=503, err_code=10077, description="write 1.blk: no space left on device"
            ),
            "write 1.blk: no space left on device (JetStream error 10077)",
            id="store-failed-for-space",
        ),
        pytest.param(
            nats.js.errors.ServerError(
                code=500, err_code=10028, description="insufficient memory resources available"
            ),
            None,
            id="memory-is-not-storage",
        ),
        pytest.param(
            nats.js.errors.ServiceUnavailableError(
                code=503, err_code=10076, description="JetStream not enabled"
            ),
            None,
            id="jetstream-not-enabled",
        ),
        pytest.param(published(nats.errors.TimeoutError()), None, id="a-timeout-says-nothing-by-itself"),
    ],
)
def test_a_bus_write_refused_for_storage_is_told_from_other_failures(
    error: BaseException, said: str | None
) -> None:
    assert bus_full(error) == said


def test_free_space_is_read_where_the_path_is_and_unknown_where_there_is_none(tmp_path: Path) -> None:
    free = free_bytes(tmp_path)
    assert free is not None
    assert free > 0
    assert free_bytes(tmp_path / "missing") is None
    assert filesystem_full(tmp_path, low=0) is False
    assert filesystem_full(tmp_path, low=free + (1 << 40)) is True
    assert filesystem_full(tmp_path / "missing") is False
