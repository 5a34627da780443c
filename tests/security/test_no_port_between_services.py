"""No TCP port a task can take stands between the platform's services (`pai up`).

The attack replayed: tasks are other users' processes on the same machine. When services talked
over ports of 127.0.0.1, a task that bound a service's port while that service restarted received
what the next one sent there: rest passed the users' bearer tokens to the marketplace's and the
events gateway's ports, and every service sent its NATS password to the bus's.

Now rest, the gateway and the marketplace talk over Unix sockets in a directory only the
platform's user may enter, so the gateway and the marketplace listen on no port at all; the
ports people use (the API, the portal, the metrics) are held by `pai up` itself while the service
behind each restarts; and the bus, which listens on TCP only, is spoken to over TLS verified
against the platform's own authority, handshake first, so whoever takes its port while it
restarts sees ClientHellos, never a CONNECT or a password. A stand-in for a task
(tests/security/squatting.py: unprivileged under a root test, none of the platform's
descriptors) tries each way in while the services it targets are down.
"""

from __future__ import annotations

import json
import os
import signal
import stat
from pathlib import Path
from urllib.parse import urlsplit

import httpx
import psutil
import pytest

from tests.e2e.platform import Platform, job_yaml, running_platform
from tests.security.squatting import Squatter
from tests.support.waiting import eventually, polled

pytestmark = [pytest.mark.slow, pytest.mark.timeout(240)]

ROOT = os.geteuid() == 0
TLS_RECORD_HANDSHAKE = 0x16


def port_of(url: str) -> int:
    port = urlsplit(url).port
    assert port is not None, url
    return port


def listening_ports(pid: int) -> set[int]:
    process = psutil.Process(pid)
    return {c.laddr.port for c in process.net_connections(kind="inet") if c.status == psutil.CONN_LISTEN}


async def restarted(platform: Platform, names: tuple[str, ...], old: dict[str, int]) -> None:
    supervisor = platform.embedded.supervisor
    assert supervisor is not None
    await eventually(
        polled(supervisor.pids),
        lambda now: all(now.get(name) not in (None, old[name]) for name in names),
        within=30,
    )


async def test_services_talk_over_private_sockets_and_the_public_ports_stay_held_through_restarts(
    tmp_path: Path,
) -> None:
    async with running_platform(tmp_path / "data") as platform:
        info = platform.info
        supervisor = platform.embedded.supervisor
        assert supervisor is not None
        assert info.sockets_dir is not None
        api, portal, metrics, bus = (
            port_of(url) for url in (info.api_url, info.portal_url, info.metrics_url, info.nats_url)
        )
        pids = supervisor.pids()
        # The only TCP ports of the whole platform: the API, the portal, the metrics and the bus.
        ports = {name: listening_ports(pid) for name, pid in pids.items()}
        assert ports["events"] == set(), ports
        assert ports["marketplace"] == set(), ports
        assert ports["orchestrator"] == set(), ports
        assert set().union(*ports.values()) == {api, portal, metrics, bus}, ports
        # ... each public one held by `pai up` itself (this process, in the test), not only its service.
        assert {api, portal, metrics} <= listening_ports(os.getpid())
        directory = os.lstat(info.sockets_dir)
        assert stat.S_ISDIR(directory.st_mode)
        assert stat.S_IMODE(directory.st_mode) == 0o700
        assert directory.st_uid == os.geteuid()
        sockets = sorted(str(path) for path in info.sockets_dir.iterdir())
        assert [Path(path).name for path in sockets] == [
            "events.sock",
            "marketplace.sock",
            "orchestrator.sock",  # `pai job exec`: rest reaches the tasks through the orchestrator
            "rest.sock",
        ]

        # rest, the gateway and the marketplace die together; while they come back, the stand-in
        # task goes for their ports and sockets, and the admin keeps using the API.
        for name in ("rest", "events", "marketplace"):
            os.kill(pids[name], signal.SIGKILL)
        squatter = Squatter([api, portal, metrics], sockets, within=4.0).start()
        try:

            async def through_the_api() -> tuple[int, int, int]:
                try:
                    market = await platform.api.get("/marketplace/api/items", params={"limit": "1"})
                    hooks = await platform.api.get("/api/v2/webhooks")
                    me = await platform.api.get(f"{info.portal_url}api/v2/users/me")  # the same token
                except httpx.TransportError:  # a kept-alive connection to the killed rest
                    return 0, 0, 0
                return market.status_code, hooks.status_code, me.status_code

            # Connections wait in the held ports' queues while rest is down: they are answered
            # by the next rest, a 503 while the gateway or the marketplace is still starting.
            await eventually(through_the_api, lambda codes: codes == (200, 200, 200), within=60, every=0.2)
            report = await squatter.report()
        finally:
            squatter.kill()
        await restarted(platform, ("rest", "events", "marketplace"), pids)

    assert report.bound == {}, report  # not one public port was free for a moment
    assert report.received == []
    if ROOT:
        assert report.uid != 0
        for path, outcome in report.sockets.items():
            # Neither reached nor replaced: the directory keeps every other user out.
            assert outcome == "EACCES, EACCES", (path, outcome)


async def test_a_process_on_the_bus_port_while_the_bus_restarts_gets_no_password(tmp_path: Path) -> None:
    async with running_platform(tmp_path / "data") as platform:
        info = platform.info
        bus = port_of(info.nats_url)
        nats = platform.child("nats")
        # The stand-in task waits for the port and holds it 4 s once it has it: every service
        # reconnects to it (every half second) in the meantime.
        for _ in range(3):
            squatter = Squatter([bus], [], within=3.0, hold=4.0).start()
            try:
                nats.kill()
                report = await squatter.report()
            finally:
                squatter.kill()
            if report.bound:
                break
        assert report.bound, "the bus always came back before the stand-in could take its port"
        passwords = json.loads((info.data_dir / "nats-credentials.json").read_text()).values()
        assert {port for port, _ in report.received} == {bus}
        # (a connection the stand-in let go before its client spoke says nothing either way)
        said = [data for _, data in report.received if data]
        assert said, "no service tried the port while it was taken"
        for data in said:
            assert data[0] == TLS_RECORD_HANDSHAKE, data[:32]  # a ClientHello, and nothing after it
            assert b"CONNECT" not in data
            for password in passwords:
                assert password.encode() not in data

        # The bus is back on its port, and the platform with it.
        await eventually(polled(lambda: nats.pid), lambda pid: pid is not None, within=30)
        job_id = await platform.submit(job_yaml("after-the-squatter", {"main": {"commands": ["echo ok"]}}))
        assert (await platform.completed(job_id)).state == "SUCCEEDED"
