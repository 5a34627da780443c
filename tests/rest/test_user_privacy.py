"""What one user learns of another, and what a name given again brings with it."""

from __future__ import annotations

from typing import Any

from aiohttp.test_utils import TestClient

from tests.rest.jobs import job_yaml
from tests.rest.test_users_groups import YAML, answer, create_user

Client = TestClient[Any, Any]


async def test_a_normal_user_reading_another_sees_no_email_or_groups(
    api: Client, admin_headers: dict[str, str]
) -> None:
    alice = await create_user(api, admin_headers, "alice", email="alice@example.com")
    bob = await create_user(api, admin_headers, "bob", email="bob@example.com")
    seen = await (await api.get("/api/v2/users/alice", headers=bob)).json()
    assert seen["username"] == "alice"
    assert (seen["email"], seen["grouplist"], seen["virtualCluster"]) == ("", [], [])
    own = await (await api.get("/api/v2/users/alice", headers=alice)).json()
    by_admin = await (await api.get("/api/v2/users/alice", headers=admin_headers)).json()
    for full in (own, by_admin):
        assert (full["email"], full["grouplist"]) == ("alice@example.com", ["default"])


async def test_a_name_with_a_former_users_jobs_is_not_given_again(
    api: Client, admin_headers: dict[str, str]
) -> None:
    bob = await create_user(api, admin_headers, "bob")
    submitted = await api.post("/api/v2/jobs", data=job_yaml("bobs-job"), headers={**bob, **YAML})
    assert submitted.status == 202, await submitted.text()
    assert (await api.delete("/api/v2/users/bob", headers=admin_headers)).status == 200
    again = await api.post(
        "/api/v2/users", json={"username": "bob", "password": "new-bob-password"}, headers=admin_headers
    )
    assert await answer(again) == (409, "ConflictUserError")
    assert "former user" in (await again.json())["hint"]
    # A name without such jobs is given as before.
    await create_user(api, admin_headers, "carol")
