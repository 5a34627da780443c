"""Helpers every route module shares: finding the job a path names, parsing small inputs."""

from __future__ import annotations

from typing import Any

from aiohttp import web

from services.rest.adapters.auth import PRINCIPAL, Principal, require_user
from services.rest.adapters.jobs_store import find_job
from services.rest.core.errors import NO_JOB, NOT_JOB_READER, invalid_parameters
from services.rest.keys import READ_ENGINE, SETTINGS

# A job is addressed as {user}~{job}; user names never contain "~", job names may.
JOB_PATH = "/v2/jobs/{user:[^~/]+}~{job:[^/]+}"
# The largest number a SQL integer column or query argument holds (SQLite and PostgreSQL bigint).
INT64_MAX = 2**63 - 1


async def job_from_path(request: web.Request) -> dict[str, Any]:
    user, name = request.match_info["user"], request.match_info["job"]
    job = await find_job(request.app[READ_ENGINE], user, name)
    if job is None:
        raise NO_JOB(job=f"{user}~{name}")
    return job


async def readable_job(request: web.Request, *, signed_in: bool = False) -> dict[str, Any]:
    """The job a path names, if the caller may read its detail, attempts, events, config or logs.

    Private (the default, `PAI_JOB_DETAIL_PUBLIC=false`): only the job's owner and admins; an
    anonymous caller gets 401 before the job is even looked up, so names do not leak. Public
    (OpenPAI's behaviour): anyone, or any signed-in user where `signed_in` asks for one.
    """
    public = request.app[SETTINGS].job_detail_public
    principal: Principal | None = request.get(PRINCIPAL)
    if signed_in or not public:
        principal = require_user(request)
    job = await job_from_path(request)
    if not public and principal is not None and not principal.admin and job["username"] != principal.username:
        raise NOT_JOB_READER(
            "On this cluster only a job's owner and admins read its details, attempts, events, config "
            "and logs (PAI_JOB_DETAIL_PUBLIC=false).",
            user=principal.username,
            job=f"{job['username']}~{job['name']}",
        )
    return job


def int_param(
    value: str | None, name: str, *, default: int, minimum: int = 0, maximum: int | None = None
) -> int:
    if value is None or value == "":
        return default
    maximum = INT64_MAX if maximum is None else maximum
    try:
        number = int(value)
    except ValueError:
        raise invalid_parameters(f"{name} must be an integer, got {value!r}.") from None
    if number < minimum or (maximum is not None and number > maximum):
        bound = f"between {minimum} and {maximum}" if maximum is not None else f"at least {minimum}"
        raise invalid_parameters(f"{name} must be {bound}, got {number}.")
    return number


def path_int(request: web.Request, name: str) -> int:
    return int_param(request.match_info[name], name, default=0)
