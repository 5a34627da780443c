"""The use of nodes and tasks over the last hours, from the monitors' bounded history.

`GET /api/v2/cluster/metrics?node=N&since=S` (admin only, like the other cluster routes): CPU,
memory and mean GPU utilisation per node; `GET /api/v2/jobs/{user}~{job}/metrics?since=S` (the
job's owner or an admin): CPU, memory and GPU use per task. `since` is seconds since the epoch
(default: all the history, the last `keep` seconds). Each series is a list of `[time, value]`
points, one per `step` seconds (the average of the samples in that step); percents for CPU and
GPU, memory in percent for nodes and in bytes for tasks.

The monitors keep the history (services/monitor/history.py) and one of them answers over
request/reply; the question is bounded by a short timeout, and a bus that is down is answered at
once with 503 ServiceUnavailableError.
"""

from __future__ import annotations

import json
import math
from typing import Any

import nats.errors
from aiohttp import web

from libs.protocol.subjects import METRICS_HISTORY_RPC
from services.rest.auth import require_admin, require_user
from services.rest.availability import RETRY_AFTER_SECONDS, connected_bus
from services.rest.errors import NOT_JOB_READER, SERVICE_UNAVAILABLE, ApiError, invalid_parameters
from services.rest.routes.common import JOB_PATH, job_from_path

HISTORY_TIMEOUT = 3.0

routes = web.RouteTableDef()


def _since(request: web.Request) -> float:
    value = request.query.get("since", "")
    if value == "":
        return 0.0
    try:
        since = float(value)
    except ValueError:
        raise invalid_parameters(
            f"since must be a time in seconds since the epoch (e.g. 1767225600), got {value!r}."
        ) from None
    if not math.isfinite(since) or since < 0:
        raise invalid_parameters(f"since must be a non-negative number of seconds, got {value!r}.")
    return since


def monitor_silent(doing: str) -> ApiError:
    error = SERVICE_UNAVAILABLE(
        reason=f"{doing} was not done: no monitor answered within {HISTORY_TIMEOUT:g}s; check that the "
        f"monitor is running (`pai up` starts it). Retry in {RETRY_AFTER_SECONDS} s.",
    )
    error.headers["Retry-After"] = str(RETRY_AFTER_SECONDS)
    return error


async def ask_history(request: web.Request, doing: str, query: dict[str, Any]) -> dict[str, Any]:
    nc = connected_bus(request, doing).bus.nc
    try:
        reply = await nc.request(METRICS_HISTORY_RPC, json.dumps(query).encode(), timeout=HISTORY_TIMEOUT)
    except (TimeoutError, nats.errors.TimeoutError, nats.errors.NoRespondersError):
        raise monitor_silent(doing) from None
    answer = json.loads(reply.data or b"{}")
    if not isinstance(answer, dict) or "error" in answer:
        raise invalid_parameters(f"The monitor refused the question: {answer.get('error', answer)}")
    return answer


@routes.get("/v2/cluster/metrics")
async def cluster_metrics(request: web.Request) -> web.Response:
    """Per node CPU, memory and GPU use over time (admin only); ``node`` picks one node."""
    require_admin(request)
    query = {"since": _since(request), "node": request.query.get("node") or None, "job_id": None}
    return web.json_response(await ask_history(request, "Reading the cluster's metrics", query))


@routes.get(JOB_PATH + "/metrics")
async def job_metrics(request: web.Request) -> web.Response:
    """Per task CPU, memory and GPU use over time (the job's owner or an admin)."""
    principal = require_user(request)
    job = await job_from_path(request)
    if not principal.admin and principal.username != job["username"]:
        raise NOT_JOB_READER(
            "Only the job's owner or an administrator reads its metrics.",
            user=principal.username,
            job=f"{job['username']}~{job['name']}",
        )
    query = {"since": _since(request), "node": None, "job_id": str(job["id"])}
    answer = await ask_history(request, "Reading the job's metrics", query)
    return web.json_response(answer | {"jobName": f"{job['username']}~{job['name']}"})
