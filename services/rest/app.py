"""Composition root of the REST service: SQL, the bus, the projection consumer and the routes.

Resources live in ``cleanup_ctx`` so they open in order on start (database and migrations,
then the bus, then the projection) and close in reverse on shutdown: the consumer stops
fetching and finishes its message, the bus drains, the engine closes. Every background task
(the heartbeat, the copy of users' addresses, the VC names' watch, the projection under its
lease, the republisher of unpublished submissions) runs in the application's one task group
(libs/web/background.py): one that raises stops the service with its error, for `pai up` or
Kubernetes to start it again. Every route is served under ``/api`` and ``/rest-server/api``,
the two prefixes OpenPAI clients use.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

import structlog
from aiohttp import web

from libs.backbone.connecting import connect
from libs.backbone.consuming import by_job_id, consume
from libs.backbone.heartbeats import beat_forever
from libs.backbone.sealing import cipher_for
from libs.protocol.subjects import JOBS_STREAM
from libs.web.background import BACKGROUND, Background, background_ctx
from libs.web.serving import inherited_socket, serve_sites
from services.rest.adapters.auth import ensure_admin, load_or_create_secret
from services.rest.adapters.auth_cache import CachedTokens
from services.rest.adapters.bus import PROJECTION_DURABLE, RestBus
from services.rest.adapters.contacts import sync_until_done
from services.rest.adapters.database import create_engine, create_read_engine, migrate
from services.rest.adapters.jobs_store import JobInserter
from services.rest.adapters.leading import project_while_leading
from services.rest.adapters.logins import LoginBackoff, Passwords
from services.rest.adapters.node_sizes import node_sizes_ctx
from services.rest.adapters.unpublished import repair_forever
from services.rest.adapters.vc_names import vc_names_ctx
from services.rest.core.detail_cache import TaskRolesCache
from services.rest.handlers import MAX_BATCH, Projector, fences_on, projection_handler
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
from services.rest.routes.bodies import body_middleware
from services.rest.routes.middlewares import auth_middleware, error_middleware, text_middleware
from services.rest.routes.trailing_slash import accept_trailing_slash
from services.rest.settings import RestSettings

log = structlog.get_logger(__name__)

PREFIXES = ("/api", "/rest-server/api")
PROJECTION_KEY = web.AppKey("projection", asyncio.Task[None])


async def database_ctx(app: web.Application) -> AsyncIterator[None]:
    settings = app[SETTINGS]
    engine = create_engine(settings.resolved_database_url())
    await migrate(engine)
    await ensure_admin(engine, settings.admin_user, settings.admin_password, settings.data_dir)
    secret = await asyncio.to_thread(load_or_create_secret, settings.resolved_jwt_secret_file())
    reader = create_read_engine(settings.resolved_database_url(), engine)
    app[ENGINE], app[READ_ENGINE] = engine, reader
    # Token checks remembered briefly: see adapters/auth_cache.py for why that stays exact.
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
    beating = app[BACKGROUND].start(
        beat_forever(bus.nc, settings.service_name, stop_beating), name="heartbeat"
    )
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
        await Background.stop(beating)
        await bus.close()


async def contacts_ctx(app: web.Application) -> AsyncIterator[None]:
    """Copy every user's address to KV at start, repairing what a crash or an outage left behind."""
    task = app[BACKGROUND].start(sync_until_done(app[ENGINE], app[BUS].bus.js), name="user-contacts")
    yield
    # Bounded: a cancel that lands while the client opens a watch can be swallowed by it.
    await Background.stop(task, within=0)


async def projection_ctx(app: web.Application) -> AsyncIterator[None]:
    stop = asyncio.Event()
    # The scheduler's fences: a deposed leader's late decision is not shown (as it is not carried out).
    projector = Projector(app[ENGINE], fences=fences_on(app[BUS].bus.js))
    handler = projection_handler(projector)
    # Keyed by job: one job's events apply in order, different jobs' events concurrently; a job's
    # queued events are handed over together (pipeline), so they share a commit in stream order.
    # One replica projects at a time (adapters/leading.py); the others serve the API.
    task = app[BACKGROUND].start(
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
        ),
        name="projection",
    )
    app[PROJECTION_KEY] = task
    yield
    stop.set()
    await Background.stop(task, within=1.5)
    await projector.close()


async def unpublished_ctx(app: web.Application) -> AsyncIterator[None]:
    """Publish the event of any submission a killed REST process left unpublished."""
    stop = asyncio.Event()
    task = app[BACKGROUND].start(
        repair_forever(app[ENGINE], app[BUS], stop, app[JOB_INSERTER].withdrawn), name="unpublished"
    )
    yield
    stop.set()
    await Background.stop(task, within=2.0)


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
    app.cleanup_ctx.append(background_ctx)  # first: the task group outlives every resource
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


async def serve(settings: RestSettings, stop: asyncio.Event) -> None:
    """Serve the API until ``stop`` is set or a background task fails (then end with its error).

    It listens on the socket `pai up` handed down, else on ``host:port``, and beside it on the
    Unix socket the platform's own services use (libs/web/addresses.py). Requests still running
    at a stop get a second; `pai up` kills at 2.5 s anyway.
    """

    def sites(runner: web.AppRunner) -> list[web.BaseSite]:
        listening: list[web.BaseSite] = [
            web.SockSite(runner, inherited_socket(settings.rest_fd))
            if settings.rest_fd is not None
            else web.TCPSite(runner, settings.rest_host, settings.rest_port)
        ]
        if settings.rest_socket:
            listening.append(web.UnixSite(runner, str(settings.rest_socket)))
        return listening

    await serve_sites(build_app(settings), stop, sites, shutdown_timeout=1.0)
