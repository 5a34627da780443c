"""Typed keys of the application's state, shared by the composition root and the routes."""

from __future__ import annotations

from aiohttp import web
from sqlalchemy.ext.asyncio import AsyncEngine

from services.rest.adapters.auth import Tokens
from services.rest.adapters.bus import RestBus
from services.rest.adapters.jobs_store import JobInserter
from services.rest.adapters.logins import LoginBackoff, Passwords
from services.rest.core.detail_cache import TaskRolesCache
from services.rest.settings import RestSettings

SETTINGS = web.AppKey("settings", RestSettings)
ENGINE = web.AppKey("engine", AsyncEngine)
# Reads only (list, detail, token checks): on SQLite separate connections that never wait for writes.
READ_ENGINE = web.AppKey("read_engine", AsyncEngine)
# Submissions' job rows, committed in groups.
JOB_INSERTER = web.AppKey("job_inserter", JobInserter)
BUS = web.AppKey("bus", RestBus)
TOKENS = web.AppKey("tokens", Tokens)
# Argon2 off the event loop, and the per-account backoff after failed logins (logins.py).
PASSWORDS = web.AppKey("passwords", Passwords)
LOGIN_BACKOFF = web.AppKey("login_backoff", LoginBackoff)
# The encoded taskRoles of large job details, while their task rows stay the same.
DETAIL_CACHE = web.AppKey("detail_cache", TaskRolesCache)
