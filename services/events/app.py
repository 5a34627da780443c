"""Composition root of the events gateway: the bus, the hub, REST for identities, the routes.

The gateway serves ``/api/v2/events`` (and the webhooks' routes) under both prefixes OpenPAI
clients use; behind the API's address a proxy rule sends those paths here (rest proxies them
in the embedded platform and docker-compose, an Ingress path rule on Kubernetes).
"""

from __future__ import annotations

import asyncio
import contextlib
import ipaddress
import socket
from collections.abc import AsyncIterator

import psutil
import structlog
from aiohttp import web

from libs.backbone.connecting import connect
from libs.backbone.heartbeats import beat_forever
from libs.backbone.topology import ensure_topology
from libs.web.addresses import client_session
from libs.web.errors import error_middleware
from libs.web.serving import serve_until_stopped
from services.events import handlers
from services.events.adapters.delivering import CheckingResolver, Deliveries, receivers_session
from services.events.adapters.following import Hub
from services.events.adapters.identity import Identities
from services.events.core.webhooks import IPAddress, TargetPolicy, parse_networks, parse_ports
from services.events.keys import DELIVERIES, HUB, IDENTITIES, SETTINGS
from services.events.settings import EventsSettings

log = structlog.get_logger(__name__)

PREFIXES = ("/api", "/rest-server/api")


def machine_addresses() -> frozenset[IPAddress]:
    """Every address of this machine's interfaces: the platform's ports listen on some of them."""
    found: set[IPAddress] = set()
    for addresses in psutil.net_if_addrs().values():
        for address in addresses:
            if address.family in (socket.AF_INET, socket.AF_INET6):
                with contextlib.suppress(ValueError):
                    found.add(ipaddress.ip_address(address.address.split("%", 1)[0]))
    return frozenset(found)


def target_policy(settings: EventsSettings) -> TargetPolicy:
    own_ports = parse_ports(settings.webhook_forbidden_ports)
    return TargetPolicy(
        forbidden=parse_networks(settings.webhook_forbidden_networks),
        allowed=parse_networks(settings.webhook_allowed_networks),
        own_ports=own_ports,
        own_addresses=machine_addresses() if own_ports else frozenset(),
    )


async def bus_ctx(app: web.Application) -> AsyncIterator[None]:
    """The bus, the hub and the webhooks' deliveries for as long as the gateway serves.

    Its background tasks (the heartbeat, every subscription's delivery loops, the watch of the
    subscriptions, the attempts' writer) run in one task group: one that raises cancels the
    serving, and the group's error ends the gateway for its supervisor to start it again."""
    settings = app[SETTINGS]
    bus = await connect(settings, name=settings.service_name)
    # Webhook receivers are anywhere; REST may be a socket on this machine: a client for each.
    resolver = CheckingResolver(target_policy(settings))
    session = receivers_session(resolver)
    rest = client_session(settings.rest_url)
    try:
        async with asyncio.TaskGroup() as tasks:
            stop_beating = asyncio.Event()
            tasks.create_task(beat_forever(bus.nc, settings.service_name, stop_beating), name="heartbeat")
            try:
                await ensure_topology(bus.js, settings.stream_replicas)
                hub = Hub(bus.js, subscriber_limit=settings.events_subscriber_buffer)
                await hub.start()
                app[HUB] = hub
                app[IDENTITIES] = Identities(rest, settings.rest_url, settings.identity_cache_seconds)
                deliveries = Deliveries(bus.js, hub, session, settings, resolver)
                await deliveries.start(tasks)
                app[DELIVERIES] = deliveries
                yield
                await deliveries.stop()
                await hub.stop()
            finally:
                stop_beating.set()
    finally:
        await session.close()
        await rest.close()
        await bus.close()


async def close_streams(app: web.Application) -> None:
    """On shutdown every open stream ends (its client resumes elsewhere by its last id)."""
    if HUB in app:
        for subscriber in list(app[HUB].subscribers):
            subscriber.close()


def build_app(settings: EventsSettings) -> web.Application:
    app = web.Application(middlewares=[error_middleware("see the REST API v2 reference.")])
    app[SETTINGS] = settings
    app.cleanup_ctx.append(bus_ctx)
    app.on_shutdown.append(close_streams)
    for prefix in PREFIXES:
        for route in handlers.ROUTES:
            # With one trailing slash too, as every route of the API accepts it.
            for path in (route.path, route.path + "/"):
                app.router.add_route(route.method, prefix + path, route.handler)
    return app


async def serve(settings: EventsSettings, stop: asyncio.Event) -> None:
    """Serve until ``stop`` is set, then close streams and drain."""
    await serve_until_stopped(
        build_app(settings),
        settings.events_host,
        settings.events_port,
        stop,
        name="events gateway",
        socket=settings.events_socket,
    )
