"""Composition root of the marketplace: SQL and its migrations, the starters, the bus, the routes.

The marketplace serves ``/marketplace/api/...`` on its own port or Unix socket; behind the
platform's address rest passes that path here (``services/rest/routes/passing.py``), and on
Kubernetes the Ingress does. Resources open in order in ``cleanup_ctx``: the database (migrated,
then seeded), the HTTP client for REST, then the bus (item events out, ``job.submitted`` in).
The heartbeat and the use counter run in the application's one task group
(libs/web/background.py): one that raises stops the marketplace with its error, for `pai up` or
Kubernetes to start it again.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

import structlog
from aiohttp import web

from libs.backbone.connecting import connect
from libs.backbone.heartbeats import beat_forever
from libs.backbone.sql import create_engine
from libs.backbone.topology import ensure_topology
from libs.web.addresses import client_session
from libs.web.background import BACKGROUND, Background, background_ctx
from libs.web.errors import error_middleware
from libs.web.serving import serve_until_stopped
from services.marketplace import handlers
from services.marketplace.adapters.announcing import Announcer
from services.marketplace.adapters.asking import Rest
from services.marketplace.adapters.counting import count_uses
from services.marketplace.adapters.seeding import STARTERS, seed
from services.marketplace.adapters.storing import Store, migrate
from services.marketplace.keys import ANNOUNCER, REST, SETTINGS, STORE
from services.marketplace.settings import MarketplaceSettings

log = structlog.get_logger(__name__)

BODY_BYTES = 1024 * 1024


async def database_ctx(app: web.Application) -> AsyncIterator[None]:
    settings = app[SETTINGS]
    engine = create_engine(settings.resolved_database_url())
    try:
        await migrate(engine)
        store = Store(engine)
        if settings.marketplace_seed:
            await seed(store, settings.marketplace_starters_dir or STARTERS)
        app[STORE] = store
        yield
    finally:
        await engine.dispose()


async def rest_ctx(app: web.Application) -> AsyncIterator[None]:
    settings = app[SETTINGS]
    async with client_session(settings.rest_url) as session:
        app[REST] = Rest(session, settings.rest_url, settings.identity_cache_seconds)
        yield


async def bus_ctx(app: web.Application) -> AsyncIterator[None]:
    settings = app[SETTINGS]
    bus = await connect(settings, name=settings.service_name)
    stop = asyncio.Event()
    background = app[BACKGROUND]
    beating = background.start(beat_forever(bus.nc, settings.service_name, stop), name="heartbeat")
    counting: asyncio.Task[None] | None = None
    try:
        await ensure_topology(bus.js, settings.stream_replicas)
        app[ANNOUNCER] = Announcer(bus.js)
        counting = background.start(count_uses(bus.js, app[STORE], stop), name="uses")
        yield
    finally:
        stop.set()
        for task in (counting, beating):
            if task is not None:
                await Background.stop(task, within=3.0)
        await bus.close()


def build_app(settings: MarketplaceSettings) -> web.Application:
    too_large = f"The body is over {BODY_BYTES:,} bytes; shorten the description or the protocol."
    app = web.Application(
        middlewares=[error_middleware("see docs/marketplace.md for the routes.", too_large)],
        client_max_size=BODY_BYTES,
    )
    app[SETTINGS] = settings
    app.cleanup_ctx.append(background_ctx)  # first: the task group outlives every resource
    app.cleanup_ctx.append(database_ctx)
    app.cleanup_ctx.append(rest_ctx)
    app.cleanup_ctx.append(bus_ctx)
    for route in handlers.routes:
        if isinstance(route, web.RouteDef):
            app.router.add_route(route.method, handlers.PREFIX + route.path, route.handler)
    return app


async def serve(settings: MarketplaceSettings, stop: asyncio.Event) -> None:
    """Serve until ``stop`` is set, then drain."""
    await serve_until_stopped(
        build_app(settings),
        settings.marketplace_host,
        settings.marketplace_port,
        stop,
        name="marketplace",
        socket=settings.marketplace_socket,
    )
