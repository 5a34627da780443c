"""The bus over TLS (libs/backbone/bustls.py): a password goes to the real nats-server only.

The attack replayed: a process takes the bus's port while nats-server restarts and waits for
the services to reconnect. With the platform's authority every client opens with a TLS
ClientHello and checks the server's certificate before it says anything: a fake server that
greets in plain text (the INFO a real one sends, saying no TLS is needed) or presents a
certificate of its own receives a ClientHello and nothing else, never a CONNECT or a password.
"""

from __future__ import annotations

import asyncio
import contextlib
import datetime
import os
import ssl
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from pathlib import Path

import nats.errors
import pytest
from nats.aio.client import Client as NATS

from libs.backbone.bustls import client_options, ensure_bus_tls
from libs.backbone.connecting import connect
from libs.backbone.natsserver import EmbeddedNats

PASSWORD = "pai-the-password-a-fake-server-wants"
TLS_RECORD_HANDSHAKE = 0x16


async def refused(url: str, ca: Path | None, user: str = "scheduler") -> None:
    """A client with the services' options (``client_options``, as ``connecting.connect`` gives
    them) tries once, and fails."""
    client = NATS()
    with pytest.raises((nats.errors.Error, OSError, ssl.SSLError, TimeoutError)):
        await client.connect(
            servers=[url],
            user=user,
            password=PASSWORD,
            allow_reconnect=False,
            connect_timeout=2,
            **client_options(ca),
        )
    # nats-py's close() closes the socket, then may wait forever for a TLS transport that failed.
    with contextlib.suppress(TimeoutError):
        await asyncio.wait_for(client.close(), 1.0)


def test_the_authority_and_the_certificate_are_made_once_private_and_made_again_when_unusable(
    tmp_path: Path,
) -> None:
    tls = ensure_bus_tls(tmp_path / "tls")
    assert (tmp_path / "tls").stat().st_mode & 0o777 == 0o700
    for path in (tls.ca, tls.cert, tls.key):
        assert path.stat().st_mode & 0o777 == 0o600, path
    first = tls.cert.read_bytes()
    assert ensure_bus_tls(tmp_path / "tls").cert.read_bytes() == first  # kept
    # No key of the authority is kept: nothing in the data dir can sign another certificate.
    assert sorted(p.name for p in (tmp_path / "tls").iterdir()) == sorted(
        [tls.ca.name, tls.cert.name, tls.key.name]
    )
    assert b"PRIVATE KEY" not in tls.ca.read_bytes()

    tls.key.write_text("damaged")
    assert ensure_bus_tls(tmp_path / "tls").cert.read_bytes() != first
    second = tls.cert.read_bytes()
    later = datetime.datetime.now(datetime.UTC) + datetime.timedelta(days=3640)
    assert ensure_bus_tls(tmp_path / "tls", now=later).cert.read_bytes() != second  # near its end


@asynccontextmanager
async def fake_server(
    handle: Callable[[asyncio.StreamReader, asyncio.StreamWriter], object],
) -> AsyncIterator[str]:
    server = await asyncio.start_server(handle, "127.0.0.1", 0)  # type: ignore[arg-type]
    try:
        yield f"nats://127.0.0.1:{server.sockets[0].getsockname()[1]}"
    finally:
        server.close()
        await server.wait_closed()


async def test_a_fake_server_greeting_in_plain_text_sees_a_client_hello_and_no_password(
    tmp_path: Path,
) -> None:
    ca = ensure_bus_tls(tmp_path / "tls").ca
    received: list[bytes] = []

    async def impersonate(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        # What nats-server says first, minus TLS: a plain client would answer with its CONNECT.
        writer.write(b'INFO {"server_id":"fake","auth_required":true,"tls_required":false}\r\n')
        await writer.drain()
        data = b""
        # Everything the client sends until it hangs up or has said nothing for a second.
        with contextlib.suppress(TimeoutError, ConnectionError):
            while chunk := await asyncio.wait_for(reader.read(65536), 1.0):
                data += chunk
        received.append(data)
        writer.close()

    async with fake_server(impersonate) as url:
        await refused(url, ca)
        await asyncio.sleep(1.2)  # the fake's read gives up after a second of silence
    assert received, "the client never reached the fake server"
    for data in received:
        assert data[0] == TLS_RECORD_HANDSHAKE, data[:16]
        assert b"CONNECT" not in data
        assert PASSWORD.encode() not in data
        assert b"scheduler" not in data


async def test_a_fake_server_with_a_certificate_of_its_own_is_refused_before_the_password(
    tmp_path: Path,
) -> None:
    ours = ensure_bus_tls(tmp_path / "ours").ca
    # The impostor's own authority and certificate, for the same address.
    theirs = ensure_bus_tls(tmp_path / "theirs")
    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    context.load_cert_chain(theirs.cert, theirs.key)
    outcomes: list[str] = []
    done = asyncio.Event()

    async def impersonate(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            await asyncio.wait_for(writer.start_tls(context), 3)
            writer.write(b'INFO {"server_id":"fake","auth_required":true}\r\n')
            await writer.drain()
            data = await asyncio.wait_for(reader.read(65536), 3)
            outcomes.append(f"read {data!r}")
        except (ssl.SSLError, ConnectionError, TimeoutError) as exc:
            outcomes.append(f"failed: {type(exc).__name__}")
        finally:
            writer.close()
            done.set()

    async with fake_server(impersonate) as url:
        await refused(url, ours, user="rest")
        await asyncio.wait_for(done.wait(), 10)
    [outcome] = outcomes
    # The client hung up at the certificate (the server's handshake fails), or said nothing more.
    assert outcome.startswith("failed") or outcome == "read b''", outcome
    assert PASSWORD not in outcome
    assert "CONNECT" not in outcome


async def test_the_real_server_is_reached_over_tls_and_a_plain_or_strange_client_is_not(
    tmp_path: Path,
) -> None:
    tls = ensure_bus_tls(tmp_path / "tls")
    async with EmbeddedNats(tmp_path / "nats", tls=tls) as server:  # ready: the probe spoke TLS
        assert "tls" in (tmp_path / "nats" / "nats-server.conf").read_text()
        bus = await connect(server.url, name="test", initial_timeout=5, ca=server.ca)
        try:
            reply = await bus.nc.request("$JS.API.INFO", b"", timeout=5)
            assert b"memory" in reply.data
        finally:
            await bus.close()
        # A client that does not verify against the platform's authority gets nowhere.
        await refused(server.url, None)
        await refused(server.url, ensure_bus_tls(tmp_path / "stranger").ca)
    assert os.stat(tls.key).st_mode & 0o777 == 0o600


async def test_a_service_that_first_meets_a_fake_on_the_bus_port_connects_once_the_bus_is_back(
    tmp_path: Path,
) -> None:
    """A service started while a task holds the bus's port (the bus restarting) fails its first
    TLS handshake there; nats-py's own retry would then wait forever on the failed TLS socket.
    The service goes on trying and connects once the real server has its port again."""
    tls = ensure_bus_tls(tmp_path / "tls")
    greeted = asyncio.Event()

    async def impersonate(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        writer.write(b'INFO {"server_id":"fake","auth_required":true,"tls_required":false}\r\n')
        with contextlib.suppress(ConnectionError):
            await writer.drain()
        greeted.set()
        with contextlib.suppress(TimeoutError, ConnectionError):
            while await asyncio.wait_for(reader.read(65536), 1.0):
                pass
        writer.close()

    fake = await asyncio.start_server(impersonate, "127.0.0.1", 0)
    port = fake.sockets[0].getsockname()[1]
    connecting = asyncio.create_task(
        connect(f"nats://127.0.0.1:{port}", name="late", ca=tls.ca, user="late", password=PASSWORD)
    )
    try:
        await asyncio.wait_for(greeted.wait(), 10)
        fake.close()
        await fake.wait_closed()
        async with EmbeddedNats(tmp_path / "nats", port=port, tls=tls) as server:
            # (the embedded server's own users: this one needs none, so no password is checked)
            bus = await asyncio.wait_for(connecting, 30)
            try:
                reply = await bus.nc.request("$JS.API.INFO", b"", timeout=5)
                assert b"memory" in reply.data
                assert server.url.endswith(f":{port}")
            finally:
                await bus.close()
    finally:
        connecting.cancel()
        await asyncio.gather(connecting, return_exceptions=True)
