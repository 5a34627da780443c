"""Fixtures of the marketplace's tests: the bus, a REST stand-in, both SQL backends, the service."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import httpx
import pytest

from libs.backbone.connecting import Bus
from libs.backbone.natsserver import EmbeddedNats
from libs.backbone.topology import ensure_topology
from tests.marketplace.support import Market, marketplace, rest_stand_in, settings
from tests.rest.conftest import database_url, pg_database

__all__ = ["database_url", "pg_database"]


@pytest.fixture
async def topology(bus: Bus) -> Bus:
    await ensure_topology(bus.js)
    return bus


@pytest.fixture
async def rest_url() -> AsyncIterator[str]:
    async with rest_stand_in() as url:
        yield url


@pytest.fixture
async def market_url(
    topology: Bus, nats_server: EmbeddedNats, rest_url: str, database_url: str, tmp_path: Path
) -> AsyncIterator[str]:
    async with marketplace(settings(nats_server.url, rest_url, database_url, tmp_path)) as url:
        yield url


@pytest.fixture
async def market(market_url: str) -> AsyncIterator[Market]:
    async with httpx.AsyncClient(base_url=market_url, timeout=30) as client:
        yield Market(client)
