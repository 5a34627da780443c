"""Task logs through the API: where a task's logs are, and their content piece by piece.

OpenPAI answers the log route with a list of locations (all, stdout, stderr); here each
location is a route of this API that asks the orchestrator, which owns the log files, over
NATS request/reply. Content comes with offsets so a client can follow a growing log.
"""

from __future__ import annotations

from aiohttp import web

from services.rest.adapters.auth import require_user
from services.rest.adapters.bus import LogsUnavailableError
from services.rest.adapters.jobs_store import tasks_of
from services.rest.core.errors import NO_TASK_LOG, invalid_parameters, unavailable
from services.rest.keys import READ_ENGINE, SETTINGS
from services.rest.routes.availability import connected_bus
from services.rest.routes.common import JOB_PATH, int_param, path_int, readable_job

routes = web.RouteTableDef()

TASK_LOGS = JOB_PATH + "/attempts/{attempt}/taskRoles/{role}/taskIndex/{index}/attempts/{task_attempt}/logs"
LOG_FILES = ("all", "stdout", "stderr")
# One piece of log per request; a follower asks again from the returned `nextOffset`.
DEFAULT_LOG_LIMIT = 64 * 1024
MAX_LOG_LIMIT = 4 * 1024 * 1024
# The orchestrator reads at most this much per request (a reply must fit a bus message).
ORCHESTRATOR_LOG_LIMIT = 1024 * 1024


async def _task(request: web.Request) -> tuple[dict[str, object], int, str, int]:
    job = await readable_job(request, signed_in=True)
    attempt, role, index = (
        path_int(request, "attempt"),
        request.match_info["role"],
        path_int(request, "index"),
    )
    task_attempt = path_int(request, "task_attempt")
    tasks = await tasks_of(request.app[READ_ENGINE], str(job["id"]), attempt)
    if not any(
        t["role"] == role and t["task_index"] == index and t["task_attempt"] == task_attempt for t in tasks
    ):
        raise NO_TASK_LOG(
            f"Job {job['username']}~{job['name']} has no task {role}[{index}] "
            f"in attempt {attempt}.{task_attempt}."
        )
    return job, attempt, role, index


@routes.get(TASK_LOGS)
async def task_log_locations(request: web.Request) -> web.Response:
    require_user(request)
    await _task(request)
    base = request.path
    return web.json_response({"locations": [{"name": name, "uri": f"{base}/{name}"} for name in LOG_FILES]})


@routes.get(TASK_LOGS + "/{file}")
async def task_log_content(request: web.Request) -> web.Response:
    require_user(request)
    job, attempt, role, index = await _task(request)  # access first: a bad name tells a stranger nothing
    file = request.match_info["file"]
    if file not in LOG_FILES:
        raise invalid_parameters(f"log {file!r} is not one of: {', '.join(LOG_FILES)}.")
    limit = min(
        int_param(
            request.query.get("limit"), "limit", default=DEFAULT_LOG_LIMIT, minimum=1, maximum=MAX_LOG_LIMIT
        ),
        ORCHESTRATOR_LOG_LIMIT,
    )
    tail = request.query.get("tailMode", "").lower() == "true"
    # In tail mode the orchestrator reads the last `limit` bytes (a negative offset counts from the end).
    offset = -limit if tail else int_param(request.query.get("offset"), "offset", default=0)
    query = {
        "job_id": job["id"],
        "attempt": attempt,
        "role": role,
        "index": index,
        "file": file,
        "offset": offset,
        "limit": limit,
    }
    settings = request.app[SETTINGS]
    try:
        answer = await connected_bus(request, "Reading a task log").request_logs(
            query, settings.logs_timeout_seconds
        )
    except LogsUnavailableError:
        raise unavailable(
            f"The orchestrator did not answer the log request within {settings.logs_timeout_seconds:g}s; "
            "check that it is running and retry."
        ) from None
    if "error" in answer:
        raise NO_TASK_LOG(f"Task {role}[{index}]: {answer['error']}")
    content = str(answer.get("content", ""))
    start = int(answer.get("offset", 0))
    return web.json_response(
        {
            "content": content,
            "offset": start,
            # Where the next read starts: a follower asks again from here until it reaches `size`.
            "nextOffset": int(answer.get("nextOffset", start + len(content.encode()))),
            "size": int(answer.get("size", 0)),
        }
    )
