"""The tasks of the read model that hold a place on a node now: placed or running, not ended.

These are what a Kubernetes cluster would show as the job's pods; the cluster routes list
them in Kubernetes' shape.
"""

from __future__ import annotations

from typing import Any

from sqlalchemy import and_, select
from sqlalchemy.ext.asyncio import AsyncEngine

from services.rest.adapters.tables import jobs, task_attempts
from services.rest.core.states import FINAL


async def live_tasks(engine: AsyncEngine) -> list[dict[str, Any]]:
    """Each live task's row with its job's user, name, id, virtual cluster and config."""
    query = (
        select(
            task_attempts,
            jobs.c.username,
            jobs.c.name.label("job_name"),
            jobs.c.virtual_cluster,
            jobs.c.config,
            jobs.c.priority_class,
        )
        .join(jobs, jobs.c.id == task_attempts.c.job_id)
        .where(
            and_(
                task_attempts.c.completed_time.is_(None),
                task_attempts.c.job_attempt == jobs.c.attempt,
                jobs.c.state.not_in(sorted(FINAL)),
            )
        )
        .order_by(jobs.c.username, jobs.c.name, task_attempts.c.role, task_attempts.c.task_index)
    )
    async with engine.connect() as conn:
        return [dict(row) for row in (await conn.execute(query)).mappings()]
