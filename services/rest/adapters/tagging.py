"""Job tags in SQL: OpenPAI lets a job's owner or an admin add and remove tags after submission.

Tags live in the job row's JSON list, which the list's ``tagsContain`` / ``tagsNotContain``
filters read. The change is a read-modify-write inside one transaction with the row locked
(``FOR UPDATE`` on PostgreSQL; SQLite has a single writer), so two concurrent tag requests on
one job never lose each other's change.
"""

from __future__ import annotations

from sqlalchemy import select, update
from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine

from services.rest.adapters.tables import jobs


async def change_tag(engine: AsyncEngine, job_id: str, tag: str, *, add: bool) -> bool:
    """Add or remove ``tag``; False when removing a tag the job does not have."""
    async with engine.begin() as conn:
        return await change_tag_in(conn, job_id, tag, add=add)


async def change_tag_in(conn: AsyncConnection, job_id: str, tag: str, *, add: bool) -> bool:
    """The same inside a transaction the caller holds (the projection applying job.tagged)."""
    current = await conn.scalar(select(jobs.c.tags).where(jobs.c.id == job_id).with_for_update())
    tags = [str(t) for t in current or []]
    if add:
        if tag in tags:
            return True
        tags.append(tag)
    else:
        if tag not in tags:
            return False
        tags.remove(tag)
    await conn.execute(update(jobs).where(jobs.c.id == job_id).values(tags=tags))
    return True
