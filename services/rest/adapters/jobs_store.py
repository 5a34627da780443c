"""Queries of the job read model: the submit-time row, lookups, and the filtered job list.

The list supports OpenPAI's filters (username, vc, state, keyword, tags, jobPriority),
ordering (``<field>,<ASC|DESC>``) and paging (offset, limit, withTotalCount), each backed by
an index in the schema so a list over 100,000 jobs stays an index scan.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from sqlalchemy import and_, delete, func, insert, or_, select
from sqlalchemy.exc import IntegrityError
from sqlalchemy.ext.asyncio import AsyncEngine
from sqlalchemy.sql.elements import ColumnElement

from services.rest.adapters.tables import job_attempts, jobs, task_attempts

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


async def insert_job(engine: AsyncEngine, row: Row) -> None:
    """Insert a new job row; raises DuplicateJobError when (username, name) is taken."""
    try:
        async with engine.begin() as conn:
            await conn.execute(insert(jobs).values(**row))
    except IntegrityError as exc:
        raise DuplicateJobError(f"{row['username']}~{row['name']}") from exc


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


async def tasks_of(engine: AsyncEngine, job_id: str, attempt: int | None = None) -> list[Row]:
    query = select(task_attempts).where(task_attempts.c.job_id == job_id)
    if attempt is not None:
        query = query.where(task_attempts.c.job_attempt == attempt)
    query = query.order_by(task_attempts.c.role, task_attempts.c.task_index, task_attempts.c.task_attempt)
    async with engine.connect() as conn:
        return [dict(row) for row in (await conn.execute(query)).mappings()]


def _conditions(flt: JobFilter) -> list[ColumnElement[bool]]:
    conditions: list[ColumnElement[bool]] = []
    if flt.usernames:
        conditions.append(jobs.c.username.in_(flt.usernames))
    if flt.virtual_clusters:
        conditions.append(jobs.c.virtual_cluster.in_(flt.virtual_clusters))
    if flt.states:
        conditions.append(jobs.c.state.in_(flt.states))
    if flt.keyword:
        pattern = f"%{flt.keyword.lower()}%"
        conditions.append(
            or_(
                func.lower(jobs.c.name).like(pattern),
                func.lower(jobs.c.username).like(pattern),
                func.lower(jobs.c.virtual_cluster).like(pattern),
            )
        )
    if flt.priorities:
        named = [p for p in flt.priorities if p != "default"]
        options: list[ColumnElement[bool]] = []
        if named:
            options.append(jobs.c.priority_class.in_(named))
        if "default" in flt.priorities:
            options.append(jobs.c.priority_class.is_(None))
        conditions.append(or_(*options))
    return conditions


def _tags_match(row: Row, flt: JobFilter) -> bool:
    tags = set(row["tags"] or [])
    if flt.tags_contain and not tags.intersection(flt.tags_contain):
        return False
    return not (flt.tags_not_contain and tags.intersection(flt.tags_not_contain))


async def list_jobs(engine: AsyncEngine, flt: JobFilter) -> tuple[Sequence[Row], int]:
    """The page of jobs the filter selects, and the total count across pages."""
    conditions = _conditions(flt)
    column = ORDER_FIELDS[flt.order_field]
    # OpenPAI: jobs without a completion time come last ascending, first descending.
    order = (
        [column.is_(None).desc(), column.desc()] if flt.descending else [column.is_(None).asc(), column.asc()]
    )
    # Ties read newest first, whatever the order asked for, as a person scanning a list expects.
    order += [jobs.c.submission_time.desc(), jobs.c.id.desc()]
    query = select(jobs).where(*conditions).order_by(*order)
    async with engine.connect() as conn:
        if flt.tags_contain or flt.tags_not_contain:
            # Tags are a JSON list; filtered here to stay portable across SQLite and PostgreSQL.
            rows = [dict(r) for r in (await conn.execute(query)).mappings() if _tags_match(dict(r), flt)]
            return rows[flt.offset : flt.offset + flt.limit], len(rows)
        total = await conn.scalar(select(func.count()).select_from(jobs).where(*conditions))
        page = await conn.execute(query.offset(flt.offset).limit(flt.limit))
        return [dict(r) for r in page.mappings()], int(total or 0)
