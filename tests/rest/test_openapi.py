"""Our OpenAPI document covers every route, and a property-based fuzz from it finds no 5xx or leak.

The fuzz draws an operation of the served document, path parameters, a query, a JSON body and a
caller (anonymous, a bad token, the admin), sends it to a real server and checks two things
that must hold for any input: the server never answers with an internal error, and no secret
(a password, a password hash, a job's secret, the token signing key) appears in any answer.
"""

from __future__ import annotations

import json
from typing import Any
from urllib.parse import quote

import httpx
from aiohttp.test_utils import TestClient
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.rest.conftest import ADMIN_PASSWORD
from tests.rest.jobs import job_yaml
from tests.rest.serving import ServerThread
from tests.rest.test_authz_matrix import served_routes

JOB_SECRET = "fuzz-job-secret-4242"
JSON = st.recursive(
    st.none() | st.booleans() | st.integers() | st.text(max_size=12),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=8), inner, max_size=3),
    max_leaves=8,
)
SEGMENT = st.text(st.characters(blacklist_characters="/?#%", codec="utf-8"), min_size=1, max_size=12)


async def test_the_document_lists_every_served_route_once(api: TestClient[Any, Any]) -> None:
    response = await api.get("/api/v2/openapi.json")
    assert response.status == 200
    doc = await response.json()
    listed = {(method.upper(), path) for path, item in doc["paths"].items() for method in item}
    assert listed == served_routes(api)
    ids = [op["operationId"] for item in doc["paths"].values() for op in item.values()]
    assert len(ids) == len(set(ids))
    tag = doc["paths"]["/api/v2/jobs/{user}~{job}/tag"]["put"]
    assert tag["summary"] == "Add a tag to a job (its owner or an admin)."
    assert [p["name"] for p in tag["parameters"]] == ["user", "job"]
    prefixed = await (await api.get("/rest-server/api/v2/openapi.json")).json()
    assert prefixed == doc


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(data=st.data())
def test_fuzzing_the_api_from_its_document_finds_no_server_error_and_no_secret(
    server: ServerThread, data: st.DataObject
) -> None:
    with httpx.Client(base_url=server.url, timeout=30) as client:
        admin = _admin(server, client)
        operations = [
            (method.upper(), path)
            for path, item in client.get("/api/v2/openapi.json").json()["paths"].items()
            for method in item
            if path != "/api/v2/authn/basic/logout"  # it would end the admin's session mid-run
        ]
        method, template = data.draw(st.sampled_from(sorted(operations)), label="operation")
        path = template
        for name in [p.split("}")[0] for p in template.split("{")[1:]]:
            path = path.replace("{" + name + "}", quote(data.draw(SEGMENT, label=name), safe=""), 1)
        headers = data.draw(
            st.sampled_from([{}, {"Authorization": "Bearer not-a-token"}, admin]), label="caller"
        )
        query = data.draw(
            st.dictionaries(st.sampled_from(["limit", "offset", "state", "vc", "order"]), SEGMENT)
        )
        body = data.draw(JSON, label="body")
        response = client.request(method, path, params=query, headers=headers, content=json.dumps(body))
        assert response.status_code < 500 or response.status_code == 503, (method, path, response.text)
        for secret in _secrets(server):
            assert secret not in response.text, (method, path)


_ADMIN: dict[str, dict[str, str]] = {}


def _admin(server: ServerThread, client: httpx.Client) -> dict[str, str]:
    """The admin's headers, logged in once per server, with one job holding a secret."""
    if server.url not in _ADMIN:
        token = client.post(
            "/api/v2/authn/basic/login", data={"username": "admin", "password": ADMIN_PASSWORD}
        ).json()["token"]
        headers = {"Authorization": f"Bearer {token}"}
        submitted = client.post(
            "/api/v2/jobs",
            content=job_yaml("fuzzed", secret=JOB_SECRET),
            headers={**headers, "Content-Type": "text/yaml"},
        )
        assert submitted.status_code == 202, submitted.text
        _ADMIN[server.url] = headers
    return _ADMIN[server.url]


def _secrets(server: ServerThread) -> list[str]:
    signing_key = server.settings.resolved_jwt_secret_file().read_text().strip()
    return [ADMIN_PASSWORD, JOB_SECRET, "$argon2", signing_key]
