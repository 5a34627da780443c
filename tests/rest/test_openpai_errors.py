"""Errors answer with OpenPAI's status, code and message text; this platform's advice rides in ``hint``."""

from __future__ import annotations

import ast
from pathlib import Path
from typing import Any

from aiohttp.test_utils import TestClient

from services.rest.core import errors
from tests.rest.jobs import job_yaml
from tests.rest.test_list_and_auth import add_user, submit

Client = TestClient[Any, Any]
REST = Path(__file__).resolve().parents[2] / "services" / "rest"


async def answer(response: Any) -> tuple[int, str, str]:
    body = await response.json()
    assert set(body) >= {"code", "message"}, body
    return response.status, body["code"], body["message"]


async def test_the_errors_openpai_clients_branch_on(api: Client, admin_headers: dict[str, str]) -> None:
    # Login answers an unknown user as a wrong password (OpenPAI's NoUserError told names apart).
    login = await api.post("/api/v2/authn/basic/login", data={"username": "nonexistentuser", "password": "x"})
    assert await answer(login) == (400, "IncorrectPasswordError", "User name or password is incorrect.")
    wrong = await api.post("/api/v2/authn/basic/login", data={"username": "admin", "password": "wrong-one"})
    assert await answer(wrong) == (400, "IncorrectPasswordError", "User name or password is incorrect.")

    bad = {"Authorization": "Bearer not-a-token"}
    logout = await api.delete("/rest-server/api/v2/authn/basic/logout", headers=bad)
    assert await answer(logout) == (401, "UnauthorizedUserError", "Your token is invalid.")
    guest = await api.get("/api/v2/users")
    assert await answer(guest) == (401, "UnauthorizedUserError", "Guest is not allowed to do this operation.")

    application = await api.post("/api/v2/tokens/application", headers=admin_headers)
    app_headers = {"Authorization": f"Bearer {(await application.json())['token']}"}
    created = await api.post(
        "/api/v2/users", json={"username": "u1", "password": "secret1"}, headers=app_headers
    )
    assert await answer(created) == (
        403,
        "ForbiddenUserError",
        "Applications are not allowed to do this operation.",
    )

    bob = await add_user(api, "bob", "bob-password")
    refused = await api.post("/api/v2/users", json={"username": "u2", "password": "secret2"}, headers=bob)
    assert await answer(refused) == (
        403,
        "ForbiddenUserError",
        "Non-admin is not allow to do this operation.",
    )
    body = await (await api.get("/api/v2/users", headers=bob)).json()
    assert body["message"] == "Non-admin is not allow to do this operation."


async def test_hints_stay_out_of_the_message(api: Client, admin_headers: dict[str, str]) -> None:
    await submit(api, admin_headers, job_yaml("twice"))
    again = await api.post(
        "/api/v2/jobs", data=job_yaml("twice"), headers={**admin_headers, "Content-Type": "text/yaml"}
    )
    body = await again.json()
    assert (again.status, body["code"], body["message"]) == (
        409,
        "ConflictJobError",
        "Job admin~twice already exists.",
    )
    assert body["hint"] == "Choose another name in the job config."
    missing = await api.get("/api/v2/jobs/admin~nothing", headers=admin_headers)
    assert await answer(missing) == (404, "NoJobError", "Job admin~nothing is not found.")
    attempt = await api.get("/api/v2/jobs/admin~twice/attempts/7", headers=admin_headers)
    assert await answer(attempt) == (404, "NoJobError", "JobAttemptId 7 is not found in admin~twice.")
    no_api = await api.get("/api/v2/nothing?x=1", headers=admin_headers)
    assert await answer(no_api) == (404, "NoApiError", "API /api/v2/nothing?x=1 is not found.")
    user = await api.delete("/api/v2/users/ghost", headers=admin_headers)
    assert await answer(user) == (404, "NoUserError", "User ghost not found.")
    admin = await api.delete("/api/v2/users/admin", headers=admin_headers)
    assert await answer(admin) == (403, "RemoveAdminError", "Admin admin is not allowed to remove.")
    assert "admin right" in (await admin.json())["hint"]


def test_every_error_comes_from_the_table() -> None:
    """No route builds an ApiError of its own: codes and texts live in services/rest/core/errors.py."""
    offenders = []
    for path in REST.rglob("*.py"):
        if path.name == "errors.py":
            continue
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Call) and getattr(node.func, "id", None) in ("ApiError", "OpenPaiError"):
                offenders.append(f"{path.relative_to(REST)}:{node.lineno}")
    assert offenders == []
    codes = {entry.code for entry in errors.TABLE}
    assert {"NoUserError", "UnauthorizedUserError", "ForbiddenUserError", "NoApiError", "NoJobError"} <= codes
    assert all(entry.code.endswith("Error") and 400 <= entry.status < 600 for entry in errors.TABLE)
