"""Submissions whose event never reached the bus: found and published, so every listed job runs.

A submission writes the job's row, then publishes `job.submitted`, then answers 202; a failed
publish removes the row again. A REST process killed between the row and the publish leaves a
row without its event: listed, WAITING, and never scheduled, while the client (whose retry got
409, "already exists") believes it accepted. This loop finds such rows (still in their first
state some seconds after submission, with no `job.submitted` on the stream) and publishes the
event from the row, with an event id derived from the job so two replicas repairing the same
job publish it once. A job's secrets were written before the row's event, so they are in KV
when its event appears. A row whose submission was refused, but which the database would not
delete then (its disk full), is in the inserter's ``withdrawn``: deleted here, never published.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
import uuid

import nats.errors
import structlog
from nats.js.errors import NotFoundError
from sqlalchemy import select
from sqlalchemy.exc import SQLAlchemyError
from sqlalchemy.ext.asyncio import AsyncEngine

from libs.protocol.events import JobSubmitted
from libs.protocol.jobs import stored_job_or_none
from libs.protocol.subjects import JOBS_STREAM, job_subject
from services.rest.adapters.bus import PublishFailedError, RestBus
from services.rest.adapters.jobs_store import delete_job
from services.rest.adapters.tables import jobs
from services.rest.core.states import SUB_STATE_WAITING

log = structlog.get_logger(__name__)

# A row younger than this may still be on its way to the bus in the request that wrote it.
GRACE_SECONDS = 20.0
EVERY_SECONDS = 15.0


async def _candidates(engine: AsyncEngine, older_than_ms: int) -> list[dict[str, object]]:
    query = select(
        jobs.c.id,
        jobs.c.username,
        jobs.c.name,
        jobs.c.virtual_cluster,
        jobs.c.priority,
        jobs.c.config,
        jobs.c.submission_time,
    ).where(
        jobs.c.state == "WAITING",
        jobs.c.sub_state == SUB_STATE_WAITING,
        jobs.c.attempt.is_(None),
        jobs.c.submission_time < older_than_ms,
    )
    async with engine.connect() as conn:
        return [dict(row._mapping) for row in await conn.execute(query)]


async def delete_withdrawn(engine: AsyncEngine, withdrawn: set[str]) -> None:
    """Delete the rows of refused submissions that the database would not delete at the time."""
    for job_id in sorted(withdrawn):
        try:
            await delete_job(engine, job_id)
        except SQLAlchemyError as exc:  # still no room: the next round tries again
            log.warning("a refused submission's row is not deleted yet", job_id=job_id, error=str(exc))
            return
        withdrawn.discard(job_id)
        log.info("a refused submission's row deleted", job_id=job_id)


async def repair_once(
    engine: AsyncEngine, bus: RestBus, seen: set[str], withdrawn: set[str] | None = None
) -> int:
    """Publish the event of every row that lacks it (never a withdrawn one); returns how many."""
    withdrawn = set() if withdrawn is None else withdrawn
    await delete_withdrawn(engine, withdrawn)
    if not bus.bus.is_connected:
        return 0
    older_than = int((time.time() - GRACE_SECONDS) * 1000)
    published = 0
    for row in await _candidates(engine, older_than):
        job_id = str(row["id"])
        if job_id in seen or job_id in withdrawn:
            continue
        try:
            await bus.bus.js.get_last_msg(JOBS_STREAM, job_subject(job_id, "job.submitted"))
            seen.add(job_id)
            continue
        except NotFoundError:
            pass
        config = stored_job_or_none(row["config"])
        if config is None:  # a row no submission wrote: nothing a service could read to publish
            log.warning("a stored job has no readable config; not published", job_id=job_id)
            seen.add(job_id)
            continue
        event = JobSubmitted(
            job_id=job_id,
            user=str(row["username"]),
            name=str(row["name"]),
            virtual_cluster=str(row["virtual_cluster"]),
            priority=int(row["priority"] or 0),  # type: ignore[call-overload]
            config=config,
            event_id=uuid.uuid5(uuid.NAMESPACE_URL, f"pai:submitted:{job_id}").hex,
        )
        await bus.publish(event)
        seen.add(job_id)
        published += 1
        log.warning("submission published after a restart", job_id=job_id, job=f"{event.user}~{event.name}")
    return published


async def repair_forever(
    engine: AsyncEngine, bus: RestBus, stop: asyncio.Event, withdrawn: set[str] | None = None
) -> None:
    seen: set[str] = set()
    while not stop.is_set():
        try:
            await repair_once(engine, bus, seen, withdrawn)
        except (nats.errors.Error, PublishFailedError, TimeoutError, SQLAlchemyError) as exc:
            log.warning("unpublished submissions not checked; retrying", error=f"{type(exc).__name__}: {exc}")
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(stop.wait(), EVERY_SECONDS)
