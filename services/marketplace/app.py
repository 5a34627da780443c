"""Composition root of the marketplace: SQL and its migrations, the starters, the bus, the routes.

The marketplace serves ``/marketplace/api/...`` on its own (loopback) port; behind the
platform's address rest passes that path here (``services/rest/routes/passing.py``), and on
Kubernetes the Ingress does. Resources open in order in ``cleanup_ctx``: the database (migrated,
then seeded), the HTTP client for REST, then the bus (item events out, ``job.submitted`` in).
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Awaitable, Callable

import aiohttp
import structlog
from aiohttp import web

from libs.backbone.connecting import connect
from libs.backbone.heartbeats import beat_forever
from libs.backbone.sql import create_engine
from libs.backbone.topology import ensure_topology
from services.marketplace import handlers
from services.marketplace.adapters.announcing import Announcer
from services.marketplace.adapters.asking import Rest
from services.marketplace.adapters.counting import count_uses
from services.marketplace.adapters.seeding import STARTERS, seed
from services.marketplace.adapters.storing import Store, migrate
from services.marketplace.errors import ApiError
from services.marketplace.keys import ANNOUNCER, REST, SETTINGS, STORE
from services.marketplace.settings import MarketplaceSettings

log = structlog.get_logger(__name__)

Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]
BODY_BYTES = 1024 * 1024


@web.middleware
async def error_middleware(request: web.Request, handler: Handler) -> web.StreamResponse:
    try:
        return await handler(request)
    except ApiError as exc:
        return web.json_response(exc.body(), status=exc.status)
    except web.HTTPException as exc:
        if exc.status in (404, 405):
            message = f"No API {request.method} {request.path}; see docs/marketplace.md for the routes."
            return web.json_response({"code": "NoApiError", "message": message}, status=exc.status)
        if exc.status == 413:
            message = f"The body is over {BODY_BYTES:,} bytes; shorten the description or the protocol."
            return web.json_response({"code": "RequestEntityTooLargeError", "message": message}, status=413)
        raise
    except Exception:
        log.exception("request failed", method=request.method, path=request.path)
        return web.json_response(
            {"code": "UnknownError", "message": "Internal error; the service log has the details."},
            status=500,
        )


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
    async with aiohttp.ClientSession() as session:
        app[REST] = Rest(session, settings.rest_url, settings.identity_cache_seconds)
        yield


async def bus_ctx(app: web.Application) -> AsyncIterator[None]:
    settings = app[SETTINGS]
    bus = await connect(settings, name=settings.service_name)
    stop = asyncio.Event()
    beating = asyncio.create_task(beat_forever(bus.nc, settings.service_name, stop))
    counting: asyncio.Task[None] | None = None
    try:
        await ensure_topology(bus.js)
        app[ANNOUNCER] = Announcer(bus.js)
        counting = asyncio.create_task(count_uses(bus.js, app[STORE], stop))
        yield
    finally:
        stop.set()
        for task in (counting, beating):
            if task is None:
                continue
            try:
                await asyncio.wait_for(asyncio.shield(task), timeout=3.0)
            except TimeoutError:
                task.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await task
        await bus.close()


def build_app(settings: MarketplaceSettings) -> web.Application:
    app = web.Application(middlewares=[error_middleware], client_max_size=BODY_BYTES)
    app[SETTINGS] = settings
    app.cleanup_ctx.append(database_ctx)
    app.cleanup_ctx.append(rest_ctx)
    app.cleanup_ctx.append(bus_ctx)
    for route in handlers.routes:
        if isinstance(route, web.RouteDef):
            app.router.add_route(route.method, handlers.PREFIX + route.path, route.handler)
    return app


async def serve(settings: MarketplaceSettings, stop: asyncio.Event) -> None:
    """Serve until ``stop`` is set, then drain."""
    runner = web.AppRunner(build_app(settings), shutdown_timeout=5.0)
    await runner.setup()
    site = web.TCPSite(runner, settings.marketplace_host, settings.marketplace_port)
    await site.start()
    log.info("marketplace listening", host=settings.marketplace_host, port=settings.marketplace_port)
    try:
        await stop.wait()
    finally:
        await runner.cleanup()
