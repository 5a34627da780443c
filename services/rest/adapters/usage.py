"""The sums behind a usage report, each one aggregate query over the job history.

Aggregate queries, the same SQL on SQLite and PostgreSQL, each grouped by user or VC in the
database so no job row travels to Python. One pass over the jobs that ended in the period
counts them by final state, sums the running time of those wholly inside it (recorded when they
ended) times their CPU cores and GPU thousandths, and the waits of those that first ran in it;
small ones add the jobs still running or across the period's edges (attempt by attempt, clipped
to it) and the waits of jobs that first ran in it but did not end in it. Migration 0008 indexes
the jobs by when they ended, holding all these read of a job, so a report over 100,000 jobs reads
one range of index entries, not rows.
"""

from __future__ import annotations

from typing import Any

from sqlalchemy import BigInteger, Float, and_, case, cast, func, literal, or_, select
from sqlalchemy.ext.asyncio import AsyncEngine
from sqlalchemy.sql.elements import ColumnElement

from services.rest.adapters.tables import job_attempts, jobs
from services.rest.core.usage import Period


def _key(by: str) -> ColumnElement[Any]:
    # Grouped by an expression, not the bare column: SQLite's planner would otherwise walk every
    # job through an index ordered by user or VC, to group without sorting, rather than read the
    # period's range of ix_jobs_usage_completed and sort the few groups.
    column = jobs.c.username if by == "user" else jobs.c.virtual_cluster
    return func.coalesce(column, "")


def _bigint(value: int) -> ColumnElement[Any]:
    return literal(value, BigInteger)


async def usage_sums(
    engine: AsyncEngine, by: str, period: Period, username: str | None
) -> tuple[list[Any], list[Any], list[Any]]:
    """(ran, ended, started) as services/rest/core/usage.py's ``report`` reads them; only
    ``username``'s jobs when one is given."""
    key = _key(by)
    start, end = _bigint(period.start_ms), _bigint(period.end_ms)
    mine = [jobs.c.username == username] if username is not None else []

    # The jobs that ended in the period, by final state (only a final state sets completed_time),
    # and, of them, those that also first ran in it: all their running time counts, which the
    # projection recorded when they ended. Read from the index alone, no attempt joined.
    # The same pass sums the waits of those that first ran in the period.
    first_ran = jobs.c.launched_time >= start
    inside = and_(first_ran, jobs.c.run_ms.is_not(None))
    wait_ms = cast(jobs.c.launched_time - jobs.c.submission_time, Float)
    ended_in_period = (
        select(
            key,
            jobs.c.state,
            func.count(),
            func.sum(case((inside, cast(jobs.c.total_gpu_milli * jobs.c.run_ms, Float)), else_=0.0)),
            func.sum(case((inside, cast(jobs.c.total_cpus * jobs.c.run_ms, Float)), else_=0.0)),
            func.sum(case((inside, 1), else_=0)),
            func.sum(case((first_ran, wait_ms), else_=0.0)),
            func.sum(case((first_ran, 1), else_=0)),
        )
        .where(jobs.c.completed_time >= start, jobs.c.completed_time < end, *mine)
        .group_by(key, jobs.c.state)
    )
    # The others that ran in it (across its start or end, or still running): each attempt's
    # running time clipped to the period. An attempt ends when it says so, or when its job
    # ended without saying; one still running counts up to now.
    ended_at = func.coalesce(job_attempts.c.completed_time, jobs.c.completed_time, _bigint(period.now_ms))
    clipped_end = case((ended_at < end, ended_at), else_=end)
    clipped_start = case((job_attempts.c.launched_time > start, job_attempts.c.launched_time), else_=start)
    running_ms = cast(clipped_end - clipped_start, Float)

    def ran_across(*where: ColumnElement[bool]) -> Any:
        return (
            select(
                key,
                func.sum(jobs.c.total_gpu_milli * running_ms),
                func.sum(jobs.c.total_cpus * running_ms),
                func.count(func.distinct(jobs.c.id)),
            )
            .select_from(jobs.join(job_attempts, job_attempts.c.job_id == jobs.c.id))
            .where(*where, job_attempts.c.launched_time < end, ended_at > start, *mine)
            .group_by(key)
        )

    # Two queries, each a range of the index by completion time (an OR of both would be a scan).
    still_running = ran_across(jobs.c.completed_time.is_(None), jobs.c.launched_time < end)
    across_edges = ran_across(
        jobs.c.completed_time >= start,
        jobs.c.launched_time < end,
        or_(jobs.c.launched_time < start, jobs.c.completed_time >= end, jobs.c.run_ms.is_(None)),
    )

    # The waits of the jobs that first ran in the period but did not end in it (still running,
    # or ended after it): two small ranges of the same index.
    def started_elsewhere(*where: ColumnElement[bool]) -> Any:
        return (
            select(key, func.sum(wait_ms), func.count())
            .where(*where, jobs.c.launched_time >= start, jobs.c.launched_time < end, *mine)
            .group_by(key)
        )

    not_ended = started_elsewhere(jobs.c.completed_time.is_(None))
    ended_after = started_elsewhere(jobs.c.completed_time >= end)
    async with engine.connect() as conn:
        ended = list(await conn.execute(ended_in_period))
        ran = [(group, gpu, cpu, count) for group, _, _, gpu, cpu, count, _, _ in ended]
        ran += [row for query in (still_running, across_edges) for row in await conn.execute(query)]
        finished = [(group, state, count) for group, state, count, *_ in ended]
        started = [(group, wait, count) for group, *_, wait, count in ended]
        started += [row for query in (not_ended, ended_after) for row in await conn.execute(query)]
        return ran, finished, started
