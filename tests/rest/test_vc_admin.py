"""VCs administered over REST with a real scheduler on cells derived from the nodes: one VC set
and removed by its GPUs, the config in force, a job its VC could never hold refused at
submission and by a dry run, and a waiting job's place in its VC's queue in its detail."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml
from aiohttp.test_utils import TestClient

from libs.backbone.connecting import Bus
from libs.backbone.topology import ensure_topology, publish_event
from tests.rest.jobs import job_yaml
from tests.services.vc_support import GPU_NODES, scheduler
from tests.support.events import JobEvents
from tests.support.waiting import eventually

Client = TestClient[Any, Any]
YAML = {"Content-Type": "text/yaml"}


def in_vc(name: str, vc: str, gpus: int, instances: int = 1) -> str:
    text = job_yaml(name, instances=instances, gpu=gpus)
    return text.replace("type: job\n", f"type: job\ndefaults:\n  virtualCluster: {vc}\n")


async def test_an_admin_sets_a_vc_by_its_gpus_and_jobs_it_could_never_hold_are_refused(
    api: Client, admin_headers: dict[str, str], bus: Bus, nats_server: Any, tmp_path: Path
) -> None:
    await ensure_topology(bus.js)
    seen = JobEvents()
    await bus.js.subscribe("pai.job.>", ordered_consumer=True, cb=seen.on_msg)
    for node in GPU_NODES:  # four nodes of four A100s, no HiveD config: cells from the nodes
        await publish_event(bus.js, node)
    async with scheduler(nats_server.url, None):

        async def vcs() -> dict[str, Any]:
            response = await api.get("/api/v2/virtual-clusters", headers=admin_headers)
            return dict(await response.json()) if response.status == 200 else {}

        await eventually(
            vcs, lambda found: found.get("default", {}).get("resourcesGuaranteed", {}).get("GPUs") == 16
        )
        response = await api.put("/api/v2/virtual-clusters/team-b", json={"gpus": 2}, headers=admin_headers)
        assert response.status == 200, await response.text()
        assert (await response.json())["message"] == "VC team-b was created with 2 GPUs"
        found = await vcs()
        assert {name: vc["resourcesGuaranteed"]["GPUs"] for name, vc in found.items()} == {
            "default": 14,
            "team-b": 2,
        }

        response = await api.put("/api/v2/virtual-clusters/team-c", json={"gpus": 15}, headers=admin_headers)
        assert response.status == 400
        message = (await response.json())["message"]
        assert message.startswith("VC team-c cannot get 15 GPUs; it may have at most 14"), message

        response = await api.get("/api/v2/virtual-clusters/config", headers=admin_headers)
        assert response.status == 200, await response.text()
        shown = await response.json()
        assert shown["cells"] == "nodes"
        config = yaml.safe_load(shown["yaml"])
        assert config == shown["config"]
        assert "A100-NODE4" in config["physicalCluster"]["cellTypes"], "with its cell types"
        assert config["virtualClusters"]["team-b"] == {
            "virtualCells": [{"cellType": "A100-NODE4.A100-2GPU", "cellNumber": 1}]
        }

        # A job needing more GPUs than its VC holds could never start: refused, and by a dry run.
        for query in ("", "?dryRun=true"):
            response = await api.post(
                "/api/v2/jobs" + query,
                data=in_vc("big", "team-b", 2, instances=2),
                headers={**admin_headers, **YAML},
            )
            assert response.status == 400, await response.text()
            body = await response.json()
            assert body["code"] == "InvalidProtocolError"
            assert body["message"] == (
                "VC team-b holds 2 GPUs in all; the job needs 4 at once, so it could never start there"
            )
            assert body["problems"][0]["path"] == "defaults.virtualCluster"

        # Two jobs that fit the VC one at a time: the second waits, first in its VC's queue.
        for name in ("first", "second"):
            response = await api.post(
                "/api/v2/jobs", data=in_vc(name, "team-b", 2), headers={**admin_headers, **YAML}
            )
            assert response.status == 202, await response.text()

        async def second() -> dict[str, Any]:
            return dict(await (await api.get("/api/v2/jobs/admin~second", headers=admin_headers)).json())

        detail = await eventually(second, lambda d: "queue" in d["jobStatus"])
        assert detail["jobStatus"]["queue"] == {"position": 1, "of": 1, "virtualCluster": "team-b"}

        response = await api.delete("/api/v2/virtual-clusters/team-b", headers=admin_headers)
        assert response.status == 409, await response.text()
        # Its running job would lose its guarantee: refused, naming it, unless forced.
        assert (
            "in VC team-b would be left running without its VC guarantee"
            in (await response.json())["message"]
        )
        response = await api.delete("/api/v2/virtual-clusters/team-b?force=true", headers=admin_headers)
        assert response.status == 200, await response.text()
        assert (await response.json())["message"].startswith(
            "VC team-b was removed; its 2 GPUs went to VC default"
        )
