"""Users and groups through the API: groups' acls decide admin rights and virtual-cluster access."""

from __future__ import annotations

from typing import Any

from aiohttp.test_utils import TestClient
from alembic import command
from alembic.config import Config
from sqlalchemy import insert, text
from sqlalchemy.engine import Connection

from services.rest.adapters.database import MIGRATIONS, create_engine, migrate
from services.rest.adapters.tables import users
from tests.rest.jobs import job_yaml
from tests.rest.test_list_and_auth import login

Client = TestClient[Any, Any]
YAML = {"Content-Type": "text/yaml"}


async def create_user(api: Client, admin: dict[str, str], name: str, **extra: Any) -> dict[str, str]:
    response = await api.post(
        "/api/v2/users", json={"username": name, "password": f"{name}-password", **extra}, headers=admin
    )
    assert response.status == 201, await response.text()
    return await login(api, name, f"{name}-password")


async def me(api: Client, headers: dict[str, str]) -> dict[str, Any]:
    response = await api.get("/api/v2/users/me", headers=headers)
    assert response.status == 200, await response.text()
    body: dict[str, Any] = await response.json()
    return body


async def answer(response: Any) -> tuple[int, str]:
    return response.status, (await response.json()).get("code", "")


async def test_first_start_makes_a_default_and_an_admin_group(
    api: Client, admin_headers: dict[str, str]
) -> None:
    groups = await (await api.get("/api/v2/groups", headers=admin_headers)).json()
    by_name = {g["groupname"]: g for g in groups}
    assert by_name["default"]["extension"]["acls"]["virtualClusters"] == ["default"]
    assert by_name["admingroup"]["extension"]["acls"]["admin"] is True
    admin = await me(api, admin_headers)
    assert admin["admin"] is True
    assert sorted(admin["grouplist"]) == ["admingroup", "default"]
    assert "password" not in str(admin).lower()


async def test_admin_creates_users_and_bad_input_names_the_field(
    api: Client, admin_headers: dict[str, str]
) -> None:
    bob = await create_user(api, admin_headers, "bob", email="bob@example.com")
    assert (await me(api, bob))["virtualCluster"] == ["default"]
    assert (await me(api, bob))["email"] == "bob@example.com"
    again = await api.post(
        "/api/v2/users", json={"username": "bob", "password": "xxxxxxx"}, headers=admin_headers
    )
    assert await answer(again) == (409, "ConflictUserError")
    for body, word in (
        ({"username": "b b", "password": "long-enough"}, "username"),
        ({"username": "bob\n", "password": "long-enough"}, "username"),  # `$` alone would allow it
        ({"username": "carol", "password": "short"}, "password"),
        ({"username": "carol", "password": "long-enough", "virtualCluster": "vc1"}, "virtualCluster"),
    ):
        response = await api.post("/api/v2/users", json=body, headers=admin_headers)
        assert await answer(response) == (400, "InvalidParametersError")
        assert word in (await response.json())["message"]
    refused = await api.post("/api/v2/users", json={"username": "eve", "password": "xxxxxxx"}, headers=bob)
    assert await answer(refused) == (403, "ForbiddenUserError")
    assert await answer(await api.get("/api/v2/users", headers=bob)) == (403, "ForbiddenUserError")
    listed = await (await api.get("/api/v2/users", headers=admin_headers)).json()
    assert [u["username"] for u in listed] == ["admin", "bob"]
    assert (await (await api.get("/api/v2/users/admin", headers=bob)).json())["admin"] is True
    # OpenPAI's rest-server reads an unknown user with 400 (a change of one is 404).
    assert await answer(await api.get("/api/v2/users/ghost", headers=bob)) == (400, "NoUserError")


async def test_virtual_cluster_access_on_submit_follows_the_users_groups(
    api: Client, admin_headers: dict[str, str]
) -> None:
    bob = await create_user(api, admin_headers, "bob")
    in_vc2 = job_yaml("in-vc2").replace("type: job\n", "type: job\ndefaults:\n  virtualCluster: vc2\n")
    refused = await api.post("/api/v2/jobs", data=in_vc2, headers={**bob, **YAML})
    assert await answer(refused) == (403, "ForbiddenUserError")
    assert "vc2" in (await refused.json())["message"]

    update = {"data": {"username": "bob", "virtualCluster": ["vc2"]}, "patch": True}
    assert (await api.put("/api/v2/users", json=update, headers=admin_headers)).status == 201
    info = await me(api, bob)
    assert info["virtualCluster"] == ["vc2"]
    assert "vc2" in info["grouplist"]
    assert (await api.post("/api/v2/jobs", data=in_vc2, headers={**bob, **YAML})).status == 202
    in_default = await api.post("/api/v2/jobs", data=job_yaml("in-default"), headers={**bob, **YAML})
    assert await answer(in_default) == (403, "ForbiddenUserError")

    promote = {"data": {"username": "bob", "admin": True}, "patch": True}
    assert (await api.put("/api/v2/users", json=promote, headers=admin_headers)).status == 201
    assert (await me(api, bob))["admin"] is True
    assert (await api.get("/api/v2/users", headers=bob)).status == 200
    assert (await api.post("/api/v2/jobs", data=job_yaml("anywhere"), headers={**bob, **YAML})).status == 202
    demote = {"data": {"username": "bob", "admin": False}, "patch": True}
    assert (await api.put("/api/v2/users", json=demote, headers=admin_headers)).status == 201
    assert (await me(api, bob))["admin"] is False
    ghost = {"data": {"username": "ghost", "admin": False}, "patch": True}
    assert await answer(await api.put("/api/v2/users", json=ghost, headers=admin_headers)) == (
        404,
        "NoUserError",
    )
    # Without patch the fields given still change alone (OpenPAI's rest-server; see PATCH_FOLLOWS).
    partial = {"data": {"username": "bob", "admin": False}}
    assert (await api.put("/api/v2/users", json=partial, headers=admin_headers)).status == 201
    assert (await me(api, bob))["virtualCluster"] == ["vc2"]


async def test_passwords_change_by_admin_and_by_the_user_with_the_old_one(
    api: Client, admin_headers: dict[str, str]
) -> None:
    bob = await create_user(api, admin_headers, "bob")
    reset = {"data": {"username": "bob", "password": "reset-by-admin"}, "patch": True}
    assert (await api.put("/api/v2/users", json=reset, headers=admin_headers)).status == 201
    old = await api.post("/api/v2/authn/basic/login", data={"username": "bob", "password": "bob-password"})
    assert await answer(old) == (400, "IncorrectPasswordError")
    bob = await login(api, "bob", "reset-by-admin")

    wrong = {"data": {"username": "bob", "newPassword": "mine-now", "oldPassword": "nope"}, "patch": True}
    assert await answer(await api.put("/api/v2/users/me", json=wrong, headers=bob)) == (
        400,
        "IncorrectPasswordError",
    )
    other = {"data": {"username": "admin", "email": "x@example.com"}, "patch": True}
    assert await answer(await api.put("/api/v2/users/me", json=other, headers=bob)) == (
        403,
        "ForbiddenUserError",
    )
    right = {
        "data": {
            "username": "bob",
            "newPassword": "mine-now",
            "oldPassword": "reset-by-admin",
            "email": "b@x.io",
        },
        "patch": True,
    }
    assert (await api.put("/api/v2/users/me", json=right, headers=bob)).status == 201
    assert (await me(api, await login(api, "bob", "mine-now")))["email"] == "b@x.io"
    stored = await (await api.get("/api/v2/users/bob", headers=admin_headers)).text()
    assert "mine-now" not in stored
    assert "argon2" not in stored


async def test_deleting_a_user_revokes_their_tokens_and_admins_are_kept(
    api: Client, admin_headers: dict[str, str]
) -> None:
    bob = await create_user(api, admin_headers, "bob")
    assert await answer(await api.delete("/api/v2/users/admin", headers=admin_headers)) == (
        403,
        "RemoveAdminError",
    )
    assert await answer(await api.delete("/api/v2/users/bob", headers=bob)) == (403, "ForbiddenUserError")
    assert (await api.delete("/api/v2/users/bob", headers=admin_headers)).status == 200
    assert await answer(await api.get("/api/v2/jobs", headers=bob)) == (401, "UnauthorizedUserError")
    assert await answer(await api.delete("/api/v2/users/bob", headers=admin_headers)) == (404, "NoUserError")


async def test_group_acls_grant_and_withdraw_rights(api: Client, admin_headers: dict[str, str]) -> None:
    bob = await create_user(api, admin_headers, "bob")
    team = {"groupname": "team", "description": "a team", "extension": {"acls": {"virtualClusters": ["vcx"]}}}
    assert (await api.post("/api/v2/groups", json=team, headers=admin_headers)).status == 201
    assert await answer(await api.post("/api/v2/groups", json=team, headers=admin_headers)) == (
        409,
        "ConflictGroupError",
    )
    assert await answer(await api.post("/api/v2/groups", json={"groupname": "x"}, headers=bob)) == (
        403,
        "ForbiddenUserError",
    )
    bad = {"groupname": "bad", "extension": {"acls": {"admin": "yes"}}}
    assert await answer(await api.post("/api/v2/groups", json=bad, headers=admin_headers)) == (
        400,
        "InvalidParametersError",
    )

    assert (
        await api.put("/api/v2/users/bob/group/", json={"groupname": "team"}, headers=admin_headers)
    ).status == 201
    assert (await me(api, bob))["virtualCluster"] == ["default", "vcx"]
    members = await (await api.get("/api/v2/groups/team/userlist", headers=admin_headers)).json()
    assert members == [{"username": "bob", "clusterAdmin": False}]

    raise_team = {"data": {"groupname": "team", "extension": {"acls": {"admin": True}}}, "patch": True}
    assert (await api.put("/api/v2/groups", json=raise_team, headers=admin_headers)).status == 201
    assert (await me(api, bob))["admin"] is True
    assert (await (await api.get("/api/v2/groups/team", headers=bob)).json())["extension"]["acls"][
        "admin"
    ] is True

    assert (await api.delete("/api/v2/groups/team", headers=admin_headers)).status == 201
    info = await me(api, bob)
    assert (info["admin"], info["grouplist"]) == (False, ["default"])
    assert await answer(await api.get("/api/v2/groups/team", headers=bob)) == (404, "NoGroupError")
    assert await answer(await api.delete("/api/v2/groups/default", headers=admin_headers)) == (
        403,
        "ForbiddenUserError",
    )
    missing = await api.put("/api/v2/users/bob/group", json={"groupname": "team"}, headers=admin_headers)
    assert await answer(missing) == (404, "NoGroupError")

    listed = {"grouplist": ["default", "admingroup"]}
    assert (await api.put("/api/v2/users/bob/grouplist/", json=listed, headers=admin_headers)).status == 201
    assert (await me(api, bob))["admin"] is True
    removed = await api.delete(
        "/api/v2/users/bob/group", json={"groupname": "admingroup"}, headers=admin_headers
    )
    assert removed.status == 201
    assert (await me(api, bob))["admin"] is False


def _upgrade_to(connection: Connection, revision: str) -> None:
    config = Config()
    config.set_main_option("script_location", str(MIGRATIONS))
    config.attributes["connection"] = connection
    command.upgrade(config, revision)


async def test_the_groups_migration_keeps_every_users_rights(database_url: str) -> None:
    engine = create_engine(database_url)
    try:
        async with engine.begin() as conn:
            await conn.run_sync(_upgrade_to, "0001")
            for name, admin in (("root", True), ("ann", False)):
                await conn.execute(
                    insert(users).values(
                        username=name, admin=admin, virtual_clusters=[], extension={}, created_time=0
                    )
                )
        await migrate(engine)
        async with engine.connect() as conn:
            rows = (await conn.execute(text("SELECT username, groupname FROM user_groups"))).all()
        assert sorted(map(tuple, rows)) == [("ann", "default"), ("root", "admingroup"), ("root", "default")]
    finally:
        await engine.dispose()


async def test_patch_false_changes_the_fields_given_and_keeps_the_rest(
    api: Client, admin_headers: dict[str, str]
) -> None:
    """OpenPAI's rest-server never reads `patch`: absent fields are kept, extension keys merge."""
    bob = await create_user(api, admin_headers, "bob", email="bob@example.com", extension={"team": "a"})
    mine = {"data": {"username": "bob", "extension": {"editor": "vim"}}, "patch": False}
    response = await api.put("/rest-server/api/v2/users/me", json=mine, headers=bob)
    assert (response.status, await response.json()) == (201, {"message": "Update user bob successfully."})
    profile = await me(api, bob)
    assert profile["email"] == "bob@example.com"
    assert profile["extension"] == {"team": "a", "editor": "vim"}
    email_only = {"data": {"username": "bob", "email": "new@example.com"}, "patch": False}
    assert (await api.put("/api/v2/users/me", json=email_only, headers=bob)).status == 201
    assert (await me(api, bob))["extension"] == {"team": "a", "editor": "vim"}
    assert (await me(api, bob))["email"] == "new@example.com"

    by_admin = {"data": {"username": "bob", "extension": {"team": "b"}}, "patch": False}
    assert (await api.put("/api/v2/users/", json=by_admin, headers=admin_headers)).status == 201
    profile = await me(api, bob)
    assert profile["extension"] == {"team": "b", "editor": "vim"}
    kept = (profile["email"], profile["admin"], profile["virtualCluster"])
    assert kept == ("new@example.com", False, ["default"])


async def test_an_error_about_one_field_names_it_for_the_form_that_shows_it(
    api: Client, admin_headers: dict[str, str]
) -> None:
    bob = await create_user(api, admin_headers, "bob")
    users, me = "/api/v2/users", "/api/v2/users/me"
    for method, path, body, headers, field in (
        ("POST", users, {"username": "eve", "password": "short"}, admin_headers, "password"),
        ("POST", users, {"username": "e v e", "password": "long-enough"}, admin_headers, "username"),
        ("POST", users, {"username": "bob", "password": "long-enough"}, admin_headers, "username"),
        ("POST", users, {"password": "long-enough"}, admin_headers, "username"),
        ("PUT", me, {"data": {"oldPassword": "bob-password", "newPassword": "abc"}}, bob, "newPassword"),
        ("PUT", me, {"data": {"oldPassword": "wrong-one", "newPassword": "abcdefg"}}, bob, "oldPassword"),
    ):
        response = await api.request(method, path, json=body, headers=headers)
        refused = await response.json()
        assert response.status in (400, 409), refused
        assert refused["field"] == field, (body, refused)
