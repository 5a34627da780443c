"""Attack: a job so large it would stall the scheduler or overflow the database.

`instances: 1000000000` was accepted and stopped scheduling for everyone; `instances: 10**30`
answered 500 (an integer the database cannot hold); `memoryMB: 1e18`, `gpu: 100000` and
`jobRetryCount: 1e12` were accepted. Each is now a 400 naming the field and the limit, and the
service goes on accepting ordinary jobs. (What the scheduler does with such a job that reached
the stream anyway: tests/unit/test_scheduler_refusals.py, and on the whole platform
tests/security/test_oversized_jobs_on_the_platform.py.)
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.rest.serving import ServerThread
from tests.security.rest_app import error_of, one_role_job, rest_service

Service = tuple[ServerThread, dict[str, str]]


@pytest.fixture(scope="module")
def service(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Service]:
    with rest_service(tmp_path_factory.mktemp("oversized")) as running:
        yield running


@pytest.fixture
async def api(service: Service) -> AsyncIterator[httpx.AsyncClient]:
    server, admin = service
    async with httpx.AsyncClient(base_url=server.url, headers=admin, timeout=30) as client:
        yield client


async def submit(api: httpx.AsyncClient, text: str) -> tuple[int, dict[str, Any]]:
    response = await api.post("/api/v2/jobs", content=text, headers={"Content-Type": "text/yaml"})
    return response.status_code, response.json()


async def test_a_billion_instances_is_refused_naming_the_limit_and_a_one_task_job_goes_in_after_it(
    api: httpx.AsyncClient,
) -> None:
    status, body = await submit(api, one_role_job("huge", instances=1_000_000_000))
    assert status == 400, body
    assert body["code"] == "InvalidProtocolError"  # OpenPAI's code for a job config it refuses
    assert "taskRoles.worker.instances" in body["message"]
    assert "limit of 10,000 instances per task role" in body["message"]
    status, body = await submit(api, one_role_job("small"))
    assert (status, body["name"]) == (202, "small")


@pytest.mark.parametrize(
    ("field", "value", "named"),
    [
        pytest.param("instances", 10**30, "taskRoles.worker.instances", id="instances 10**30"),
        pytest.param("instances", "1e18", "taskRoles.worker.instances", id="instances 1e18"),
        pytest.param("memoryMB", "1e18", "taskRoles.worker.resourcePerInstance.memoryMB", id="memoryMB 1e18"),
        pytest.param(
            "memoryMB", 10**30, "taskRoles.worker.resourcePerInstance.memoryMB", id="memoryMB 10**30"
        ),
        pytest.param("gpu", 100_000, "taskRoles.worker.resourcePerInstance.gpu", id="gpu 100000"),
        pytest.param("cpu", "1e18", "taskRoles.worker.resourcePerInstance.cpu", id="cpu 1e18"),
    ],
)
async def test_huge_numbers_are_a_400_naming_the_field_never_a_500(
    api: httpx.AsyncClient, field: str, value: object, named: str
) -> None:
    if field == "instances":
        text = one_role_job("big", instances=value)
    else:
        text = one_role_job("big", **{field: value})
    status, body = await submit(api, text)
    assert status == 400, body
    assert named in body["message"], body
    assert "limit" in body["message"]


async def test_a_retry_count_of_1e12_is_refused(api: httpx.AsyncClient) -> None:
    text = one_role_job("retries").replace("type: job\n", "type: job\njobRetryCount: 1e12\n")
    status, body = await submit(api, text)
    assert status == 400
    assert (
        "jobRetryCount: 1,000,000,000,000 is more than the cluster's limit of 1,000 retries"
        in body["message"]
    )


async def test_huge_numbers_in_json_bodies_and_queries_are_400s(api: httpx.AsyncClient) -> None:
    assert (await submit(api, one_role_job("tagged")))[0] == 202
    for body in ('{"value": 1e999}', '{"value": ' + "9" * 5000 + "}"):
        response = await api.put("/api/v2/jobs/admin~tagged/tag", content=body)
        assert error_of(response)[0] == 400
    listing = await api.get("/api/v2/jobs", params={"offset": str(10**30)})
    assert error_of(listing)[0] == 400
    for number in ("1e999", "NaN", "-Infinity"):
        body = '{"username": "numbers", "password": "numbers-password-1", "extension": {"x": ' + number + "}}"
        status, error = error_of(await api.post("/api/v2/users", content=body))
        assert status == 400, error
        assert f"the number {number}" in error["message"]


def test_the_limits_in_force_are_shown_by_the_info_route_and_apply(tmp_path: Path) -> None:
    with (
        rest_service(tmp_path, limit_instances_per_task_role=4, limit_tags_per_job=1) as (server, admin),
        httpx.Client(base_url=server.url, headers=admin, timeout=30) as api,
    ):
        check_limits(api, server)


def check_limits(api: httpx.Client, server: ServerThread) -> None:
    limits = api.get("/api/v2/info").json()["limits"]
    assert limits["instancesPerTaskRole"] == 4
    assert limits["tasksPerJob"] == 10_000
    assert limits["bodyBytes"] == server.settings.limit_body_bytes
    five = api.post("/api/v2/jobs", content=one_role_job("five", instances=5))
    assert "limit of 4 instances per task role" in error_of(five)[1]["message"]
    assert api.post("/api/v2/jobs", content=one_role_job("four", instances=4)).status_code == 202
    tag = "/api/v2/jobs/admin~four/tag"
    assert api.put(tag, json={"value": "a"}).status_code == 200
    status, body = error_of(api.put(tag, json={"value": "b"}))
    assert status == 400
    assert "tagsPerJob" in body["message"]
    status, body = error_of(api.put(tag, json={"value": "x" * 300}))
    assert status == 400
    assert "tagLength" in body["message"]
