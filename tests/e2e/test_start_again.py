"""A `pai up` whose start fails part way leaves nothing held: the same process starts again."""

from __future__ import annotations

import socket
from pathlib import Path

import pytest

from pai.embedded.platform import EmbeddedPlatform, free_port

pytestmark = pytest.mark.timeout(120)


async def test_a_start_refused_for_a_taken_port_releases_the_data_dir(tmp_path: Path) -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        refused = EmbeddedPlatform(tmp_path / "data", api_port=port, services=("rest",))
        with pytest.raises(OSError, match=f"port {port} is in use; choose another with --port"):
            await refused.start()
    # The data dir's lock went with the failed start: a platform on it starts, in this process.
    again = EmbeddedPlatform(tmp_path / "data", api_port=free_port(), services=("rest",))
    try:
        info = await again.start()
        assert info.api_url.endswith(str(again.requested_api_port))
    finally:
        await again.stop()


@pytest.mark.parametrize(
    ("setting", "host"),
    [({}, "127.0.0.1"), ({"PAI_METRICS_HOST": "0.0.0.0"}, "0.0.0.0")],
    ids=["metrics on loopback by default", "on every interface when the operator says so"],
)
def test_the_metrics_port_is_loopback_unless_the_operator_opens_it(
    tmp_path: Path, setting: dict[str, str], host: str
) -> None:
    platform = EmbeddedPlatform(tmp_path / "data", extra_env=setting)
    _api, _portal, metrics = platform._bind_public_ports({})
    try:
        assert metrics.getsockname()[0] == host
    finally:
        for sock in platform._held:
            sock.close()
