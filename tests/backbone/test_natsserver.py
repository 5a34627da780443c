"""The embedded nats-server starts, stops, crashes and comes back on the same port with its data."""

from __future__ import annotations

import socket
from pathlib import Path

import pytest

from libs.backbone.connecting import connect
from libs.backbone.natsserver import EmbeddedNats, NatsServerError, find_nats_server
from libs.backbone.provisioning import StreamSpec, ensure_stream


def accepts_connections(server: EmbeddedNats) -> bool:
    try:
        with socket.create_connection((server.host, server.port or 0), timeout=1.0):
            return True
    except OSError:
        return False


def test_the_binary_comes_from_the_installed_wheel() -> None:
    binary = find_nats_server()
    assert binary.name == "nats-server"
    assert binary.is_file()


def test_a_server_started_synchronously_accepts_clients_and_stops(tmp_path: Path) -> None:
    server = EmbeddedNats(tmp_path / "nats").start_sync()
    try:
        assert server.is_running
        assert server.url == f"nats://127.0.0.1:{server.port}"
        assert accepts_connections(server)
    finally:
        server.stop_sync()
    assert server.pid is None
    assert not accepts_connections(server)


async def test_a_restarted_server_keeps_its_port_and_its_streams(tmp_path: Path) -> None:
    async with EmbeddedNats(tmp_path / "nats") as server:
        port = server.port
        bus = await connect(server.url, initial_timeout=5)
        await ensure_stream(bus.js, StreamSpec(name="KEEP", subjects=("keep.>",)))
        await bus.close()

        await server.kill()
        assert not server.is_running
        await server.restart()

        assert server.port == port
        bus = await connect(server.url, initial_timeout=5)
        info = await bus.js.stream_info("KEEP")
        await bus.close()
        assert info.config.subjects == ["keep.>"]


def test_a_server_that_cannot_bind_reports_why(tmp_path: Path) -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        server = EmbeddedNats(tmp_path / "nats", port=port)
        with pytest.raises(NatsServerError, match="exited with status"):
            server.start_sync()
    assert not server.is_running


def test_a_missing_binary_names_the_package_to_install(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("PAI_NATS_SERVER_BIN", str(tmp_path / "absent"))
    with pytest.raises(NatsServerError, match="PAI_NATS_SERVER_BIN"):
        EmbeddedNats(tmp_path / "nats")


async def test_connect_gives_up_with_a_clear_message_when_no_server_answers(tmp_path: Path) -> None:
    with socket.socket() as unused:
        unused.bind(("127.0.0.1", 0))
        port = unused.getsockname()[1]
    with pytest.raises(ConnectionError, match="PAI_NATS_URL"):
        await connect(f"nats://127.0.0.1:{port}", initial_timeout=0.5)
