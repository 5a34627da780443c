"""The contract: every operation of OpenPAI's swagger.yaml answers on our server as documented.

The walk runs against a real scheduler (virtual clusters, placement) with a job that is
placed, so attempts and tasks exist. Each response's status must be one the swagger
documents for that operation, its body must validate against the documented schema and
carry every field of the documented example with the same JSON type. Then every documented
error is provoked (a guest, an application token, a non-admin, something missing, a bad
value): its status must be documented and its code and message those of the swagger's
examples. Where OpenPAI's rest-server answers otherwise than its swagger, we answer as the
rest-server does (clients met that), and each such place is listed, with its source, in
``REST_SERVER_STATUS`` and ``REST_SERVER_TEXTS``. Operations we do not serve yet are listed in
``NOT_YET``: they must still fail cleanly, and the test fails once one starts answering.
The swagger is read from ../shared next to the checkout; without it the tests are skipped.
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
from tests.rest.swagger import SWAGGER_PARTS, Swagger, like_example, matches_template
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
                # Attempt 0 answers from the job row at once; the task's own row is what the
                # placed operations read, so wait until the projection has written it.
                await eventually(
                    lambda: api_json(api, "/api/v2/jobs/admin~walk", admin_headers),
                    lambda found: (
                        isinstance(found, dict)
                        and any(
                            task.get("createdTime") is not None
                            for role in (found.get("taskRoles") or {}).values()
                            for task in role.get("taskStatuses") or []
                        )
                    ),
                )
            response = await api.request(method, concrete(path, values), **kwargs)
            content_type, body = await body_of(response)
            assert response.status == expected, (method, path, body)
            swagger.validate(method, path, response.status, content_type, body)
            for example in swagger.examples(method, path, response.status):
                if (method, path) not in EXAMPLES_NOT_DATA:
                    assert like_example(example, body) == [], (method, path)
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
            if response.status == 401:
                assert (body["code"], body["message"]) == (
                    "UnauthorizedUserError",
                    "Guest is not allowed to do this operation.",
                ), (method, path)
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
        await provoke_every_documented_error(api, swagger, fresh, values)
    await alerts.unsubscribe()


async def api_json(api: Client, path: str, headers: dict[str, str]) -> Any:
    return await (await api.get(path, headers=headers)).json()


# Where OpenPAI's rest-server answers with another status than its swagger documents.
REST_SERVER_STATUS = {
    # controllers/v2/user.js getUser: an unknown user is createError('Bad Request', 'NoUserError').
    ("GET", "/api/v2/users/{user}", 400): "controllers/v2/user.js getUser",
}
# Where its message differs from the swagger's example for the same code (the rest-server's text).
REST_SERVER_TEXTS = {
    # controllers/v2/user.js: a change of an unknown user says "User X not found."
    ("NoUserError", "User {user} not found."),
    # controllers/v2/user.js checkSelf.
    ("ForbiddenUserError", "Can't update other user's data"),
    # models/v2/job/k8s.js put.
    ("ForbiddenUserError", "User {user} is not allowed to do operation in {vc}"),
    ("ConflictJobError", "Job {job} already exists."),
    # models/v2/job/k8s.js get.
    ("NoJobError", "JobAttemptId {attempt} is not found in {job}."),
    # models/v2/job/k8s.js deleteTag (the swagger's example has a space before the period).
    ("NoTagError", "Tag {tag} is not found for job {job}."),
    # This platform's own (OpenPAI revokes only the caller's tokens too; no text is documented).
    ("ForbiddenUserError", "A token can be revoked only by its owner."),
    # This platform's own: login answers an unknown user as a wrong password
    # (services/rest/adapters/logins.py), where the rest-server's NoUserError told anyone which
    # names exist.
    ("IncorrectPasswordError", "User name or password is incorrect."),
}
# Examples that are not data to compare: pointers to Kubernetes' own lists, and a job's config
# A job's config is the YAML its user sent: the example is one job, not the fields of every one.
EXAMPLES_NOT_DATA = {
    ("GET", "/api/v2/kubernetes/nodes"),
    ("GET", "/api/v2/kubernetes/pods"),
    ("GET", JOB + "/config"),
}
# Codes whose message names the offending field in the caller's words (OpenPAI's Joi messages).
FREE_TEXT = {"InvalidParametersError"}

GHOST = {"user": "ghost", "group": "ghost", "vc": "ghost", "storage": "ghost", "job": "ghost"}
LOGIN = "/api/v2/authn/basic/login"
GROUP = "/api/v2/users/{user}/group/"
GROUPLIST = "/api/v2/users/{user}/grouplist/"
# (method, swagger path, caller, values over the walk's, request options, status expected).
# Callers: "admin", "carol" (a user without rights), "app" (an admin's application token).
ERRORS: list[tuple[str, str, str, dict[str, str], dict[str, Any], int]] = [
    ("POST", LOGIN, "anyone", {}, {"data": {"username": "ghost", "password": "x"}}, 400),
    ("POST", LOGIN, "anyone", {}, {"data": {"username": "admin", "password": "no"}}, 400),
    ("DELETE", "/api/v2/authn/basic/logout", "app", {}, {}, 403),
    ("DELETE", "/api/v2/tokens/{token}", "carol", {}, {}, 403),
    ("POST", "/api/v2/users", "carol", {}, {"json": {"username": "eve", "password": "eve-pw-1"}}, 403),
    ("POST", "/api/v2/users", "app", {}, {"json": {"username": "eve", "password": "eve-pw-1"}}, 403),
    ("POST", "/api/v2/users", "admin", {}, {"json": {"username": "carol", "password": "carol-pw"}}, 409),
    ("PUT", "/api/v2/users", "carol", {}, {"json": {"data": {"username": "carol"}}}, 403),
    ("PUT", "/api/v2/users", "admin", {}, {"json": {"data": {"username": "ghost", "email": "g@x.io"}}}, 404),
    ("PUT", "/api/v2/users/me", "carol", {}, {"json": {"data": {"username": "admin"}}}, 403),
    ("PUT", "/api/v2/users/me", "app", {}, {"json": {"data": {"username": "admin"}}}, 403),
    ("GET", "/api/v2/users/{user}", "admin", GHOST, {}, 400),
    ("DELETE", "/api/v2/users/{user}", "carol", {"user": "admin"}, {}, 403),
    ("DELETE", "/api/v2/users/{user}", "admin", GHOST, {}, 404),
    ("PUT", GROUP, "carol", {"user": "carol"}, {"json": {"groupname": "default"}}, 403),
    ("PUT", GROUP, "admin", GHOST, {"json": {"groupname": "default"}}, 404),
    ("DELETE", GROUP, "app", {"user": "carol"}, {"json": {"groupname": "default"}}, 403),
    ("DELETE", GROUP, "admin", GHOST, {"json": {"groupname": "default"}}, 404),
    ("PUT", GROUPLIST, "carol", {"user": "carol"}, {"json": {"grouplist": []}}, 403),
    ("PUT", GROUPLIST, "admin", GHOST, {"json": {"grouplist": ["default"]}}, 404),
    ("POST", "/api/v2/groups", "carol", {}, {"json": {"groupname": "mine"}}, 403),
    ("PUT", "/api/v2/groups", "carol", {}, {"json": {"data": {"groupname": "default"}}}, 403),
    ("PUT", "/api/v2/groups", "admin", {}, {"json": {"data": {"groupname": "ghost"}, "patch": True}}, 404),
    ("GET", "/api/v2/groups/{group}", "admin", GHOST, {}, 404),
    ("DELETE", "/api/v2/groups/{group}", "carol", {"group": "default"}, {}, 403),
    ("GET", "/api/v2/groups/{group}/userlist", "carol", {"group": "default"}, {}, 403),
    ("GET", "/api/v2/virtual-clusters/{vc}", "admin", GHOST, {}, 404),
    ("GET", "/api/v2/storages/{storage}", "carol", {}, {}, 403),
    ("GET", "/api/v2/storages/{storage}", "admin", GHOST, {}, 404),
    ("POST", "/api/v2/jobs", "admin", {}, {"yaml": "ghost"}, 400),
    ("POST", "/api/v2/jobs", "carol", {}, {"yaml": "a"}, 403),
    ("POST", "/api/v2/jobs", "admin", {}, {"yaml": "a"}, 409),
    ("GET", JOB, "admin", GHOST, {}, 404),
    ("GET", JOB + "/attempts/{jobAttemptId}", "admin", {"jobAttemptId": "9"}, {}, 404),
    ("GET", JOB + "/config", "admin", GHOST, {}, 404),
    ("PUT", JOB + "/executionType", "admin", {}, {"json": {"value": "PAUSE"}}, 400),
    ("PUT", JOB + "/executionType", "admin", GHOST, {"json": {"value": "STOP"}}, 404),
    ("PUT", JOB + "/tag", "admin", {}, {"json": {"value": ""}}, 400),
    ("PUT", JOB + "/tag", "admin", GHOST, {"json": {"value": "t"}}, 404),
    ("DELETE", JOB + "/tag", "admin", {}, {"json": {"value": 7}}, 400),
    ("DELETE", JOB + "/tag", "admin", {}, {"json": {"value": "never-added"}}, 404),
    ("GET", JOB + "/events", "admin", GHOST, {}, 404),
    ("GET", JOB + "/job-attempts", "admin", GHOST, {}, 404),
    ("GET", JOB + "/job-attempts/{attemptIndex}", "admin", {"attemptIndex": "9"}, {}, 404),
    ("GET", TASK, "admin", {"taskIndex": "9"}, {}, 404),
    ("GET", TASK + "/{taskAttemptId}/logs", "admin", {"taskIndex": "9"}, {}, 404),
    ("GET", "/api/v2/kubernetes/nodes", "carol", {}, {}, 403),
    ("GET", "/api/v2/kubernetes/pods", "carol", {}, {}, 403),
]


def test_the_error_walk_provokes_every_documented_error() -> None:
    """Each 400, 403, 404 and 409 the swagger documents is provoked (401s by the anonymous walk)."""
    skip_without(*SWAGGER_PARTS)
    documented = {
        (method, path, int(status))
        for method, path, operation in Swagger().operations()
        for status in operation["responses"]
        if status in ("400", "403", "404", "409")
    }
    provoked = {(method, path, status) for method, path, _, _, _, status in ERRORS}
    # Where the rest-server answers another status, that one is provoked instead.
    provoked |= {(m, p, 404) for m, p, _ in REST_SERVER_STATUS}
    unreachable = {
        ("POST", LOGIN, 404),  # login's NoUserError is a 400 (documented too)
        ("PUT", "/api/v2/users/me", 404),  # a deleted user's tokens are revoked with it: 401 first
    }
    assert documented - provoked - unreachable == set()


async def provoke_every_documented_error(
    api: Client, swagger: Swagger, admin: dict[str, str], walked: dict[str, str]
) -> None:
    made = await api.post("/api/v2/users", json={"username": "carol", "password": "carol-pw"}, headers=admin)
    assert made.status == 201
    carol = await login(api, "carol", "carol-pw")
    minted = await api.post("/api/v2/tokens/application", headers=admin)
    app = {"Authorization": f"Bearer {(await minted.json())['token']}"}
    callers = {"admin": admin, "carol": carol, "app": app, "anyone": {}}
    for method, path, caller, overrides, options, expected in ERRORS:
        values = {**walked, "user": "admin", **overrides}
        kwargs: dict[str, Any] = {"headers": dict(callers[caller])}
        for key in ("json", "data"):
            if key in options:
                kwargs[key] = options[key]
        if "yaml" in options:
            vc = "type: job\ndefaults:\n  virtualCluster: " + options["yaml"] + "\n"
            kwargs["data"] = job_yaml("walk", instances=1).replace("type: job\n", vc)
            kwargs["headers"]["Content-Type"] = "text/yaml"
        url = concrete(path, values).replace("/api/", "/rest-server/api/", 1)
        response = await api.request(method, url, **kwargs)
        _, body = await body_of(response)
        case = (method, path, caller, response.status, body)
        assert response.status == expected, case
        swagger.validate_error(body)
        if (method, path, response.status) in REST_SERVER_STATUS:
            continue
        assert swagger.documents(method, path, response.status), case
        examples = swagger.error_examples(method, path, response.status) or [
            example for status in (400, 403, 404, 409) for example in swagger.component_errors(status)
        ]
        assert body["code"] in {example["code"] for example in examples}, case
        if body["code"] in FREE_TEXT:
            continue
        templates = [e["message"] for e in examples if e["code"] == body["code"]]
        templates += [text for code, text in REST_SERVER_TEXTS if code == body["code"]]
        assert any(matches_template(template, body["message"]) for template in templates), case
