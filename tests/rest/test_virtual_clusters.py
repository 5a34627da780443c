"""Virtual clusters over REST and the CLI: OpenPAI's status shape, SKU types, run-time config."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import pytest
import yaml
from aiohttp.test_utils import TestClient
from nats.aio.msg import Msg
from typer.testing import CliRunner

from libs.backbone.connecting import Bus, connect
from libs.backbone.topology import ensure_topology, publish_event
from libs.protocol.events import JobScheduled, decode_event
from pai.cli.main import app
from services.rest.adapters.accounts import create_user
from services.rest.adapters.auth import hash_password
from services.rest.keys import ENGINE
from services.rest.settings import RestSettings
from services.scheduler.app import SchedulerSettings, main
from tests.rest.conftest import ADMIN_PASSWORD
from tests.rest.serving import ServerThread
from tests.services.vc_support import GPU_NODES, cluster_file, gpu_job, scheduler
from tests.support.events import JobEvents

VC_B_ONLY = yaml.safe_dump(
    {"virtualClusters": {"b": {"virtualCells": [{"cellType": "A100-RACK", "cellNumber": 2}]}}}
)


async def cluster_with_a_job(bus: Bus) -> JobEvents:
    await ensure_topology(bus.js)
    seen = JobEvents()
    await bus.js.subscribe("pai.job.>", ordered_consumer=True, cb=seen.on_msg)
    for node in GPU_NODES:
        await publish_event(bus.js, node)
    return seen


async def user_headers(api: TestClient[Any, Any], name: str) -> dict[str, str]:
    await create_user(api.app[ENGINE], name, hash_password("pw-" + name + "-123"), admin=False)
    response = await api.post(
        "/api/v2/authn/basic/login", data={"username": name, "password": f"pw-{name}-123"}
    )
    assert response.status == 200, await response.text()
    return {"Authorization": f"Bearer {(await response.json())['token']}"}


async def test_without_a_scheduler_the_status_is_503_with_a_clear_message(
    api: TestClient[Any, Any], admin_headers: dict[str, str]
) -> None:
    response = await api.get("/api/v2/virtual-clusters", headers=admin_headers)
    assert response.status == 503
    body = await response.json()
    assert body["code"] == "UnknownError"
    assert "scheduler did not answer" in body["message"]


async def test_status_sku_types_and_config_changes_over_rest(
    api: TestClient[Any, Any], admin_headers: dict[str, str], bus: Bus, nats_server: Any, tmp_path: Path
) -> None:
    seen = await cluster_with_a_job(bus)
    async with scheduler(nats_server.url, cluster_file(tmp_path)):
        await publish_event(bus.js, gpu_job("j1", "a", 4))
        await seen.wait_for("job.scheduled", "j1")
        assert (await api.get("/api/v2/virtual-clusters")).status == 401

        response = await api.get("/api/v2/virtual-clusters", headers=admin_headers)
        assert response.status == 200, await response.text()
        vcs = await response.json()
        assert sorted(vcs) == ["a", "b"]
        a = vcs["a"]
        assert (a["capacity"], a["usedCapacity"], a["maxCapacity"], a["dedicated"]) == (
            50.0,
            25.0,
            100.0,
            False,
        )
        assert a["resourcesUsed"] == {"cpu": 2, "vCores": 2, "memory": 1024, "gpu": 4, "GPUs": 4}
        assert a["resourcesGuaranteed"] == {"cpu": 64, "vCores": 64, "memory": 524288, "gpu": 8, "GPUs": 8}
        assert a["nodeList"] == ["n0", "n1", "n2", "n3"], "every node the VC's jobs may use"
        assert a["cluster"] == {"nodes": 4, "cpu": 128, "memoryMb": 1048576, "gpus": 16}
        [busy] = [n for n in a["nodes"] if n["usedGpus"]]
        assert busy == {
            "name": busy["name"],
            "usedGpus": 4,
            "gpus": 4,
            "healthy": True,
            "address": busy["address"],
            "gpuModel": "A100",
            "cpu": 32,
            "memoryMb": 262144,
            "usedCpu": 2,
            "usedMemoryMb": 1024,
            "used": {"cpu": 2, "memoryMb": 1024, "gpus": 4},
        }
        idle = [n for n in a["nodes"] if n["name"] != busy["name"]]
        assert all(n["used"] == {"cpu": 0, "memoryMb": 0, "gpus": 0} and n["cpu"] == 32 for n in idle)
        b_nodes = (await (await api.get("/api/v2/virtual-clusters/b", headers=admin_headers)).json())["nodes"]
        [seen_by_b] = [n for n in b_nodes if n["name"] == busy["name"]]
        assert (seen_by_b["usedGpus"], seen_by_b["usedCpu"]) == (0, 0), "VC b uses nothing there"
        assert seen_by_b["used"]["gpus"] == 4, "what runs there, whatever its VC"
        assert a["usedGpusByUser"] == {"alice": 4}

        response = await api.get("/rest-server/api/v2/virtual-clusters/b", headers=admin_headers)
        assert (await response.json())["resourcesUsed"]["GPUs"] == 0
        response = await api.get("/api/v2/virtual-clusters/zz", headers=admin_headers)
        assert response.status == 404
        assert (await response.json())["code"] == "NoVirtualClusterError"

        response = await api.get("/api/v2/cluster/sku-types", params={"vc": "a"}, headers=admin_headers)
        assert await response.json() == {"A100": {"cpu": 8, "memory": 65536, "gpu": 1}}

        bob = await user_headers(api, "bob")
        response = await api.put("/api/v2/virtual-clusters/config", data=VC_B_ONLY, headers=bob)
        assert response.status == 403
        response = await api.put("/api/v2/virtual-clusters/config", data="a: [", headers=admin_headers)
        assert response.status == 400
        assert "body: not valid YAML" in (await response.json())["message"]

        response = await api.put("/api/v2/virtual-clusters/config", data=VC_B_ONLY, headers=admin_headers)
        assert response.status == 409
        body = await response.json()
        assert body["code"] == "ConflictVirtualClusterError"
        assert "j1 in VC a" in body["message"]
        assert list(body["downgraded"]) == ["j1"]

        response = await api.put(
            "/api/v2/virtual-clusters/config", params={"force": "true"}, data=VC_B_ONLY, headers=admin_headers
        )
        assert response.status == 200, await response.text()
        body = await response.json()
        assert body["virtualClusters"] == ["b"]
        assert list(body["downgraded"]) == ["j1"]
        vcs = await (await api.get("/api/v2/virtual-clusters", headers=admin_headers)).json()
        assert sorted(vcs) == ["b"]
        assert vcs["b"]["capacity"] == 100.0


runner = CliRunner()


def pai(*args: str) -> tuple[int, str]:
    result = runner.invoke(app, list(args), env={"PAI_PASSWORD": ADMIN_PASSWORD})
    return result.exit_code, result.output


def test_pai_vc_commands(
    server: ServerThread, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, rest_settings: RestSettings
) -> None:
    monkeypatch.setenv("PAI_CONFIG_DIR", str(tmp_path / "config"))
    monkeypatch.setenv("PAI_SERVER", server.url)
    monkeypatch.setenv("COLUMNS", "200")
    stop = asyncio.Event()
    settings = SchedulerSettings(
        nats_url=rest_settings.nats_url,
        instance="s1",
        service_name="scheduler",
        hived_config=cluster_file(tmp_path),
    )
    running = asyncio.run_coroutine_threadsafe(main(settings, stop), server.loop)

    async def place_a_job() -> None:
        bus = await connect(rest_settings.nats_url, name="test-cli")
        placed = asyncio.Event()

        async def on_msg(msg: Msg) -> None:
            if isinstance(decode_event(msg.data), JobScheduled):
                placed.set()

        try:
            await bus.nc.subscribe("pai.job.j1.job.scheduled", cb=on_msg)
            for node in GPU_NODES:
                await publish_event(bus.js, node)
            await publish_event(bus.js, gpu_job("j1", "a", 4))
            await asyncio.wait_for(placed.wait(), 15)
        finally:
            await bus.close()

    try:
        server.run(place_a_job())
        assert pai("login", "--user", "admin")[0] == 0
        code, output = pai("vc", "list")
        assert code == 0, output
        rows = [
            [cell.strip() for cell in line.split("│")[1:6]] for line in output.splitlines() if "│" in line
        ]
        assert rows == [["a", "50", "25", "8", "4"], ["b", "50", "0", "8", "0"]]
        code, output = pai("vc", "show", "a")
        assert code == 0, output
        assert "guaranteed: 8 GPUs, 64 CPU, 524288 MB memory" in output
        assert "the cluster offers: 16 GPUs, 128 CPU, 1048576 MB memory on 4 nodes" in output
        node_rows = [line for line in output.splitlines() if "│ n" in line]
        assert len(node_rows) == 4
        assert any("2/32" in row and "4/4" in row and "2 CPU, 1024 MB, 4 GPUs" in row for row in node_rows)
        assert "user alice: 4 GPUs" in output
        assert pai("vc", "show", "zz")[0] == 1

        code, output = pai("vc", "config")
        assert code == 0, output
        assert output.startswith("# The scheduler config in force; its cells are given by the config.\n")
        shown = yaml.safe_load(output)
        assert set(shown["physicalCluster"]["cellTypes"]) == {"A100-2GPU", "A100-NODE", "A100-RACK"}
        assert set(shown["virtualClusters"]) == {"a", "b"}
        code, output = pai("vc", "set", "c", "--gpus", "4")
        assert code == 1
        assert "VC c cannot get 4 GPUs; it may have at most 0" in " ".join(output.split())
        code, output = pai("vc", "set", "b", "--gpus", "4")
        assert (code, output) == (0, "VC b now has 4 GPUs\n")
        code, output = pai("vc", "set", "c", "--gpus", "4")  # the four b gave up, in no VC
        assert (code, output) == (0, "VC c was created with 4 GPUs\n")
        code, output = pai("vc", "remove", "c")
        assert code == 0, output
        assert output == "VC c was removed; its 4 GPUs went to no VC (there is no default VC)\n"
        assert pai("vc", "set", "c")[0] == 2, "nothing asked"

        config = tmp_path / "vcs.yaml"
        config.write_text(VC_B_ONLY)
        code, output = pai("vc", "set-config", str(config))
        assert code == 1
        assert "j1 in VC a would be left running without its VC guarantee" in output
        code, output = pai("vc", "set-config", str(config), "--force")
        assert code == 0, output
        assert "downgraded: j1: left running without its VC guarantee" in output
        assert "virtual clusters: b" in output
        assert pai("vc", "set-config", str(tmp_path / "missing.yaml"))[0] == 2
    finally:
        server.loop.call_soon_threadsafe(stop.set)
        running.result(30)
