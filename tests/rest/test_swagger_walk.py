"""Every operation of OpenPAI's swagger.yaml, called on our server, answers as the swagger says.

The walk runs against a real scheduler (virtual clusters, placement) with a job that is
placed, so attempts and tasks exist. Each response's status must be one the swagger
documents for that operation and its body must validate against the documented schema.
Operations we do not serve yet are listed in ``NOT_YET``: they must still fail cleanly, and
the test fails once one starts answering, so the list can only shrink.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import yaml
from aiohttp.test_utils import TestClient
from nats.aio.msg import Msg

from libs.backbone.connecting import Bus
from libs.protocol.subjects import ALERTS_RPC
from services.rest.settings import RestSettings
from tests.rest.conftest import ADMIN_PASSWORD
from tests.rest.fake_idp import CLIENT_ID, CLIENT_SECRET, FakeIdp
from tests.rest.jobs import job_yaml
from tests.rest.swagger import SWAGGER_PARTS, Swagger
from tests.rest.test_list_and_auth import login
from tests.rest.test_virtual_clusters import cluster_with_a_job
from tests.services.vc_support import cluster_file, scheduler
from tests.support.anchors import skip_without
from tests.support.waiting import eventually

Client = TestClient[Any, Any]
WALKED_STORAGE = {
    "name": "walked-nfs",
    "share": True,
    "volumeName": "walked-pv",
    "default": True,
    "type": "nfs",
    "data": {"server": "10.0.0.9", "path": "/data"},
    "mountOptions": ["vers=4"],
}


@pytest.fixture
def rest_settings(rest_settings: RestSettings, idp: FakeIdp, tmp_path: Path) -> RestSettings:
    """The walk's cluster signs in with OIDC (a fake provider) and lists one storage."""
    storages = tmp_path / "storages.yaml"
    storages.write_text(yaml.safe_dump([WALKED_STORAGE]))
    return rest_settings.model_copy(
        update={
            "oidc_issuer": idp.issuer,
            "oidc_client_id": CLIENT_ID,
            "oidc_client_secret": CLIENT_SECRET,
            "storages_file": storages,
        }
    )


NOT_YET: set[tuple[str, str]] = set()

JOB = "/api/v2/jobs/{user}~{job}"
TASK = JOB + "/attempts/{jobAttemptId}/taskRoles/{taskRoleName}/taskIndex/{taskIndex}/attempts"
# (method, swagger path, request options, the status expected), in an order where each call
# finds what it needs (the user before their group changes, the token before its revocation).
WALK: list[tuple[str, str, dict[str, Any], int]] = [
    ("GET", "/api/v2/info", {"anonymous": True}, 200),
    ("GET", "/api/v2/authn/oidc/login", {"anonymous": True, "redirect": False}, 302),
    ("POST", "/api/v2/authn/basic/login", {"data": {"username": "admin", "password": ADMIN_PASSWORD}}, 200),
    ("POST", "/api/v2/tokens/application", {}, 200),
    ("GET", "/api/v2/tokens", {}, 200),
    ("DELETE", "/api/v2/tokens/{token}", {}, 200),
    ("POST", "/api/v2/users", {"json": {"username": "bob", "password": "bob-password"}}, 201),
    ("GET", "/api/v2/users", {}, 200),
    (
        "PUT",
        "/api/v2/users",
        {"json": {"data": {"username": "bob", "email": "bob@example.com"}, "patch": True}},
        201,
    ),
    (
        "PUT",
        "/api/v2/users/me",
        {"json": {"data": {"username": "admin", "email": "a@example.com"}, "patch": True}},
        201,
    ),
    ("GET", "/api/v2/users/{user}", {}, 200),
    (
        "POST",
        "/api/v2/groups",
        {"json": {"groupname": "walkers", "extension": {"acls": {"virtualClusters": ["a"]}}}},
        201,
    ),
    ("GET", "/api/v2/groups", {}, 200),
    (
        "PUT",
        "/api/v2/groups",
        {"json": {"data": {"groupname": "walkers", "description": "d"}, "patch": True}},
        201,
    ),
    ("GET", "/api/v2/groups/{group}", {}, 200),
    ("PUT", "/api/v2/users/{user}/group/", {"json": {"groupname": "walkers"}}, 201),
    ("GET", "/api/v2/groups/{group}/userlist", {}, 200),
    ("DELETE", "/api/v2/users/{user}/group/", {"json": {"groupname": "walkers"}}, 201),
    ("PUT", "/api/v2/users/{user}/grouplist/", {"json": {"grouplist": ["default", "walkers"]}}, 201),
    ("DELETE", "/api/v2/groups/{group}", {}, 201),
    ("DELETE", "/api/v2/users/{user}", {}, 200),
    ("GET", "/api/v2/virtual-clusters", {}, 200),
    ("GET", "/api/v2/storages", {"params": {"default": "true"}}, 200),
    ("GET", "/api/v2/storages/{storage}", {}, 200),
    ("GET", "/api/v2/kubernetes/nodes", {}, 200),
    ("GET", "/api/v2/virtual-clusters/{vc}", {}, 200),
    ("POST", "/api/v2/jobs", {"yaml": True}, 202),
    ("GET", "/api/v2/jobs", {}, 200),
    ("GET", JOB, {"placed": True}, 200),
    ("GET", JOB + "/attempts/{jobAttemptId}", {}, 200),
    ("GET", JOB + "/config", {}, 200),
    ("PUT", JOB + "/tag", {"json": {"value": "walked"}}, 200),
    ("DELETE", JOB + "/tag", {"json": {"value": "walked"}}, 200),
    ("GET", JOB + "/job-attempts", {}, 200),
    ("GET", JOB + "/job-attempts/{attemptIndex}", {}, 200),
    ("GET", TASK, {}, 200),
    ("GET", TASK + "/{taskAttemptId}/logs", {}, 200),
    ("GET", JOB + "/events", {"params": {"type": "Normal"}}, 200),
    ("GET", JOB + "/job-attempts/healthz", {}, 200),
    ("GET", "/api/v2/kubernetes/pods", {"params": {"namespace": "default"}}, 200),
    ("GET", "/api/v2/alerts", {}, 200),
    ("PUT", JOB + "/executionType", {"json": {"value": "STOP"}}, 202),
    ("DELETE", "/api/v2/authn/basic/logout", {}, 200),
    ("GET", "/api/v2/authn/oidc/logout", {"redirect": False}, 302),
]

VALUES = {
    "group": "walkers",
    "vc": "a",
    "job": "walk",
    "jobAttemptId": "0",
    "attemptIndex": "0",
    "taskRoleName": "worker",
    "taskIndex": "0",
    "taskAttemptId": "0",
    "storage": "walked-nfs",
}


def concrete(path: str, values: dict[str, str]) -> str:
    for name, value in values.items():
        path = path.replace("{" + name + "}", value)
    return path


async def body_of(response: Any) -> tuple[str, Any]:
    text = await response.text()
    if response.content_type == "application/json":
        return response.content_type, json.loads(text)
    if response.content_type == "text/yaml":
        return response.content_type, yaml.safe_load(text)
    return response.content_type, text


def test_the_walk_covers_every_swagger_operation() -> None:
    skip_without(*SWAGGER_PARTS)
    documented = {(method, path) for method, path, _ in Swagger().operations()}
    walked = {(method, path) for method, path, _, _ in WALK}
    assert len(documented) == 44
    assert walked | NOT_YET == documented
    assert not walked & NOT_YET


async def test_every_swagger_operation_answers_with_the_documented_shape(
    api: Client, admin_headers: dict[str, str], bus: Bus, nats_server: Any, tmp_path: Path
) -> None:
    skip_without(*SWAGGER_PARTS)
    swagger = Swagger()
    seen = await cluster_with_a_job(bus)

    async def alerter(msg: Msg) -> None:
        await msg.respond(b"[]")

    token = (await (await api.post("/api/v2/tokens/application", headers=admin_headers)).json())["token"]
    values = {**VALUES, "user": "bob", "token": token}
    job_id = ""
    alerts = await bus.nc.subscribe(ALERTS_RPC, cb=alerter)
    async with scheduler(nats_server.url, cluster_file(tmp_path)):
        for method, path, options, expected in WALK:
            headers = {} if options.get("anonymous") else dict(admin_headers)
            kwargs: dict[str, Any] = {"headers": headers}
            if "json" in options:
                kwargs["json"] = options["json"]
            if "data" in options:
                kwargs["data"] = options["data"]
            if "params" in options:
                kwargs["params"] = options["params"]
            if options.get("redirect") is False:
                kwargs["allow_redirects"] = False
            if options.get("yaml"):
                vc = "type: job\ndefaults:\n  virtualCluster: a\n"
                kwargs["data"] = job_yaml("walk", instances=1).replace("type: job\n", vc)
                headers["Content-Type"] = "text/yaml"
            if path.startswith(JOB):
                values["user"] = "admin"
            if options.get("placed"):
                await seen.wait_for("job.scheduled", job_id)
                await eventually(
                    lambda: api_json(api, "/api/v2/jobs/admin~walk/job-attempts", admin_headers),
                    lambda found: isinstance(found, list) and bool(found),
                )
            response = await api.request(method, concrete(path, values), **kwargs)
            content_type, body = await body_of(response)
            assert response.status == expected, (method, path, body)
            swagger.validate(method, path, response.status, content_type, body)
            if options.get("yaml"):
                job_id = body["jobId"]
        for method, path, options, _ in WALK:
            # Anonymous: public operations still answer, the rest refuse in OpenPAI's error shape.
            response = await api.request(
                method,
                concrete(path, values).replace("/api/", "/rest-server/api/", 1),
                allow_redirects=options.get("redirect", True),
            )
            content_type, body = await body_of(response)
            if response.status >= 400:
                swagger.validate_error(body)
                if swagger.documents(method, path, response.status):
                    swagger.validate(method, path, response.status, content_type, body)
            else:
                assert options.get("anonymous") or method == "GET" or path.endswith("/login"), (method, path)
        fresh = await login(api, "admin", ADMIN_PASSWORD)  # the walk ended with a logout
        for method, path in sorted(NOT_YET):
            response = await api.request(method, concrete(path, values), headers=fresh)
            assert response.status != 401, (method, path)
            assert response.status >= 400, f"{method} {path} is served now: move it into WALK"
            content_type, body = await body_of(response)
            assert content_type == "application/json"
            swagger.validate_error(body)
    await alerts.unsubscribe()


async def api_json(api: Client, path: str, headers: dict[str, str]) -> Any:
    return await (await api.get(path, headers=headers)).json()
