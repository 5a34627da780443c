"""Queries of the job read model: the submit-time row, lookups, and the filtered job list.

The list supports OpenPAI's filters (username, vc, state, keyword, tags, jobPriority),
ordering (``<field>,<ASC|DESC>``) and paging (offset, limit, withTotalCount), each backed by
an index in the schema so a list over 100,000 jobs stays an index scan.
"""

from __future__ import annotations

import functools
import json
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from sqlalchemy import Text, and_, cast, delete, func, insert, literal_column, or_, select, type_coerce
from sqlalchemy.exc import IntegrityError, SQLAlchemyError
from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine
from sqlalchemy.sql.elements import ColumnElement

from libs.backbone.grouping import GroupCommit
from libs.backbone.sql import read_json
from services.rest.adapters.tables import SEARCH_SEPARATOR, job_attempts, jobs, task_attempts

Row = dict[str, Any]

# OpenPAI's order fields -> columns.
ORDER_FIELDS = {
    "jobName": jobs.c.name,
    "submissionTime": jobs.c.submission_time,
    "username": jobs.c.username,
    "vc": jobs.c.virtual_cluster,
    "retries": jobs.c.retries,
    "totalTaskNumber": jobs.c.total_tasks,
    "totalGpuNumber": jobs.c.total_gpus,
    "state": jobs.c.state,
    "completionTime": jobs.c.completed_time,
    "jobPriority": jobs.c.priority_class,
}
DEFAULT_LIMIT = 5000
MAX_LIMIT = 50000


class DuplicateJobError(Exception):
    """A job with this user and name exists already."""


@dataclass(frozen=True)
class JobFilter:
    """The list query, already validated by the route."""

    usernames: tuple[str, ...] = ()
    virtual_clusters: tuple[str, ...] = ()
    states: tuple[str, ...] = ()
    keyword: str | None = None
    tags_contain: tuple[str, ...] = ()
    tags_not_contain: tuple[str, ...] = ()
    priorities: tuple[str, ...] = ()
    offset: int = 0
    limit: int = DEFAULT_LIMIT
    order_field: str = "submissionTime"
    descending: bool = True
    with_total_count: bool = False


async def insert_job(engine: AsyncEngine, row: Row) -> None:
    """Insert a new job row; raises DuplicateJobError when (username, name) is taken."""
    try:
        async with engine.begin() as conn:
            await conn.execute(insert(jobs).values(**row))
    except IntegrityError as exc:
        raise DuplicateJobError(f"{row['username']}~{row['name']}") from exc


async def insert_jobs(engine: AsyncEngine, rows: Sequence[Row]) -> list[None]:
    """Insert new job rows in one transaction; all or nothing (IntegrityError on any duplicate)."""
    async with engine.begin() as conn:
        await conn.execute(insert(jobs), list(rows))
    return [None] * len(rows)


class JobInserter:
    """Submissions' rows, inserted in groups (see libs/backbone/grouping.py); a duplicate fails alone.

    A row whose event the bus refused is withdrawn again. When the database refuses that delete
    too (its disk full, as the bus's often is), the row's id is kept in ``withdrawn``: the loop
    that publishes rows left without their event (services/rest/adapters/unpublished.py) deletes it
    later and never publishes it, so a submission answered "not done" never runs.
    """

    def __init__(self, engine: AsyncEngine, *, max_batch: int = 64) -> None:
        self._engine = engine
        self._group: GroupCommit[Row, None] = GroupCommit(
            functools.partial(insert_jobs, engine), functools.partial(insert_job, engine), max_batch=max_batch
        )
        self.withdrawn: set[str] = set()

    async def insert(self, row: Row) -> None:
        """Insert one job row; raises DuplicateJobError when (username, name) is taken."""
        await self._group.submit(row)

    async def withdraw(self, job_id: str) -> bool:
        """Delete the row of a submission that was refused; False when the database refused the
        delete, and the row is kept in ``withdrawn`` to be deleted later (see above)."""
        try:
            await delete_job(self._engine, job_id)
        except SQLAlchemyError:
            self.withdrawn.add(job_id)
            return False
        return True

    async def close(self) -> None:
        await self._group.close()


async def delete_job(engine: AsyncEngine, job_id: str) -> None:
    async with engine.begin() as conn:
        await conn.execute(delete(jobs).where(jobs.c.id == job_id))


async def find_job(engine: AsyncEngine, username: str, name: str) -> Row | None:
    async with engine.connect() as conn:
        result = await conn.execute(
            select(jobs).where(and_(jobs.c.username == username, jobs.c.name == name))
        )
        row = result.mappings().first()
    return dict(row) if row is not None else None


async def attempts_of(engine: AsyncEngine, job_id: str) -> list[Row]:
    async with engine.connect() as conn:
        result = await conn.execute(
            select(job_attempts)
            .where(job_attempts.c.job_id == job_id)
            .order_by(job_attempts.c.attempt.desc())
        )
        return [dict(row) for row in result.mappings()]


def _tasks_query(
    job_id: str, attempt: int | None, after: int | None, columns: Sequence[Any] = (task_attempts,)
) -> Any:
    query = select(*columns).where(task_attempts.c.job_id == job_id)
    if attempt is not None:
        query = query.where(task_attempts.c.job_attempt == attempt)
    if after is not None:
        query = query.where(task_attempts.c.revision > after)
    return query.order_by(task_attempts.c.role, task_attempts.c.task_index, task_attempts.c.task_attempt)


async def tasks_of(
    engine: AsyncEngine, job_id: str, attempt: int | None = None, *, after: int | None = None
) -> list[Row]:
    """The job's task rows (of one attempt), or only those written after revision `after`
    (the job's `tasks_revision` when what is kept of them was read)."""
    return await _read_rows(engine, _tasks_query(job_id, attempt, after))


async def _read_rows(engine: AsyncEngine, query: Any) -> list[Row]:
    """The query's rows as dicts (built from plain rows: a large job's tasks are thousands)."""
    async with engine.connect() as conn:
        result = await conn.execute(query)
        columns = tuple(result.keys())
        return [dict(zip(columns, row, strict=True)) for row in result]


# The task row's JSON columns read as their text, for task_rows to decode.
_JSON_COLUMNS = ("ports", "exit_spec")
_AS_TEXT = tuple(
    type_coerce(column, Text).label(column.name) if column.name in _JSON_COLUMNS else column
    for column in task_attempts.c
)


async def task_rows(
    engine: AsyncEngine, job_id: str, attempt: int | None = None, *, after: int | None = None
) -> list[Row]:
    """``tasks_of`` for a job detail's task table, which only reads them: each distinct text of
    a JSON column is decoded once, so rows holding equal values share one decoded object. A
    large job's tasks mostly hold the same ports and exit spec, and decoding each row's was half
    the time of reading ten thousand of them."""
    rows = await _read_rows(engine, _tasks_query(job_id, attempt, after, _AS_TEXT))
    decoded: dict[str, Any] = {}
    for row in rows:
        for column in _JSON_COLUMNS:
            text = row[column]
            if isinstance(text, str):  # (asyncpg decodes json columns itself)
                value = decoded.get(text)
                if value is None:
                    value = decoded[text] = read_json(text)
                row[column] = value
    return rows


# What a list item shows (views.job_summary); the config and exit details stay on disk.
LIST_COLUMNS = (
    jobs.c.id,
    jobs.c.username,
    jobs.c.name,
    jobs.c.virtual_cluster,
    jobs.c.priority_class,
    jobs.c.tags,
    jobs.c.state,
    jobs.c.sub_state,
    jobs.c.execution_type,
    jobs.c.retries,
    jobs.c.retries_user,
    jobs.c.retries_platform,
    jobs.c.retries_resource,
    jobs.c.retry_delay_ms,
    jobs.c.submission_time,
    jobs.c.created_time,
    jobs.c.launched_time,
    jobs.c.completed_time,
    jobs.c.exit_code,
    jobs.c.total_gpus,
    jobs.c.total_tasks,
    jobs.c.total_task_roles,
)


# A keyword holding one of these could match across two of search_text's fields.
_SPANNING = (SEARCH_SEPARATOR, "%", "_", "\\")


def _tags_any(dialect: str, tags: tuple[str, ...]) -> ColumnElement[bool]:
    """The job has at least one of ``tags``, read from the JSON text of its list.

    The list is stored as ``json.dumps`` writes it (``["a", "b"]``), so a tag is an element
    exactly when its JSON string stands right after ``[`` or ``, `` and right before ``,`` or
    ``]``: a quote there cannot be inside another string, where quotes are escaped. Comparing
    JSON text never decodes it, so a tag holding NUL (valid JSON, but no SQL text) matches as
    exactly as any other. Jobs whose list is empty are skipped first: the partial index of the
    others (ix_jobs_tagged, tags included) is all that is read; the SQL literal lets the planner
    match the index's condition whatever the parameters are.
    """
    text_of = cast(jobs.c.tags, Text)
    find = func.strpos if dialect == "postgresql" else func.instr
    encoded = {json.dumps(tag) for tag in tags} | {json.dumps(tag, ensure_ascii=False) for tag in tags}
    needles = sorted(
        f"{start}{value}{end}" for value in encoded for start in ("[", ", ") for end in (",", "]")
    )
    found = or_(*(find(text_of, needle) > 0 for needle in needles))
    return and_(text_of != literal_column("'[]'"), found)


def _conditions(flt: JobFilter, dialect: str) -> list[ColumnElement[bool]]:
    conditions: list[ColumnElement[bool]] = []
    if flt.usernames:
        conditions.append(jobs.c.username.in_(flt.usernames))
    if flt.virtual_clusters:
        conditions.append(jobs.c.virtual_cluster.in_(flt.virtual_clusters))
    if flt.states:
        conditions.append(jobs.c.state.in_(flt.states))
    if flt.keyword:
        keyword = flt.keyword.lower()
        pattern = f"%{keyword}%"
        columns = (jobs.c.name, jobs.c.username, jobs.c.virtual_cluster)
        if dialect == "sqlite":
            # SQLite's LIKE ignores case just as far as its lower() does (ASCII letters), so the
            # columns are compared as stored, all three read from ix_jobs_search.
            conditions.append(or_(*(column.like(pattern) for column in columns)))
        elif not any(char in keyword for char in _SPANNING):
            # Cannot match across the separator, so one test of the lower-cased text says the
            # same as the three below, from the trigram index or ix_jobs_search.
            conditions.append(jobs.c.search_text.like(pattern))
        else:
            conditions.append(or_(*(func.lower(column).like(pattern) for column in columns)))
    if flt.tags_contain:
        conditions.append(_tags_any(dialect, flt.tags_contain))
    if flt.priorities:
        named = [p for p in flt.priorities if p != "default"]
        options: list[ColumnElement[bool]] = []
        if named:
            options.append(jobs.c.priority_class.in_(named))
        if "default" in flt.priorities:
            options.append(jobs.c.priority_class.is_(None))
        conditions.append(or_(*options))
    return conditions


def _order(flt: JobFilter) -> list[ColumnElement[Any]]:
    column = ORDER_FIELDS[flt.order_field]
    order: list[ColumnElement[Any]] = []
    if column.nullable:
        # OpenPAI: jobs without a completion time come last ascending, first descending. The
        # same expression leads the field's index, so both backends read it in order.
        order.append(column.is_(None).desc() if flt.descending else column.is_(None).asc())
    order.append(column.desc() if flt.descending else column.asc())
    # Ties read newest first, whatever the order asked for, as a person scanning a list expects.
    # (A repeated key would change nothing but would keep SQLite from reading the index in order.)
    if column is not jobs.c.submission_time:
        order.append(jobs.c.submission_time.desc())
    return [*order, jobs.c.id.desc()]


async def list_jobs(engine: AsyncEngine, flt: JobFilter) -> tuple[Sequence[Row], int | None]:
    """The page of jobs the filter selects, and the total count across pages when asked for.

    The page's ids are chosen first, reading only the index that serves the filter and the
    order (every order field leads an index ending in submission time and id), and only those
    rows are then read; a deep offset skips index entries, not rows.
    """
    dialect = engine.dialect.name
    conditions = _conditions(flt, dialect)
    excluded = _tags_any(dialect, flt.tags_not_contain) if flt.tags_not_contain else None
    order = _order(flt)
    selected = conditions if excluded is None else [*conditions, ~excluded]
    page_ids = (
        select(jobs.c.id).where(*selected).order_by(*order).offset(flt.offset).limit(flt.limit).subquery()
    )
    query = select(*LIST_COLUMNS).join_from(jobs, page_ids, jobs.c.id == page_ids.c.id).order_by(*order)
    async with engine.connect() as conn:
        total = None
        if flt.with_total_count:
            total = await _count(conn, conditions)
            if excluded is not None:
                # Jobs without any of the tags: all the others minus those with one, two counts
                # the indexes answer, instead of testing every job's tags.
                total -= await _count(conn, [*conditions, excluded])
            if total <= flt.offset:
                return [], total  # nothing on this page: the page query would say the same
        page = await conn.execute(query)
        return [dict(r) for r in page.mappings()], total


async def _count(conn: AsyncConnection, conditions: list[ColumnElement[bool]]) -> int:
    return int(await conn.scalar(select(func.count()).select_from(jobs).where(*conditions)) or 0)
