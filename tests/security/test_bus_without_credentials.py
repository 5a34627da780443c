"""The embedded bus is private: no credentials, no connection; a service reaches only what it uses."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import nats.errors
import pytest
from nats.aio.client import Client as NATS

from libs.backbone.busauth import CREDENTIALS_FILE, authorization_config, load_credentials
from libs.backbone.connecting import connect
from libs.backbone.fencing import SCHEDULER_FENCE
from libs.backbone.natsserver import EmbeddedNats
from libs.backbone.provisioning import ensure_kv
from libs.backbone.topology import FENCES, SECRETS
from libs.protocol.fencing import Fence, encode
from services.rest.handlers import fences_on

SERVICES = ("rest", "scheduler", "orchestrator", "monitor", "alerter")


async def refused(url: str, **auth: str) -> None:
    """Connect once, no retries; the client is closed whatever happens."""
    nc = NATS()
    try:
        await nc.connect(url, allow_reconnect=False, connect_timeout=2, max_reconnect_attempts=0, **auth)  # type: ignore[arg-type]
    finally:
        await nc.close()


@pytest.fixture
def private_bus(tmp_path: Path) -> Iterator[tuple[EmbeddedNats, dict[str, str]]]:
    credentials = load_credentials(tmp_path / CREDENTIALS_FILE, SERVICES)
    server = EmbeddedNats(tmp_path / "nats", authorization=authorization_config(credentials))
    server.start_sync()
    try:
        yield server, credentials
    finally:
        server.kill_sync()


async def test_a_client_without_credentials_is_refused(
    private_bus: tuple[EmbeddedNats, dict[str, str]],
) -> None:
    server, _ = private_bus
    with pytest.raises(nats.errors.Error, match=r"(?i)authorization"):
        await refused(server.url)


async def test_a_client_with_a_wrong_password_is_refused(
    private_bus: tuple[EmbeddedNats, dict[str, str]],
) -> None:
    server, _ = private_bus
    with pytest.raises(nats.errors.Error, match=r"(?i)authorization"):
        await refused(server.url, user="orchestrator", password="guessed")


async def test_only_rest_and_the_orchestrator_reach_the_secrets_bucket(
    private_bus: tuple[EmbeddedNats, dict[str, str]],
) -> None:
    server, credentials = private_bus
    rest = await connect(server.url, user="rest", password=credentials["rest"], initial_timeout=5)
    try:
        kv = await ensure_kv(rest.js, SECRETS)
        await kv.put("job1", b"{}")
    finally:
        await rest.close()
    orchestrator = await connect(
        server.url, user="orchestrator", password=credentials["orchestrator"], initial_timeout=5
    )
    try:
        bucket = await orchestrator.js.key_value(SECRETS.bucket)
        assert (await bucket.get("job1")).value == b"{}"
    finally:
        await orchestrator.close()
    for service in ("scheduler", "monitor", "alerter"):
        other = await connect(
            server.url, user=service, password=credentials[service], initial_timeout=5, js_timeout=0.5
        )
        try:
            # The server refuses the JetStream API call: no answer comes.
            with pytest.raises((nats.errors.Error, TimeoutError)):
                await other.js.key_value(SECRETS.bucket)
            with pytest.raises((nats.errors.Error, TimeoutError)):
                await other.js.get_last_msg("KV_PAI_SECRETS", "$KV.PAI_SECRETS.job1", direct=True)
            with pytest.raises((nats.errors.Error, TimeoutError)):
                await other.js.publish("$KV.PAI_SECRETS.job1", b"forged", timeout=0.5)
        finally:
            await other.close()


async def test_rest_reads_the_scheduler_fences(private_bus: tuple[EmbeddedNats, dict[str, str]]) -> None:
    # REST's read model skips a deposed scheduler leader's decisions as the orchestrator does.
    server, credentials = private_bus
    scheduler = await connect(
        server.url, user="scheduler", password=credentials["scheduler"], initial_timeout=5
    )
    try:
        kv = await ensure_kv(scheduler.js, FENCES)
        await kv.put(SCHEDULER_FENCE, encode([Fence(3, 42)]))
    finally:
        await scheduler.close()
    rest = await connect(
        server.url, user="rest", password=credentials["rest"], initial_timeout=5, js_timeout=2
    )
    try:
        assert await fences_on(rest.js)() == (Fence(3, 42),)
    finally:
        await rest.close()


def test_credentials_are_private_and_kept_across_starts(tmp_path: Path) -> None:
    path = tmp_path / CREDENTIALS_FILE
    first = load_credentials(path, SERVICES)
    assert path.stat().st_mode & 0o777 == 0o600
    assert set(first) == {"admin", *SERVICES}
    assert len(set(first.values())) == len(first)
    again = load_credentials(path, (*SERVICES, "events"))
    assert {k: again[k] for k in first} == first
    assert "events" in again
