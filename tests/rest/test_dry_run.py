"""`POST /api/v2/jobs?dryRun=true`: the checks of a submission, in its words, storing nothing."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml
from aiohttp.test_utils import TestClient

from libs.backbone.connecting import Bus
from libs.protocol.subjects import JOBS_STREAM
from services.rest.settings import RestSettings
from tests.rest.jobs import job_yaml
from tests.rest.test_storages import STORAGES
from tests.rest.test_users_groups import create_user

Client = TestClient[Any, Any]
YAML = {"Content-Type": "text/yaml"}
DRY = "/api/v2/jobs?dryRun=true"


@pytest.fixture
def rest_settings(rest_settings: RestSettings, tmp_path: Path) -> RestSettings:
    path = tmp_path / "storages.yaml"
    path.write_text(yaml.safe_dump(STORAGES))
    return rest_settings.model_copy(update={"storages_file": path})


def with_storage(text: str, *names: str) -> str:
    plugins = [{"plugin": "teamwise_storage", "parameters": {"storageConfigNames": list(names)}}]
    return text + yaml.safe_dump({"extras": {"com.microsoft.pai.runtimeplugin": plugins}})


async def stream_messages(bus: Bus) -> int:
    return int((await bus.js.stream_info(JOBS_STREAM)).state.messages)


async def test_a_dry_run_of_a_good_job_says_it_would_be_accepted_and_stores_nothing(
    api: Client, admin_headers: dict[str, str], bus: Bus
) -> None:
    before = await stream_messages(bus)
    answer = await api.post(DRY, data=job_yaml("only-checked"), headers={**admin_headers, **YAML})
    assert answer.status == 200, await answer.text()
    body = await answer.json()
    assert body == {
        "message": "job only-checked would be accepted",
        "dryRun": True,
        "name": "only-checked",
        "username": "admin",
        "warnings": [],
    }
    assert (await api.get("/api/v2/jobs/admin~only-checked", headers=admin_headers)).status == 404
    assert await stream_messages(bus) == before
    # The same job is then really submitted: the dry run took no name.
    real = await api.post("/api/v2/jobs", data=job_yaml("only-checked"), headers={**admin_headers, **YAML})
    assert real.status == 202, await real.text()
    again = await api.post(DRY, data=job_yaml("only-checked"), headers={**admin_headers, **YAML})
    assert again.status == 409
    assert (await again.json())["code"] == "ConflictJobError"


async def test_a_dry_run_refuses_a_vc_and_a_storage_the_user_may_not_use_as_submitting_does(
    api: Client, admin_headers: dict[str, str], bus: Bus
) -> None:
    group = {"groupname": "readers", "extension": {"acls": {"storageConfigs": ["home"]}}}
    assert (await api.post("/api/v2/groups", json=group, headers=admin_headers)).status == 201
    newcomer = await create_user(api, admin_headers, "newcomer", virtualCluster=[])
    joined = await api.put(
        "/api/v2/users/newcomer/group", json={"groupname": "readers"}, headers=admin_headers
    )
    assert joined.status == 201
    text = with_storage(job_yaml("couplet", gpu=0), "scratch")
    before = await stream_messages(bus)

    dry = await api.post(DRY, data=text, headers={**newcomer, **YAML})
    real = await api.post("/api/v2/jobs", data=text, headers={**newcomer, **YAML})
    checked, submitted = await dry.json(), await real.json()
    # The first refusal is the submission's own answer, word for word ...
    assert (dry.status, checked["code"], checked["message"]) == (
        real.status,
        submitted["code"],
        submitted["message"],
    )
    assert dry.status == 403, checked
    assert checked["message"] == "User newcomer is not allowed to do operation in default"
    # ... and the dry run lists what the submission would refuse next, too.
    refusals = checked["refusals"]
    assert [r["path"] for r in refusals] == [
        "defaults.virtualCluster",
        "extras.com.microsoft.pai.runtimeplugin",
    ]
    assert "you may not use storage scratch" in refusals[1]["message"]
    assert "home" in refusals[1]["message"], "it names the storages the user may use"
    assert await stream_messages(bus) == before

    # With a VC, the storage is what a submission refuses, in the same words.
    member = await create_user(api, admin_headers, "member", virtualCluster=["default"])
    joined = await api.put("/api/v2/users/member/group", json={"groupname": "readers"}, headers=admin_headers)
    assert joined.status == 201
    dry = await api.post(DRY, data=text, headers={**member, **YAML})
    real = await api.post("/api/v2/jobs", data=text, headers={**member, **YAML})
    assert dry.status == real.status == 400
    assert (await dry.json())["message"] == (await real.json())["message"]
    fine = with_storage(job_yaml("couplet", gpu=0), "home")
    assert (await api.post(DRY, data=fine, headers={**member, **YAML})).status == 200


async def test_a_dry_run_of_a_wrong_job_lists_its_problems_by_path(
    api: Client, admin_headers: dict[str, str]
) -> None:
    answer = await api.post(DRY, data=job_yaml("bad", instances=0), headers={**admin_headers, **YAML})
    assert answer.status == 400
    body = await answer.json()
    assert body["code"] == "InvalidProtocolError"
    assert any("instances" in problem["path"] for problem in body["problems"])
