"""Fixtures shared by every test suite: a real nats-server with JetStream, and a bus to it.

Each test that asks for ``nats_server`` gets its own server process on a port the server picks
itself, storing JetStream under the test's tmp_path, so tests never see each other's streams
and can stop, kill and restart their server freely. Teardown always stops the process.
"""

from __future__ import annotations

import logging
import os
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import pytest
import structlog
from hypothesis import settings
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from libs.backbone.connecting import Bus, connect
from libs.backbone.natsserver import EmbeddedNats
from tests.support.tracing import memory_exporter

# Services that run inside the test process (threaded servers, in-process apps) log through
# structlog, which unconfigured prints to whatever sys.stdout is at that moment: inside a CLI
# test, the command's captured output; written to the terminal instead, a server thread's lines
# landed between pytest's own whenever they came outside a test's capture. They go to the
# standard logging module, whose records pytest keeps per test and shows with a failing one
# ("Captured log"); between tests a record finds only the null handler, never the terminal.
# Services started as processes log to files (the embedded platform's <data dir>/logs).
# Property tests draw the same examples on every run of `make test`, so a red run means the code
# changed, never that a new random draw went looking elsewhere. `HYPOTHESIS_PROFILE=explore`
# draws fresh examples each run (and keeps failures in .hypothesis) to hunt for new cases.
settings.register_profile("repeatable", derandomize=True, database=None)
settings.register_profile("explore", derandomize=False)
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "repeatable"))

# Tasks run on the host unless a test is about images (tests/e2e/test_job_images.py): jobs that
# name images such as python:3.11 must never make a container engine go looking for them.
os.environ.setdefault("PAI_TASK_ENGINE", "host")
# The suite runs many small jobs at once on a machine of two cores: it declares the node larger
# than the machine, as an admin may (what all tasks together are held to stays the machine's).
os.environ.setdefault("PAI_CPU_OVERCOMMIT", "16")
os.environ.setdefault("PAI_MEMORY_OVERCOMMIT", "4")

structlog.configure(logger_factory=structlog.stdlib.LoggerFactory())
logging.getLogger().addHandler(logging.NullHandler())
for _ours in ("services", "libs", "runtime"):  # our lines from INFO; other libraries' from WARNING
    logging.getLogger(_ours).setLevel(logging.INFO)


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
