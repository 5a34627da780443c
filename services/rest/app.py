"""Composition root of the REST service: SQL, the bus, the projection consumer and the routes.

Resources live in ``cleanup_ctx`` so they open in order on start (database and migrations,
then the bus, then the projection) and close in reverse on shutdown: the consumer stops
fetching and finishes its message, the bus drains, the engine closes. Every route is served
under ``/api`` and ``/rest-server/api``, the two prefixes OpenPAI clients use.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Awaitable, Callable

import structlog
from aiohttp import web
from sqlalchemy.exc import DBAPIError

from libs.backbone.connecting import connect
from libs.backbone.consuming import by_job_id, consume
from libs.backbone.heartbeats import beat_forever
from libs.backbone.sealing import cipher_for
from libs.backbone.space import database_full
from libs.protocol.subjects import JOBS_STREAM
from services.rest.adapters.auth import PRINCIPAL, credentials_of, ensure_admin, load_or_create_secret
from services.rest.adapters.auth_cache import CachedTokens
from services.rest.adapters.bus import PROJECTION_DURABLE, RestBus
from services.rest.adapters.contacts import sync_until_done
from services.rest.adapters.database import create_engine, create_read_engine, migrate
from services.rest.adapters.jobs_store import JobInserter
from services.rest.adapters.leading import project_while_leading
from services.rest.adapters.logins import LoginBackoff, Passwords
from services.rest.adapters.node_sizes import node_sizes_ctx
from services.rest.adapters.projection import MAX_BATCH, Projector, fences_on, projection_handler
from services.rest.adapters.unpublished import repair_forever
from services.rest.adapters.vc_names import vc_names_ctx
from services.rest.core.detail_cache import TaskRolesCache
from services.rest.core.errors import NO_API, UNKNOWN, ApiError, invalid_parameters
from services.rest.core.text import unstorable
from services.rest.keys import (
    BUS,
    DETAIL_CACHE,
    ENGINE,
    JOB_INSERTER,
    LOGIN_BACKOFF,
    PASSWORDS,
    READ_ENGINE,
    SETTINGS,
    TOKENS,
)
from services.rest.routes import alert_history as alert_history_routes
from services.rest.routes import alert_rules as alert_rule_routes
from services.rest.routes import alerts as alert_routes
from services.rest.routes import auth as auth_routes
from services.rest.routes import cluster as cluster_routes
from services.rest.routes import events_proxy, marketplace_proxy, ratelimit, task_exec
from services.rest.routes import failure_rules as failure_rule_routes
from services.rest.routes import groups as group_routes
from services.rest.routes import job_events as job_event_routes
from services.rest.routes import jobs as job_routes
from services.rest.routes import logs as log_routes
from services.rest.routes import metrics as metric_routes
from services.rest.routes import oidc as oidc_routes
from services.rest.routes import openapi as openapi_routes
from services.rest.routes import storages as storage_routes
from services.rest.routes import tokens as token_routes
from services.rest.routes import usage as usage_routes
from services.rest.routes import users as user_routes
from services.rest.routes import virtual_clusters as vc_routes
from services.rest.routes.availability import BUS_ERRORS, DATABASE, bus_refused, out_of_space
from services.rest.routes.bodies import body_middleware
from services.rest.routes.trailing_slash import accept_trailing_slash
from services.rest.settings import RestSettings

log = structlog.get_logger(__name__)

PREFIXES = ("/api", "/rest-server/api")
# PostgreSQL's character_not_in_repertoire and untranslatable_character.
UNSTORABLE_TEXT_STATES = frozenset({"22021", "22P05"})
Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]
PROJECTION_KEY = web.AppKey("projection", asyncio.Task[None])


@web.middleware
async def error_middleware(request: web.Request, handler: Handler) -> web.StreamResponse:
    """Every error leaves in OpenPAI's {code, message} shape; unexpected ones are logged, not shown."""
    try:
        return await handler(request)
    except ApiError as exc:
        return web.json_response(exc.body(), status=exc.status, headers=exc.headers or None)
    except BUS_ERRORS as exc:
        log.warning("bus unavailable", method=request.method, path=request.path, error=repr(exc))
        error = bus_refused(request, f"{request.method} {request.path}", exc)
        return web.json_response(error.body(), status=error.status, headers=error.headers or None)
    except DBAPIError as exc:
        if (full := database_full(exc)) is not None:
            # What a route did before the refused write may stand: "nothing changed" is not said.
            log.warning("database full", method=request.method, path=request.path, error=full)
            refused = out_of_space(f"{request.method} {request.path}", DATABASE, full, nothing_changed=False)
            return web.json_response(refused.body(), status=refused.status)
        if getattr(exc.orig, "sqlstate", None) not in UNSTORABLE_TEXT_STATES:
            log.exception("request failed", method=request.method, path=request.path)
            return _internal_error()
        # A body field carried text the database cannot hold (NUL, or a character its encoding
        # lacks): the caller's input, so a 400 naming it rather than a 500.
        refused = invalid_parameters(
            "The request contains a NUL or a character that cannot be stored; "
            "names and values use printable text only."
        )
        return web.json_response(refused.body(), status=refused.status)
    except web.HTTPException as exc:
        if exc.status in (404, 405):
            missing = NO_API(f"No route serves {request.method} {request.path}.", url=request.path_qs)
            return web.json_response(missing.body(), status=exc.status)
        raise
    except Exception:
        log.exception("request failed", method=request.method, path=request.path)
        return _internal_error()


def _internal_error() -> web.Response:
    error = UNKNOWN("The service log has the details.", reason="Internal error.")
    return web.json_response(error.body(), status=error.status)


@web.middleware
async def text_middleware(request: web.Request, handler: Handler) -> web.StreamResponse:
    """Refuse text no name can contain before it reaches a query: a clear 400, never a 500."""
    if unstorable(request.path) or any(unstorable(k) or unstorable(v) for k, v in request.query.items()):
        raise invalid_parameters(
            "The path or the query contains a NUL or an invalid character; names use printable text only."
        )
    return await handler(request)


@web.middleware
async def auth_middleware(request: web.Request, handler: Handler) -> web.StreamResponse:
    found = credentials_of(request)
    if found is not None:
        principal = await request.app[TOKENS].check(found[1], found[0])
        if principal is not None:
            request[PRINCIPAL] = principal
    return await handler(request)


async def database_ctx(app: web.Application) -> AsyncIterator[None]:
    settings = app[SETTINGS]
    engine = create_engine(settings.resolved_database_url())
    await migrate(engine)
    await ensure_admin(engine, settings.admin_user, settings.admin_password, settings.data_dir)
    secret = await asyncio.to_thread(load_or_create_secret, settings.resolved_jwt_secret_file())
    reader = create_read_engine(settings.resolved_database_url(), engine)
    app[ENGINE], app[READ_ENGINE] = engine, reader
    # Token checks remembered briefly: see services/rest/adapters/auth_cache.py for why that stays exact.
    app[TOKENS] = CachedTokens.over(engine, secret, settings.auth_cache_seconds, reader=reader)
    app[JOB_INSERTER] = JobInserter(engine)
    yield
    await app[JOB_INSERTER].close()
    if reader is not engine:
        await reader.dispose()
    await engine.dispose()


async def bus_ctx(app: web.Application) -> AsyncIterator[None]:
    settings = app[SETTINGS]
    bus = await connect(settings, name=settings.service_name)
    stop_beating = asyncio.Event()
    beating = asyncio.create_task(beat_forever(bus.nc, settings.service_name, stop_beating))
    try:
        cipher = cipher_for(
            settings.secrets_key.get_secret_value() if settings.secrets_key else None,
            settings.secrets_key_file,
            settings.data_dir,
        )
        app[BUS] = await RestBus.provision(bus, cipher, settings.stream_replicas)
        yield
    finally:
        stop_beating.set()
        await beating
        await bus.close()


async def contacts_ctx(app: web.Application) -> AsyncIterator[None]:
    """Copy every user's address to KV at start, repairing what a crash or an outage left behind."""
    task = asyncio.create_task(sync_until_done(app[ENGINE], app[BUS].bus.js))
    yield
    task.cancel()
    # Bounded: a cancel that lands while the client opens a watch can be swallowed by it.
    await asyncio.wait([task], timeout=5.0)
    if task.done() and not task.cancelled():
        task.exception()  # retrieved, so it is not reported as never awaited


async def projection_ctx(app: web.Application) -> AsyncIterator[None]:
    stop = asyncio.Event()
    # The scheduler's fences: a deposed leader's late decision is not shown (as it is not carried out).
    projector = Projector(app[ENGINE], fences=fences_on(app[BUS].bus.js))
    handler = projection_handler(projector)
    # Keyed by job: one job's events apply in order, different jobs' events concurrently; a job's
    # queued events are handed over together (pipeline), so they share a commit in stream order.
    # One replica projects at a time (services/rest/adapters/leading.py); the others serve the API.
    task = asyncio.create_task(
        project_while_leading(
            app[BUS].bus,
            app[SETTINGS].instance,
            lambda turn: consume(
                app[BUS].bus.js,
                JOBS_STREAM,
                PROJECTION_DURABLE,
                handler,
                stop=turn,
                key=by_job_id,
                batch=64,
                pipeline=MAX_BATCH,
            ),
            stop,
        )
    )
    app[PROJECTION_KEY] = task
    yield
    stop.set()
    try:
        await asyncio.wait_for(asyncio.shield(task), timeout=1.5)
    except TimeoutError:
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task
    await projector.close()


async def unpublished_ctx(app: web.Application) -> AsyncIterator[None]:
    """Publish the event of any submission a killed REST process left unpublished."""
    stop = asyncio.Event()
    task = asyncio.create_task(repair_forever(app[ENGINE], app[BUS], stop, app[JOB_INSERTER].withdrawn))
    yield
    stop.set()
    await asyncio.wait([task], timeout=2.0)
    if not task.done():
        task.cancel()


async def _close_passwords(app: web.Application) -> None:
    app[PASSWORDS].close()


def build_app(settings: RestSettings) -> web.Application:
    """The aiohttp application; resources open when it starts (runner or test client)."""
    # Requests per address are counted before the token check, per user after it (ratelimit.py).
    by_address, by_user = ratelimit.middlewares(settings, PREFIXES)
    # Bodies are checked (size, encoding) once, before anything reads them (bodies.py).
    app = web.Application(
        middlewares=[
            error_middleware,
            by_address,
            body_middleware,
            text_middleware,
            auth_middleware,
            by_user,
        ],
        client_max_size=settings.limit_body_bytes,
    )
    app[SETTINGS] = settings
    app[DETAIL_CACHE] = TaskRolesCache()
    app[PASSWORDS], app[LOGIN_BACKOFF] = Passwords(), LoginBackoff()
    app.on_cleanup.append(_close_passwords)
    app.cleanup_ctx.append(database_ctx)
    app.cleanup_ctx.append(bus_ctx)
    app.cleanup_ctx.append(contacts_ctx)  # users' addresses for the alerter
    app.cleanup_ctx.append(vc_names_ctx)  # which VCs exist, for checking submissions
    app.cleanup_ctx.append(node_sizes_ctx)  # how large the nodes are, for checking submissions
    app.cleanup_ctx.append(projection_ctx)
    app.cleanup_ctx.append(unpublished_ctx)
    for prefix in PREFIXES:
        tables = (
            auth_routes.routes,
            oidc_routes.routes,
            # Before the job routes: job-attempts/healthz is not an attempt index.
            job_event_routes.routes,
            job_routes.routes,
            log_routes.routes,
            failure_rule_routes.routes,
            alert_routes.routes,
            alert_history_routes.routes,
            alert_rule_routes.routes,
            metric_routes.routes,
            user_routes.routes,
            group_routes.routes,
            token_routes.routes,
            openapi_routes.routes,
            storage_routes.routes,
            cluster_routes.routes,
            usage_routes.routes,
        )
        for table in tables:
            for route in table:
                if isinstance(route, web.RouteDef):
                    app.router.add_route(route.method, prefix + route.path, route.handler)
    vc_routes.register(app, PREFIXES)
    events_proxy.register(app, PREFIXES)  # live events and webhooks, when a gateway is named
    task_exec.register(app, PREFIXES)  # commands in running tasks, through the orchestrator
    marketplace_proxy.register(app)  # /marketplace/api/..., 503 unless PAI_MARKETPLACE_URL is set
    accept_trailing_slash(app)  # last: only what no route matched
    return app
