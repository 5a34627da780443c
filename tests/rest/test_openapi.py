"""Our OpenAPI document covers every route once and says what each route reads.

The fuzz generated from this document lives in test_fuzz_openapi.py.
"""

from __future__ import annotations

from typing import Any

import schemathesis
from aiohttp.test_utils import TestClient

from tests.rest.test_authz_matrix import served_routes


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


async def test_the_document_is_valid_openapi_and_types_what_routes_read(api: TestClient[Any, Any]) -> None:
    doc = await (await api.get("/api/v2/openapi.json")).json()
    schemathesis.openapi.from_dict(doc).validate()
    job = "/api/v2/jobs/{user}~{job}"
    params = {
        p["name"]: p["schema"] for p in doc["paths"][job + "/job-attempts/{attempt}"]["get"]["parameters"]
    }
    assert params == {
        "user": {"type": "string", "pattern": "^[^~/]+$"},
        "job": {"type": "string", "pattern": "^[^/]+$"},
        "attempt": {"type": "integer", "minimum": 0},
    }
    listing = {p["name"]: p for p in doc["paths"]["/api/v2/jobs"]["get"]["parameters"]}
    assert listing["limit"]["in"] == "query"
    assert listing["limit"]["schema"] == {"type": "integer", "minimum": 1, "maximum": 50000}
    login = doc["paths"]["/api/v2/authn/basic/login"]["post"]["requestBody"]["content"]
    assert sorted(login) == ["application/json", "application/x-www-form-urlencoded"]
    assert login["application/json"]["schema"]["required"] == ["username", "password"]
    submit = doc["paths"]["/api/v2/jobs"]["post"]["requestBody"]["content"]["text/yaml"]["schema"]
    assert submit["required"] == ["protocolVersion", "name", "type", "taskRoles"]
    # A route is listed once, without the trailing slash every route also accepts.
    assert "requestBody" in doc["paths"]["/api/v2/users/{user}/group"]["put"]
    assert not [path for path in doc["paths"] if path.endswith("/")]
    assert "requestBody" not in doc["paths"]["/api/v2/users"]["get"]
