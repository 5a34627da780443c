"""A job's events and the job-history health check.

Events are read from the job's facts on ``PAI_JOBS`` (the stream keeps them), mapped into
OpenPAI's event shape by ``core/job_events.py``. Like a job's detail, they are readable by its
owner and admins, or by anyone when job details are public (``PAI_JOB_DETAIL_PUBLIC``).
``job-attempts/healthz`` tells OpenPAI clients whether attempt history is served: it always is
here, the read model keeps every attempt.
"""

from __future__ import annotations

from aiohttp import web

from libs.protocol.subjects import JOBS_STREAM, job_subject
from services.rest.adapters.history import HistoryUnavailableError, read_events
from services.rest.core.errors import invalid_parameters, unavailable
from services.rest.core.job_events import TYPES, job_events
from services.rest.routes.availability import connected_bus
from services.rest.routes.common import JOB_PATH, readable_job

routes = web.RouteTableDef()


@routes.get(JOB_PATH + "/events")
async def get_job_events(request: web.Request) -> web.Response:
    """Events of a job, newest first; ``type`` keeps only Normal or Warning ones."""
    wanted = request.query.get("type") or None
    if wanted is not None and wanted not in TYPES:
        raise invalid_parameters(f"type must be one of {', '.join(TYPES)}, got {wanted!r}.")
    job = await readable_job(request)
    try:
        history = await read_events(
            connected_bus(request, "Reading job events").bus.js, JOBS_STREAM, job_subject(job["id"], ">")
        )
    except HistoryUnavailableError:
        raise unavailable(
            "The job event history cannot be read now (the message bus did not answer); retry."
        ) from None
    events = [event for event in job_events(job, history) if wanted is None or event["type"] == wanted]
    return web.json_response({"totalCount": len(events), "data": events})


@routes.get(JOB_PATH + "/job-attempts/healthz")
async def job_attempts_healthz(request: web.Request) -> web.Response:
    """Whether job attempt history is served (always: the read model keeps every attempt)."""
    del request
    return web.Response(text="ok")
