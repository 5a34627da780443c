"""VCs administered from the command line and shared fairly, on a platform with simulated GPUs.

An admin, and two users of one group (alice and bob), on a platform like `pai up --gpus 3`: the
admin sets two VCs with `pai vc set` and prints `pai vc config`; bob fills a one-GPU VC's queue
with twenty one-GPU jobs, then alice submits one: hers starts among the next two placements, not
after bob's nineteen. A job asking more GPUs than its VC holds is refused at submission, naming
the VC, and a waiting job's status shows its place in the VC's queue.
"""

from __future__ import annotations

import json
import re
from contextlib import AsyncExitStack
from pathlib import Path
from typing import Any

import httpx
import pytest
import yaml

from libs.protocol.events import JobScheduled, JobSubmitted
from tests.e2e.platform import ADMIN_PASSWORD, Cli, Platform, running_platform
from tests.support.waiting import eventually

pytestmark = pytest.mark.timeout(300)


def gpu_job(name: str, vc: str, gpus: int = 1, command: str = "sleep 2") -> str:
    return json.dumps(
        {
            "protocolVersion": 2,
            "name": name,
            "type": "job",
            "defaults": {"virtualCluster": vc},
            "prerequisites": [{"name": "image", "type": "dockerimage", "uri": "python:3.11-slim"}],
            "taskRoles": {
                "w": {
                    "instances": 1,
                    "dockerImage": "image",
                    "resourcePerInstance": {"cpu": 1, "memoryMB": 64, "gpu": gpus},
                    "commands": [command],
                }
            },
        }
    )


async def user_client(platform: Platform, name: str, clients: AsyncExitStack) -> httpx.AsyncClient:
    """A user in group `team`, which may use every VC of this test, with a REST client of theirs."""
    created = await platform.api.post("/api/v2/users", json={"username": name, "password": f"{name}-pass-1"})
    assert created.status_code == 201, created.text
    joined = await platform.api.put(f"/api/v2/users/{name}/group", json={"groupname": "team"})
    assert joined.status_code == 201, joined.text
    client = await clients.enter_async_context(httpx.AsyncClient(base_url=platform.info.api_url, timeout=30))
    login = await client.post(
        "/api/v2/authn/basic/login", json={"username": name, "password": f"{name}-pass-1"}
    )
    assert login.status_code == 200, login.text
    client.headers["Authorization"] = f"Bearer {login.json()['token']}"
    return client


async def submit(client: httpx.AsyncClient, text: str) -> str:
    answer = await client.post("/api/v2/jobs", content=text, headers={"Content-Type": "text/yaml"})
    assert answer.status_code == 202, answer.text
    return str(answer.json()["jobId"])


async def test_vcs_set_from_the_cli_are_shared_fairly_and_refuse_what_could_never_run(tmp_path: Path) -> None:
    async with (
        running_platform(tmp_path / "data", env={"PAI_SIMULATED_GPUS": "3"}) as platform,
        AsyncExitStack() as clients,
    ):
        group = {
            "groupname": "team",
            "extension": {"acls": {"virtualClusters": ["default", "small", "pair"]}},
        }
        created = await platform.api.post("/api/v2/groups", json=group)
        assert created.status_code == 201, created.text
        alice = await user_client(platform, "alice", clients)
        bob = await user_client(platform, "bob", clients)

        async def gpus() -> dict[str, Any]:
            answer = await platform.api.get("/api/v2/virtual-clusters")
            return dict(answer.json()) if answer.status_code == 200 else {}

        await eventually(
            gpus, lambda vcs: vcs.get("default", {}).get("resourcesGuaranteed", {}).get("GPUs") == 3
        )

        admin = Cli(platform.info.api_url, tmp_path / "admin-config")
        code, out, err = await admin.run("login", "--user", "admin", env={"PAI_PASSWORD": ADMIN_PASSWORD})
        assert code == 0, out + err
        assert await admin.run("vc", "set", "small", "--gpus", "1") == (
            0,
            "VC small was created with 1 GPU\n",
            "",
        )
        assert await admin.run("vc", "set", "pair", "--gpus", "1") == (
            0,
            "VC pair was created with 1 GPU\n",
            "",
        )
        code, out, err = await admin.run("vc", "config")
        assert code == 0, out + err
        print(out)  # the config in force, as the admin sees it
        shown = yaml.safe_load(out)
        assert "simulated-NODE3" in shown["physicalCluster"]["cellTypes"]
        assert {vc: spec["virtualCells"] for vc, spec in shown["virtualClusters"].items()} == {
            "default": [{"cellType": "simulated-NODE3.simulated", "cellNumber": 1}],
            "pair": [{"cellType": "simulated-NODE3.simulated", "cellNumber": 1}],
            "small": [{"cellType": "simulated-NODE3.simulated", "cellNumber": 1}],
        }

        # A job asking more GPUs than its VC holds is refused at once, naming the VC and its size.
        job_file = tmp_path / "too-big.yaml"
        job_file.write_text(gpu_job("too-big", "small", gpus=2))
        code, out, err = await admin.run("job", "submit", str(job_file))
        assert code == 2, out + err  # refused as an invalid job
        said = " ".join((out + err).split())
        assert "VC small holds 1 GPU in all; the job needs 2 at once, so it could never start there" in said

        bobs = [await submit(bob, gpu_job(f"bob-{i}", "small")) for i in range(20)]
        await platform.watcher.wait_for("job.scheduled", bobs[0], within=60)
        alices = await submit(alice, gpu_job("alice-0", "small"))

        # bob's last job waits; its status says where it stands in the VC's queue.
        async def status() -> str:
            code, out, err = await admin.run("job", "status", "bob~bob-19")
            assert code == 0, out + err
            return out

        shown_status = await eventually(status, lambda text: "queue: " in text, within=30)
        assert re.search(r"^queue: \d+ of \d+ in VC small$", shown_status, re.MULTILINE), shown_status

        await platform.watcher.wait_for("job.scheduled", alices, within=120)
        events = platform.watcher.events
        after = next(i for i, e in enumerate(events) if isinstance(e, JobSubmitted) and e.job_id == alices)
        small = {*bobs, alices}
        placed = [e.job_id for e in events[after:] if isinstance(e, JobScheduled) and e.job_id in small]
        assert alices in placed[:2], (
            f"alice's job was placement {placed.index(alices) + 1} after hers was submitted"
        )
