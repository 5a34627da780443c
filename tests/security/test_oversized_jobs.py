"""Attack: a job so large it would stall the scheduler or overflow the database.

`instances: 1000000000` was accepted and stopped scheduling for everyone; `instances: 10**30`
answered 500 (an integer the database cannot hold); `memoryMB: 1e18`, `gpu: 100000` and
`jobRetryCount: 1e12` were accepted. Each is now a 400 naming the field and the limit, and the
platform goes on accepting ordinary jobs.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from libs.backbone.natsserver import EmbeddedNats
from tests.security.rest_app import Client, one_role_job, serving, settings_for


@pytest.fixture
async def app(tmp_path: Path, nats_server: EmbeddedNats) -> AsyncIterator[tuple[Client, dict[str, str]]]:
    async with serving(settings_for(tmp_path, nats_server)) as running:
        yield running


async def submit(api: Client, headers: dict[str, str], text: str) -> tuple[int, dict[str, object]]:
    response = await api.post("/api/v2/jobs", data=text, headers={**headers, "Content-Type": "text/yaml"})
    return response.status, await response.json()


async def test_a_billion_instances_is_refused_naming_the_limit_and_a_one_task_job_goes_in_after_it(
    app: tuple[Client, dict[str, str]],
) -> None:
    api, admin = app
    status, body = await submit(api, admin, one_role_job("huge", instances=1_000_000_000))
    assert status == 400, body
    assert body["code"] == "InvalidParametersError"
    assert "taskRoles.worker.instances" in str(body["message"])
    assert "limit of 10,000 instances per task role" in str(body["message"])
    status, body = await submit(api, admin, one_role_job("small"))
    assert (status, body["name"]) == (202, "small")


@pytest.mark.parametrize(
    ("field", "value", "named"),
    [
        pytest.param("instances", 10**30, "taskRoles.worker.instances", id="instances 10**30"),
        pytest.param("instances", "1e18", "taskRoles.worker.instances", id="instances 1e18"),
        pytest.param("memoryMB", "1e18", "taskRoles.worker.resourcePerInstance.memoryMB", id="memoryMB 1e18"),
        pytest.param("memoryMB", 10**30, "taskRoles.worker.resourcePerInstance.memoryMB", id="memoryMB 10**30"),
        pytest.param("gpu", 100_000, "taskRoles.worker.resourcePerInstance.gpu", id="gpu 100000"),
        pytest.param("cpu", "1e18", "taskRoles.worker.resourcePerInstance.cpu", id="cpu 1e18"),
    ],
)
async def test_huge_numbers_are_a_400_naming_the_field_never_a_500(
    app: tuple[Client, dict[str, str]], field: str, value: object, named: str
) -> None:
    api, admin = app
    text = (
        one_role_job("big", instances=value) if field == "instances" else one_role_job("big", **{field: value})
    )
    status, body = await submit(api, admin, text)
    assert status == 400, body
    assert named in str(body["message"]), body
    assert "limit" in str(body["message"])


async def test_a_retry_count_of_1e12_is_refused(app: tuple[Client, dict[str, str]]) -> None:
    api, admin = app
    text = one_role_job("retries").replace("type: job\n", "type: job\njobRetryCount: 1e12\n")
    status, body = await submit(api, admin, text)
    assert status == 400
    assert "jobRetryCount: 1,000,000,000,000 is more than the cluster's limit of 1,000 retries" in str(
        body["message"]
    )


async def test_the_limits_in_force_are_shown_by_the_info_route(
    tmp_path: Path, nats_server: EmbeddedNats
) -> None:
    settings = settings_for(tmp_path, nats_server, limit_instances_per_task_role=4, limit_tags_per_job=1)
    async with serving(settings) as (api, admin):
        limits = (await (await api.get("/api/v2/info")).json())["limits"]
        assert limits["instancesPerTaskRole"] == 4
        assert limits["tasksPerJob"] == 10_000
        assert limits["bodyBytes"] == settings.limit_body_bytes
        status, body = await submit(api, admin, one_role_job("five", instances=5))
        assert status == 400
        assert "limit of 4 instances per task role" in str(body["message"])
        assert (await submit(api, admin, one_role_job("four", instances=4)))[0] == 202
        tag = "/api/v2/jobs/admin~four/tag"
        assert (await api.put(tag, json={"value": "a"}, headers=admin)).status == 200
        second = await api.put(tag, json={"value": "b"}, headers=admin)
        assert second.status == 400
        assert "tagsPerJob" in (await second.json())["message"]
        long_tag = await api.put(tag, json={"value": "x" * 300}, headers=admin)
        assert long_tag.status == 400
        assert "tagLength" in (await long_tag.json())["message"]
