"""Storages on the embedded platform: a local directory the user's groups grant, mounted by
teamwise_storage at its mount path, read by the job (also through a marketplace data item of
dataType storage); a storage the user may not use refused."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from libs.protocol.events import JobState
from tests.e2e.platform import job_yaml, running_platform

pytestmark = pytest.mark.timeout(240)


def storages_file(tmp_path: Path) -> Path:
    shared = tmp_path / "shared"
    (shared / "sets").mkdir(parents=True)
    (shared / "sets" / "hello.txt").write_text("from the storage\n")
    path = tmp_path / "storages.yaml"
    storages = [{"name": "team", "type": "local", "default": True, "data": {"path": str(shared)}}]
    path.write_text(yaml.safe_dump(storages))
    return path


async def test_a_granted_local_storage_is_read_at_its_mount_path_and_another_is_refused(
    tmp_path: Path,
) -> None:
    env = {"PAI_STORAGES_FILE": str(storages_file(tmp_path))}
    async with running_platform(tmp_path / "data", env=env) as platform:
        plugin = {
            "plugin": "teamwise_storage",
            "parameters": {"storages": [{"name": "team", "mountPath": "/mnt/team"}]},
        }
        text = job_yaml(
            "reads-storage",
            {"main": {"commands": ["cat ./mnt/team/sets/hello.txt"]}},
            extras={"com.microsoft.pai.runtimeplugin": [plugin]},
        )
        job_id = await platform.submit(text)
        completed = await platform.completed(job_id)
        assert completed.state == JobState.SUCCEEDED
        assert "from the storage" in await platform.log("reads-storage", "main", 0)

        other = {"plugin": "teamwise_storage", "parameters": {"storageConfigNames": ["elsewhere"]}}
        refused = await platform.api.post(
            "/api/v2/jobs",
            content=job_yaml(
                "refused-storage",
                {"main": {"commands": ["true"]}},
                extras={"com.microsoft.pai.runtimeplugin": [other]},
            ),
            headers={"Content-Type": "text/yaml"},
        )
        assert refused.status_code == 400, refused.text
        message = refused.json()["message"]
        assert "elsewhere" in message
        assert "team" in message

        item = {"name": "team sets", "type": "data", "protocol": "", "isPrivate": True}
        item.update(dataType="storage", dataUrl="team/sets")
        created = await platform.api.post("/marketplace/api/items", json=item)
        assert created.status_code == 201, created.text
        job = await platform.api.get(f"/marketplace/api/items/{created.json()['id']}/job")
        assert job.status_code == 200, job.text
        protocol = job.json()["protocol"]
        completed = await platform.completed(await platform.submit(protocol))
        assert completed.state == JobState.SUCCEEDED
        assert "hello.txt" in await platform.log(yaml.safe_load(protocol)["name"], "main", 0)
