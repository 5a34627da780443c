"""The use of nodes and tasks over the last hours, from the monitors' bounded history.

`GET /api/v2/cluster/metrics?node=N&since=S` (admin only, like the other cluster routes): CPU,
memory and mean GPU utilisation per node; `GET /api/v2/jobs/{user}~{job}/metrics?since=S` (the
job's owner or an admin): CPU, memory and GPU use per task. `since` is seconds since the epoch
(default: all the history, the last `keep` seconds). Each series is a list of `[time, value]`
points, one per `step` seconds (the average of the samples in that step); percents for CPU and
GPU, memory in percent for nodes and in bytes for tasks.

The monitors keep the history (services/monitor/core/history.py) and one of them answers over
request/reply; the question is bounded by a short timeout, and a bus that is down is answered at
once with 503 ServiceUnavailableError.
"""

from __future__ import annotations

from typing import Any

from aiohttp import web

from libs.protocol.subjects import METRICS_HISTORY_RPC
from services.rest.adapters.auth import require_admin, require_user
from services.rest.core.errors import NOT_JOB_READER, invalid_parameters
from services.rest.routes.availability import ask_service, since_param
from services.rest.routes.common import JOB_PATH, job_from_path

HISTORY_TIMEOUT = 3.0

routes = web.RouteTableDef()


async def ask_history(request: web.Request, doing: str, query: dict[str, Any]) -> dict[str, Any]:
    answer = await ask_service(
        request, doing, METRICS_HISTORY_RPC, query, service="monitor", wait=HISTORY_TIMEOUT
    )
    if not isinstance(answer, dict):
        raise invalid_parameters(f"The monitor refused the question: {answer}")
    return answer


@routes.get("/v2/cluster/metrics")
async def cluster_metrics(request: web.Request) -> web.Response:
    """Per node CPU, memory and GPU use over time (admin only); ``node`` picks one node."""
    require_admin(request)
    query = {"since": since_param(request, 0.0), "node": request.query.get("node") or None, "job_id": None}
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
    query = {"since": since_param(request, 0.0), "node": None, "job_id": str(job["id"])}
    answer = await ask_history(request, "Reading the job's metrics", query)
    return web.json_response(answer | {"jobName": f"{job['username']}~{job['name']}"})
