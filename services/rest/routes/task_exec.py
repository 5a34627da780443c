"""A command in a running task, over a WebSocket: `GET .../jobs/{user}~{job}/tasks/{role}/{index}/exec`.

REST does not run tasks; the orchestrator does, on the node where they run. So REST authorizes
(signed in; the job's owner or an admin, whatever PAI_JOB_DETAIL_PUBLIC says: a shell in a task
is its owner's) and checks that the job has that task and has not ended, then opens the same
WebSocket on the orchestrator's exec socket (``PAI_ORCHESTRATOR_URL``, a Unix socket in the
platform's private directory) and passes every message between the two unchanged
(libs/web/exec_stream.py says what they are). It answers the client's upgrade only once the
orchestrator says the command started: a task that does not run is a 409, not a stream.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any, NoReturn

import aiohttp
from aiohttp import WSMsgType, web

from libs.protocol.jobs import stored_job_or_none
from libs.web.addresses import base_url, client_session
from libs.web.exec_stream import command_problem, read_control, relay
from services.rest.adapters.auth import require_user
from services.rest.core.errors import (
    NO_TASK,
    NOT_TASK_ENTERER,
    SERVICE_UNAVAILABLE,
    TASK_NOT_RUNNING,
    invalid_parameters,
    unavailable,
)
from services.rest.keys import SETTINGS
from services.rest.routes.common import JOB_PATH, int_param, job_from_path, path_int

routes = web.RouteTableDef()

EXEC_PATH = JOB_PATH + "/tasks/{role}/{index}/exec"
FINAL_STATES = ("SUCCEEDED", "FAILED", "STOPPED")
START_TIMEOUT_S = 30.0
"""How long the orchestrator may take to say the command started (or why it cannot)."""
HEARTBEAT_S = 30.0
_SESSION: web.AppKey[aiohttp.ClientSession] = web.AppKey("orchestrator_session", aiohttp.ClientSession)


def _instances(job: dict[str, Any], role: str) -> int | None:
    config = stored_job_or_none(job.get("config"))
    spec = config.task_roles.get(role) if config is not None else None
    return spec.instances if spec is not None else None


def exec_query(request: web.Request) -> dict[str, Any]:
    """The command, the terminal and its size, checked (400 naming what is wrong)."""
    command = request.query.getall("command", [])
    problem = command_problem(command)
    if problem:
        raise invalid_parameters(f"command: {problem}.")
    tty = request.query.get("tty", "false").lower()
    if tty not in ("true", "false"):
        raise invalid_parameters(f"tty must be true or false, got {tty!r}.")
    rows = int_param(request.query.get("rows"), "rows", default=24, minimum=1, maximum=9999)
    cols = int_param(request.query.get("cols"), "cols", default=80, minimum=1, maximum=9999)
    return {"command": command, "tty": tty, "rows": str(rows), "cols": str(cols)}


@routes.get(EXEC_PATH)
async def exec_in_task(request: web.Request) -> web.StreamResponse:
    """Run a command in a running task (a WebSocket); its owner or an admin."""
    principal = require_user(request)
    job = await job_from_path(request)
    name = f"{job['username']}~{job['name']}"
    if not principal.admin and principal.username != job["username"]:
        raise NOT_TASK_ENTERER(
            "Only the job's owner or an administrator runs commands in its tasks.",
            user=principal.username,
            job=name,
        )
    role, index = request.match_info["role"], path_int(request, "index")
    instances = _instances(job, role)
    if instances is None or index >= instances:
        raise NO_TASK(task=f"{role}[{index}] of job {name}")
    query = exec_query(request)
    if job["state"] in FINAL_STATES:
        raise TASK_NOT_RUNNING(f"The job is {job['state']}.", task=f"{role}[{index}]", job=name)
    ws = web.WebSocketResponse(heartbeat=HEARTBEAT_S)
    if not ws.can_prepare(request).ok:
        raise invalid_parameters(
            "This route is a WebSocket: connect with Upgrade: websocket (`pai job exec` does)."
        )
    url = request.app[SETTINGS].orchestrator_url
    if not url or _SESSION not in request.app:
        raise SERVICE_UNAVAILABLE(
            reason="Commands in tasks are not served here: REST does not know the orchestrator's exec "
            "socket (PAI_ORCHESTRATOR_URL; `pai up` sets it)."
        )
    params = [("job_id", str(job["id"])), ("role", role), ("index", str(index))]
    params += [("command", argument) for argument in query.pop("command")] + list(query.items())
    try:
        upstream = await request.app[_SESSION].ws_connect(
            base_url(url) + "/exec", params=params, timeout=aiohttp.ClientWSTimeout(ws_close=5)
        )
    except (aiohttp.ClientError, OSError):
        raise unavailable("The orchestrator does not answer; check that it is running and retry.") from None
    try:
        first = await upstream.receive(START_TIMEOUT_S)
    except TimeoutError:
        await upstream.close()
        raise unavailable(
            f"The orchestrator did not start the command within {START_TIMEOUT_S:g}s."
        ) from None
    said = read_control(first.data) if first.type == WSMsgType.TEXT else None
    if said is None or said["type"] != "started":
        await upstream.close()
        _refusal(said, role, index, name)
    await ws.prepare(request)
    try:
        await relay(ws, upstream)
    finally:
        await upstream.close()
    return ws


def _refusal(said: dict[str, Any] | None, role: str, index: int, job: str) -> NoReturn:
    """The orchestrator's refusal as this API's error."""
    message = str((said or {}).get("message") or "the orchestrator closed the connection")
    status = (said or {}).get("status")
    if status == 409:
        raise TASK_NOT_RUNNING(message[:1].upper() + message[1:] + ".", task=f"{role}[{index}]", job=job)
    if status == 400:
        raise invalid_parameters(message[:1].upper() + message[1:] + ".")
    raise unavailable(f"The command could not start: {message}.")


def register(app: web.Application, prefixes: tuple[str, ...]) -> None:
    """The route under each prefix, and a client of the orchestrator's socket when one is named."""
    url = app[SETTINGS].orchestrator_url
    if url:

        async def session_ctx(app: web.Application) -> AsyncIterator[None]:
            async with client_session(url) as session:
                app[_SESSION] = session
                yield

        app.cleanup_ctx.append(session_ctx)
    for prefix in prefixes:
        for route in routes:
            if isinstance(route, web.RouteDef):
                app.router.add_route(route.method, prefix + route.path, route.handler)
