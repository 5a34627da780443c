"""Listing jobs with OpenPAI's filters, logging in, and the routes a token protects."""

from __future__ import annotations

from typing import Any

from aiohttp.test_utils import TestClient

from libs.backbone.connecting import Bus
from libs.backbone.topology import publish_event
from libs.protocol.events import JobCompleted, JobState
from services.rest.adapters import accounts
from services.rest.adapters.auth import hash_password
from services.rest.keys import ENGINE
from tests.rest.jobs import job_yaml
from tests.support.waiting import eventually

Client = TestClient[Any, Any]
YAML = {"Content-Type": "text/yaml"}


async def login(api: Client, user: str, password: str, prefix: str = "/api") -> dict[str, str]:
    response = await api.post(f"{prefix}/v2/authn/basic/login", data={"username": user, "password": password})
    assert response.status == 200, await response.text()
    return {"Authorization": f"Bearer {(await response.json())['token']}"}


async def add_user(api: Client, user: str, password: str) -> dict[str, str]:
    await accounts.create_user(api.app[ENGINE], user, hash_password(password))
    return await login(api, user, password)


async def submit(api: Client, headers: dict[str, str], yaml_text: str) -> str:
    response = await api.post("/api/v2/jobs", data=yaml_text, headers={**headers, **YAML})
    assert response.status == 202, await response.text()
    job_id: str = (await response.json())["jobId"]
    return job_id


async def names(api: Client, headers: dict[str, str], query: str) -> list[str]:
    response = await api.get(f"/api/v2/jobs?{query}", headers=headers)
    assert response.status == 200, await response.text()
    return [item["name"] for item in await response.json()]


async def test_the_job_list_filters_orders_and_pages(
    api: Client, admin_headers: dict[str, str], bus: Bus
) -> None:
    bob = await add_user(api, "bob", "bob-password")
    await submit(api, admin_headers, job_yaml("alpha", instances=1))
    await submit(
        api,
        admin_headers,
        job_yaml("beta", instances=3).replace("type: job\n", "type: job\ndefaults:\n  virtualCluster: vc2\n"),
    )
    done = await submit(api, bob, job_yaml("gamma-search", instances=2))
    await publish_event(bus.js, JobCompleted(job_id=done, attempt=0, state=JobState.FAILED, exit_code=1))
    await eventually(
        lambda: names(api, admin_headers, "state=FAILED"), lambda found: found == ["gamma-search"]
    )

    assert await names(api, admin_headers, "") == ["gamma-search", "beta", "alpha"]
    assert await names(api, admin_headers, "username=admin") == ["beta", "alpha"]
    assert await names(api, admin_headers, "username=bob,admin&order=jobName,ASC") == [
        "alpha",
        "beta",
        "gamma-search",
    ]
    assert await names(api, admin_headers, "vc=vc2") == ["beta"]
    assert await names(api, admin_headers, "state=WAITING") == ["beta", "alpha"]
    assert await names(api, admin_headers, "keyword=SEARCH") == ["gamma-search"]
    assert await names(api, admin_headers, "keyword=bo") == ["gamma-search"]
    assert await names(api, admin_headers, "order=totalTaskNumber,DESC") == ["beta", "gamma-search", "alpha"]
    assert await names(api, admin_headers, "order=completionTime,ASC") == ["gamma-search", "beta", "alpha"]
    assert await names(api, admin_headers, "offset=1&limit=1") == ["beta"]
    assert await names(api, admin_headers, "jobPriority=default&limit=2") == ["gamma-search", "beta"]

    counted = await (await api.get("/api/v2/jobs?withTotalCount=true&limit=1", headers=admin_headers)).json()
    assert counted["totalCount"] == 3
    assert [item["name"] for item in counted["data"]] == ["gamma-search"]


async def test_bad_list_parameters_name_the_parameter(api: Client, admin_headers: dict[str, str]) -> None:
    for query, word in (
        ("limit=0", "limit"),
        ("offset=x", "offset"),
        ("order=size,ASC", "order"),
        ("state=DONE", "state"),
    ):
        response = await api.get(f"/api/v2/jobs?{query}", headers=admin_headers)
        assert response.status == 400
        body = await response.json()
        assert body["code"] == "InvalidParametersError"
        assert word in body["message"]


async def test_login_gives_a_token_and_wrong_credentials_are_refused(api: Client) -> None:
    response = await api.post(
        "/api/v2/authn/basic/login", json={"username": "admin", "password": "admin-secret-1"}
    )
    body = await response.json()
    assert response.status == 200
    assert body["user"] == "admin"
    assert body["admin"] is True
    assert body["token"].count(".") == 2

    wrong = await api.post("/api/v2/authn/basic/login", data={"username": "admin", "password": "nope"})
    nobody = await api.post("/api/v2/authn/basic/login", data={"username": "ghost", "password": "x"})
    # An unknown user and a wrong password answer alike (OpenPAI's NoUserError named which).
    failed = {"code": "IncorrectPasswordError", "message": "User name or password is incorrect."}
    assert (wrong.status, await wrong.json()) == (400, failed)
    assert (nobody.status, await nobody.json()) == (400, failed)


async def test_protected_routes_need_a_valid_token(api: Client, admin_headers: dict[str, str]) -> None:
    await submit(api, admin_headers, job_yaml("guarded"))
    for method, path in (
        ("GET", "/api/v2/jobs"),
        ("POST", "/api/v2/jobs"),
        ("PUT", "/api/v2/jobs/admin~guarded/executionType"),
        ("GET", "/api/v2/jobs/admin~guarded/config"),
    ):
        response = await api.request(method, path, headers={"Authorization": "Bearer not-a-token"})
        assert response.status == 401, path
        assert (await response.json())["code"] == "UnauthorizedUserError"
        assert (await api.request(method, path)).status == 401

    await api.delete("/api/v2/authn/basic/logout", headers=admin_headers)
    revoked = await api.get("/api/v2/jobs", headers=admin_headers)
    assert revoked.status == 401
    assert (await revoked.json())["message"] == "Your token is invalid."
    assert "log in again" in (await revoked.json())["hint"]


async def test_the_rest_server_prefix_serves_the_same_api(api: Client, admin_headers: dict[str, str]) -> None:
    headers = await login(api, "admin", "admin-secret-1", prefix="/rest-server/api")
    await submit(api, headers, job_yaml("prefixed"))
    plain = await (await api.get("/api/v2/jobs/admin~prefixed")).json()
    prefixed = await (await api.get("/rest-server/api/v2/jobs/admin~prefixed")).json()
    assert plain == prefixed
    listed = await (await api.get("/rest-server/api/v2/jobs", headers=admin_headers)).json()
    assert [item["name"] for item in listed] == ["prefixed"]


async def test_the_stored_config_is_yaml_with_secrets_masked(
    api: Client, admin_headers: dict[str, str]
) -> None:
    await submit(api, admin_headers, job_yaml("masked", secret="hunter2"))
    response = await api.get("/api/v2/jobs/admin~masked/config", headers=admin_headers)
    assert response.status == 200
    assert response.content_type == "text/yaml"
    text = await response.text()
    assert "hunter2" not in text
    assert "name: masked" in text
    assert "token:" in text


async def test_unknown_jobs_and_routes_answer_in_openpai_shape(api: Client) -> None:
    missing = await api.get("/api/v2/jobs/admin~nothing")
    assert (missing.status, await missing.json()) == (
        404,
        {"code": "NoJobError", "message": "Job admin~nothing is not found."},
    )
    nowhere = await api.get("/api/v2/nowhere")
    assert (nowhere.status, (await nowhere.json())["code"]) == (404, "NoApiError")


async def test_a_nul_in_a_path_or_query_is_a_clear_400_on_every_backend(
    api: TestClient[Any, Any], admin_headers: dict[str, str]
) -> None:
    for path in ("/api/v2/jobs/7%00x~y/job-attempts", "/api/v2/jobs?username=a%00b"):
        response = await api.get(path, headers=admin_headers)
        assert response.status == 400, path
        assert (await response.json())["code"] == "InvalidParametersError"


async def test_a_nul_in_a_login_name_is_an_unknown_user_on_every_backend(api: Client) -> None:
    # No user can be named so, and PostgreSQL cannot even compare such text: never a 500.
    form = await api.post("/api/v2/authn/basic/login", data={"username": "ad\x00min", "password": "x"})
    body = await api.post("/api/v2/authn/basic/login", json={"username": "\x00", "password": "x"})
    for response in (form, body):
        assert (response.status, (await response.json())["code"]) == (400, "IncorrectPasswordError")
