"""Fixtures of the events gateway's tests: the bus's streams, the REST stand-in, the gateway."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from libs.backbone.connecting import Bus
from libs.backbone.natsserver import EmbeddedNats
from libs.backbone.topology import ensure_topology
from tests.events.support import gateway, identity_server, settings


@pytest.fixture
async def topology(bus: Bus) -> Bus:
    await ensure_topology(bus.js)
    return bus


@pytest.fixture
async def rest_url() -> AsyncIterator[str]:
    async with identity_server() as url:
        yield url


@pytest.fixture
async def gateway_url(
    topology: Bus, nats_server: EmbeddedNats, rest_url: str, tmp_path: Path
) -> AsyncIterator[str]:
    async with gateway(settings(nats_server.url, rest_url, tmp_path, events_keepalive_seconds=0.3)) as url:
        yield url
