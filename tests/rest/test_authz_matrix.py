"""Who may call what: every route against anonymous, a user, another user, an app token, an admin.

``MATRIX`` names each route of the service with the answer each caller gets: 401, 403, or
``OK`` (anything else: the caller got past authorisation, so a 400 or 404 for the probe's
deliberately harmless input counts). The test fails if the service serves a route the
matrix does not list, so a new route cannot ship without its row.
"""

from __future__ import annotations

from typing import Any

import pytest
from aiohttp.test_utils import TestClient

from services.rest.settings import RestSettings
from tests.rest.jobs import job_yaml
from tests.rest.test_list_and_auth import submit
from tests.rest.test_tokens import application_token, bearer
from tests.rest.test_users_groups import create_user

Client = TestClient[Any, Any]
OK = 0
ANYONE = (OK, OK, OK, OK, OK)
SIGNED_IN = (401, OK, OK, OK, OK)
NO_APP = (401, OK, OK, 403, OK)
OWNER = (401, OK, 403, OK, OK)
# A job's detail, attempts, events, config and logs: its owner and admins (PAI_JOB_DETAIL_PUBLIC
# is false by default; tests/security/test_job_privacy.py has the public setting).
PRIVATE = OWNER
ADMIN = (401, 403, 403, 403, OK)
CALLERS = ("anonymous", "user", "other user", "application token", "admin")

JOB = "/api/v2/jobs/{user}~{job}"
TASK = JOB + "/attempts/{attempt}/taskRoles/{role}/taskIndex/{index}/attempts"
TASK_AT = TASK.format(user="{user}", job="{job}", attempt="0", role="worker", index="0")
LOGS = TASK + "/{task_attempt}/logs"
GHOST = {"data": {"username": "ghost", "email": "g@example.com"}, "patch": True}

# (method, route, concrete path, request options, expected per caller in CALLERS order)
MATRIX: list[tuple[str, str, str, dict[str, Any], tuple[int, ...]]] = [
    ("POST", "/api/v2/authn/basic/login", "", {"data": {"username": "ghost", "password": "x"}}, ANYONE),
    ("POST", "/api/v1/token", "", {"data": {"username": "ghost", "password": "x"}}, ANYONE),
    ("GET", "/api/v2/info", "", {}, ANYONE),
    ("POST", "/api/v2/jobs", "", {"data": ""}, SIGNED_IN),
    ("GET", "/api/v2/jobs", "", {}, SIGNED_IN),
    ("GET", JOB, "", {}, PRIVATE),
    ("GET", JOB + "/attempts/{attempt}", "/api/v2/jobs/bob~mine/attempts/0", {}, PRIVATE),
    ("GET", JOB + "/config", "", {}, PRIVATE),
    ("PUT", JOB + "/executionType", "", {"json": {"value": "STOP"}}, OWNER),
    ("GET", JOB + "/job-attempts", "", {}, PRIVATE),
    ("GET", JOB + "/job-attempts/{attempt}", "/api/v2/jobs/bob~mine/job-attempts/0", {}, PRIVATE),
    ("GET", TASK, TASK_AT.format(user="bob", job="mine"), {}, PRIVATE),
    ("PUT", JOB + "/tag", "", {"json": {"value": "t"}}, OWNER),
    ("DELETE", JOB + "/tag", "", {"json": {"value": "absent"}}, OWNER),
    ("GET", LOGS, TASK_AT.format(user="bob", job="mine") + "/0/logs", {}, PRIVATE),
    # A command in a running task: its owner and admins only, whatever the detail's privacy.
    ("GET", JOB + "/tasks/{role}/{index}/exec", "/api/v2/jobs/bob~mine/tasks/worker/0/exec", {}, OWNER),
    ("GET", LOGS + "/{file}", TASK_AT.format(user="bob", job="mine") + "/0/logs/none", {}, PRIVATE),
    ("GET", "/api/v2/failure-rules", "", {}, SIGNED_IN),
    ("PUT", "/api/v2/failure-rules", "", {"data": "not: [yaml"}, ADMIN),
    ("DELETE", "/api/v2/failure-rules", "", {}, ADMIN),
    ("GET", "/api/v2/alert-rules", "", {}, ADMIN),
    ("PUT", "/api/v2/alert-rules", "", {"data": "not: [yaml"}, ADMIN),
    ("GET", "/api/v2/alerts", "", {}, SIGNED_IN),
    ("POST", "/api/v2/users", "", {"json": {"username": "b a d", "password": "x"}}, ADMIN),
    ("GET", "/api/v2/users", "", {}, ADMIN),
    ("PUT", "/api/v2/users", "", {"json": GHOST}, ADMIN),
    ("GET", "/api/v2/users/me", "", {}, SIGNED_IN),
    ("PUT", "/api/v2/users/me", "", {"json": {"data": {"email": "me@example.com"}, "patch": True}}, NO_APP),
    ("GET", "/api/v2/users/{user}", "/api/v2/users/admin", {}, SIGNED_IN),
    ("DELETE", "/api/v2/users/{user}", "/api/v2/users/ghost", {}, ADMIN),
    ("PUT", "/api/v2/users/{user}/group", "/api/v2/users/ghost/group", {"json": {"groupname": "x"}}, ADMIN),
    (
        "DELETE",
        "/api/v2/users/{user}/group",
        "/api/v2/users/ghost/group",
        {"json": {"groupname": "x"}},
        ADMIN,
    ),
    (
        "PUT",
        "/api/v2/users/{user}/grouplist",
        "/api/v2/users/ghost/grouplist",
        {"json": {"grouplist": []}},
        ADMIN,
    ),
    ("GET", "/api/v2/groups", "", {}, SIGNED_IN),
    ("POST", "/api/v2/groups", "", {"json": {"groupname": "b a d"}}, ADMIN),
    ("PUT", "/api/v2/groups", "", {"json": {"data": {"groupname": "ghost"}, "patch": True}}, ADMIN),
    ("GET", "/api/v2/groups/{group}", "/api/v2/groups/default", {}, SIGNED_IN),
    ("DELETE", "/api/v2/groups/{group}", "/api/v2/groups/ghost", {}, ADMIN),
    ("GET", "/api/v2/groups/{group}/userlist", "/api/v2/groups/default/userlist", {}, ADMIN),
    ("GET", "/api/v2/tokens", "", {}, NO_APP),
    ("POST", "/api/v2/tokens/application", "", {}, NO_APP),
    ("DELETE", "/api/v2/tokens/{token}", "/api/v2/tokens/not-a-token", {}, NO_APP),
    ("GET", "/api/v2/virtual-clusters", "", {}, SIGNED_IN),
    ("GET", "/api/v2/virtual-clusters/{vc}", "/api/v2/virtual-clusters/a", {}, SIGNED_IN),
    ("GET", "/api/v2/cluster/sku-types", "", {}, SIGNED_IN),
    ("PUT", "/api/v2/virtual-clusters/config", "", {"data": "- not a mapping"}, ADMIN),
    ("GET", "/api/v2/virtual-clusters/config", "", {}, ADMIN),
    ("PUT", "/api/v2/virtual-clusters/{vc}", "/api/v2/virtual-clusters/a", {"json": {"gpu": 1}}, ADMIN),
    ("DELETE", "/api/v2/virtual-clusters/{vc}", "/api/v2/virtual-clusters/default", {}, ADMIN),
    ("GET", "/api/v2/openapi.json", "", {}, ANYONE),
    # Without OIDC settings these answer 404 NoApiError to everyone (tests/rest/test_oidc.py has the flow).
    ("GET", "/api/v2/authn/oidc/login", "", {"allow_redirects": False}, ANYONE),
    ("GET", "/api/v2/authn/oidc/return", "", {"allow_redirects": False}, ANYONE),
    ("GET", "/api/v2/authn/oidc/logout", "", {"allow_redirects": False}, ANYONE),
    ("POST", "/api/v2/authn/oidc/code", "", {"json": {"code": "x", "state": "y"}}, ANYONE),
    ("GET", "/api/v2/storages", "", {}, SIGNED_IN),
    ("GET", "/api/v2/storages/{storage}", "/api/v2/storages/none", {}, SIGNED_IN),
    # Adding a storage: admins only (a body it refuses, so nothing is written).
    ("PUT", "/api/v2/storages/{storage}", "/api/v2/storages/x", {"json": {"data": {"path": "rel"}}}, ADMIN),
    ("GET", JOB + "/events", "", {}, PRIVATE),
    ("GET", JOB + "/job-attempts/healthz", "", {}, ANYONE),
    ("GET", "/api/v2/kubernetes/nodes", "", {}, ADMIN),
    ("GET", "/api/v2/kubernetes/pods", "", {}, ADMIN),
    ("GET", "/api/v2/cluster/metrics", "", {}, ADMIN),
    ("GET", JOB + "/metrics", "", {}, OWNER),
    ("GET", "/api/v2/alerts/recent", "", {}, ADMIN),
    ("GET", "/api/v2/alerts/rules", "", {}, ADMIN),
    # Usage: every signed-in caller, each seeing their own jobs (admins: everyone's).
    ("GET", "/api/v2/usage", "", {}, SIGNED_IN),
    # Last: it revokes the token each caller used.
    ("DELETE", "/api/v2/authn/basic/logout", "", {}, NO_APP),
]


@pytest.fixture
def rest_settings(rest_settings: RestSettings) -> RestSettings:
    """A new cluster's default: job details private to their owners and admins."""
    return rest_settings.model_copy(update={"job_detail_public": False})


def served_routes(api: Client) -> set[tuple[str, str]]:
    return {
        (route.method, route.resource.canonical)
        for route in api.app.router.routes()
        if route.resource is not None
        and route.resource.canonical.startswith("/api/")
        and route.method != "HEAD"
    }


def test_the_matrix_lists_every_route_once() -> None:
    routes = [(method, route) for method, route, *_ in MATRIX]
    assert len(routes) == len(set(routes))


async def test_every_route_answers_each_kind_of_caller_as_the_matrix_says(
    api: Client, admin_headers: dict[str, str]
) -> None:
    assert {(method, route) for method, route, *_ in MATRIX} == served_routes(api)
    user = await create_user(api, admin_headers, "bob")
    other = await create_user(api, admin_headers, "carol")
    app = bearer(await application_token(api, user))
    await submit(api, user, job_yaml("mine"))
    callers: list[dict[str, str]] = [{}, user, other, app, admin_headers]

    wrong: list[str] = []
    for method, route, path, options, expected in MATRIX:
        target = path or route.format(user="bob", job="mine")
        for name, headers, want in zip(CALLERS, callers, expected, strict=True):
            response = await api.request(method, target, headers=headers, **options)
            body: Any = await response.json() if response.content_type == "application/json" else None
            assert response.status < 500 or response.status == 503, (method, target, name, body)
            got = response.status if response.status in (401, 403) else OK
            if got != want:
                wrong.append(f"{method} {target} as {name}: {response.status} {body}")
            elif got == 401:
                assert body["code"] == "UnauthorizedUserError"
            elif got == 403:
                assert body["code"] == "ForbiddenUserError"
    assert not wrong, "\n".join(wrong)
