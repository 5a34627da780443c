"""Fixtures shared by every test suite: a real nats-server with JetStream, and a bus to it.

Each test that asks for ``nats_server`` gets its own server process on a port the server picks
itself, storing JetStream under the test's tmp_path, so tests never see each other's streams
and can stop, kill and restart their server freely. Teardown always stops the process.
"""

from __future__ import annotations

import sys
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import pytest
import structlog
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from libs.backbone.connecting import Bus, connect
from libs.backbone.natsserver import EmbeddedNats
from tests.support.tracing import memory_exporter

# Services that run inside the test process (threaded servers, in-process apps) log through
# structlog, which unconfigured prints to whatever sys.stdout is at that moment: inside a CLI
# test, the command's captured output. Their lines go to the process's stderr instead, which
# pytest still captures and shows with a failing test.
structlog.configure(logger_factory=structlog.PrintLoggerFactory(file=sys.__stderr__))


@pytest.fixture
def nats_server(tmp_path: Path) -> Iterator[EmbeddedNats]:
    """A fresh nats-server (JetStream on disk in tmp_path); ``.kill_sync()``/``.restart()`` allowed."""
    server = EmbeddedNats(tmp_path / "nats")
    server.start_sync()
    try:
        yield server
    finally:
        server.kill_sync()


@pytest.fixture
async def bus(nats_server: EmbeddedNats) -> AsyncIterator[Bus]:
    """A connected Bus to ``nats_server``; closed (drained) after the test."""
    connection = await connect(nats_server.url, name="test", initial_timeout=10.0)
    try:
        yield connection
    finally:
        await connection.close()


@pytest.fixture
def span_exporter() -> Iterator[InMemorySpanExporter]:
    """Spans finished during the test, in memory (the global provider is installed once)."""
    exporter = memory_exporter()
    exporter.clear()
    yield exporter
    exporter.clear()
