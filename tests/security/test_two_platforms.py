"""Two `pai up` on one machine, each with its own data dir, never talk to each other.

The collision replayed: internal services used fixed ports (the marketplace 9189, the events
gateway 9188, the portal 9187, the bus 4222), taken when free. Two platforms starting together
both picked them: the second's marketplace could not bind and restarted forever while its rest
passed /marketplace/api/ to the first's, and its portal answered for the first's API. Now the
internal hops are Unix sockets in each data dir, the bus is verified against each platform's own
authority, and the ports people use are bound by `pai up` itself before it announces them.

Both start at once, neither told a port: each runs a job, lists the marketplace through its own
API, and its portal speaks for its own API only (a token of the other platform is refused by
both the portal and the marketplace, which ask their own rest). A restart keeps the ports.
"""

from __future__ import annotations

import asyncio
import os
import tempfile
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from tests.e2e.platform import job_yaml
from tests.e2e.up_process import UpProcess
from tests.support.waiting import eventually

pytestmark = [pytest.mark.slow, pytest.mark.timeout(300)]

PASSWORD = "up-admin-pass"  # what UpProcess gives PAI_ADMIN_PASSWORD


@pytest.fixture
def base() -> Iterator[Path]:
    # Where a task user may walk to its own directory (pai up as root runs tasks as another user).
    with tempfile.TemporaryDirectory(prefix="pai-two-") as path:
        os.chmod(path, 0o755)
        yield Path(path)


async def login(client: httpx.AsyncClient) -> str:
    answer = await client.post("/api/v2/authn/basic/login", json={"username": "admin", "password": PASSWORD})
    assert answer.status_code == 200, answer.text
    token = str(answer.json()["token"])
    client.headers["Authorization"] = f"Bearer {token}"
    return token


async def runs_a_job(client: httpx.AsyncClient, name: str) -> None:
    submitted = await client.post(
        "/api/v2/jobs",
        content=job_yaml(name, {"main": {"commands": [f"echo {name}"]}}),
        headers={"Content-Type": "text/yaml"},
    )
    assert submitted.status_code == 202, submitted.text

    async def state() -> str:
        answer = await client.get(f"/api/v2/jobs/admin~{name}")
        return str(answer.json().get("jobStatus", {}).get("state")) if answer.status_code == 200 else ""

    assert (
        await eventually(state, lambda s: s in ("SUCCEEDED", "FAILED", "STOPPED"), within=90) == "SUCCEEDED"
    )


async def test_two_platforms_side_by_side_each_on_its_own_ports_and_services(base: Path) -> None:
    ups = [UpProcess(base / name, choose_port=True) for name in ("one", "two")]
    try:
        for up in ups:
            up.start()
        await asyncio.gather(*(up.wait_until_up() for up in ups))
        printed = [up.printed() for up in ups]
        ports = [port for each in printed for port in each.values()]
        assert len(set(ports)) == len(ports), printed  # not one port shared

        clients = [httpx.AsyncClient(base_url=f"http://127.0.0.1:{up.port}", timeout=30) for up in ups]
        try:
            tokens = await asyncio.gather(*(login(client) for client in clients))
            platforms = ("one", "two")
            await asyncio.gather(
                *(runs_a_job(c, f"job-on-{n}") for c, n in zip(clients, platforms, strict=True))
            )
            for index, (client, each) in enumerate(zip(clients, printed, strict=True)):
                own, other = tokens[index], tokens[1 - index]
                portal = f"http://127.0.0.1:{each['portal']}"
                for token, expected in ((own, 200), (other, 401)):
                    auth = {"Authorization": f"Bearer {token}"}
                    items = await client.get("/marketplace/api/items", headers=auth)
                    assert items.status_code == expected, items.text
                    me = await client.get(f"{portal}/api/v2/users/me", headers=auth)
                    assert me.status_code == expected, me.text
                items = await client.get("/marketplace/api/items", headers={"Authorization": f"Bearer {own}"})
                assert "hello-world" in {item["id"] for item in items.json()}
                jobs = await client.get(f"{portal}/api/v2/jobs", headers={"Authorization": f"Bearer {own}"})
                names = {job["name"] for job in jobs.json()}
                assert names == {f"job-on-{platforms[index]}"}, names  # its own platform's job only
        finally:
            for client in clients:
                await client.aclose()

        # The first stops and starts again: the same ports, remembered in its data dir.
        first = ups[0]
        assert first.process is not None
        first.process.terminate()
        await asyncio.to_thread(first.process.wait, 30)
        again = UpProcess(first.data_dir, choose_port=True).start()
        ups.append(again)
        await again.wait_until_up()
        assert again.printed() == printed[0]
    finally:
        for up in ups:
            up.cleanup()
