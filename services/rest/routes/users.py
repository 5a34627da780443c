"""User routes of OpenPAI's REST API v2: create, list, read, update, delete, group membership.

Admin rights and virtual-cluster access are not stored on the user but granted by groups
(see ``adapters/accounts.py``): setting ``admin`` or ``virtualCluster`` joins or leaves the
groups that grant them, exactly what a client reading ``grouplist`` afterwards expects.
Writes need a login token (application tokens serve jobs only); reading a user needs any, and
a normal user reading another sees the name and admin flag only (e-mail, groups, VCs, storages
and extension are the user's own and the admins'). A password change (the user's own or an
admin's reset) revokes every token of the user, login and application, but the one making the
change. A name is not given again while jobs of a former user of that name remain: jobs are
named ``user~job`` and their logs follow the name, so a new user would inherit them. An error
about one field of the body names it in ``field`` too (beside OpenPAI's ``code`` and
``message``), so a form can show the error at that field.
"""

from __future__ import annotations

import re
from typing import Any

from aiohttp import web

from services.rest.adapters import accounts, contacts
from services.rest.adapters.auth import Principal, require_admin, require_interactive, require_user
from services.rest.core.errors import (
    CONFLICT_USER,
    INCORRECT_PASSWORD,
    NO_GROUP_TO_JOIN,
    NO_GROUPS_TO_JOIN,
    NO_USER,
    NO_USER_TO_UPDATE,
    OTHER_USERS_DATA,
    REMOVE_ADMIN,
    OpenPaiError,
    invalid_parameters,
)
from services.rest.keys import BUS, ENGINE, PASSWORDS
from services.rest.routes.bodies import read_json

routes = web.RouteTableDef()

USERNAME = re.compile(r"^[\w.-]+$")
MIN_PASSWORD = 6


def user_info(user: dict[str, Any], viewer: Principal | None = None) -> dict[str, Any]:
    """OpenPAI's UserInfo: never the password hash; for another normal user, the name only."""
    if viewer is not None and not viewer.admin and viewer.username != user["username"]:
        return {
            "username": user["username"],
            "grouplist": [],
            "email": "",
            "admin": bool(user["admin"]),
            "virtualCluster": [],
            "storageConfig": [],
            "extension": {},
        }
    return {
        "username": user["username"],
        "grouplist": list(user["grouplist"]),
        "email": user.get("email") or "",
        "admin": bool(user["admin"]),
        "virtualCluster": list(user["virtual_clusters"]),
        "storageConfig": list(user["storage_configs"]),
        "extension": dict(user.get("extension") or {}),
    }


async def json_body(request: web.Request) -> dict[str, Any]:
    """The JSON object a write route reads; 400 naming the problem otherwise."""
    body = await read_json(request, "a JSON object (Content-Type: application/json)")
    if not isinstance(body, dict):
        raise invalid_parameters("The body must be a JSON object, not a list or a scalar.")
    return body


def field(body: dict[str, Any], name: str, kind: type, *, required: bool = False) -> Any:
    value = body.get(name)
    if value is None:
        if required:
            raise invalid_parameters(f"{name} is required.", field=name)
        return None
    if kind is list:
        if not isinstance(value, list) or not all(isinstance(item, str) for item in value):
            raise invalid_parameters(f"{name} must be a list of strings.", field=name)
    elif not isinstance(value, kind) or (kind is int and isinstance(value, bool)):
        raise invalid_parameters(f"{name} must be of type {kind.__name__}.", field=name)
    return value


def checked_password(value: Any, name: str = "password") -> str:
    if not isinstance(value, str) or len(value) < MIN_PASSWORD:
        raise invalid_parameters(
            f"{name} must be a string of at least {MIN_PASSWORD} characters.", field=name
        )
    return value


async def _share(request: web.Request, username: str) -> None:
    """Copy the user's address as it now stands to the alerter (adapters/contacts.py).

    With the bus down the SQL change stands alone; the next start's sync copies the address.
    """
    if not request.app[BUS].bus.is_connected:
        return
    await contacts.share_contact(request.app[ENGINE], request.app[BUS].bus.js, username)


async def _existing(
    request: web.Request, username: str, missing: OpenPaiError = NO_USER_TO_UPDATE
) -> dict[str, Any]:
    """The stored user; OpenPAI answers a read of an unknown user with 400, a change with 404."""
    user = await accounts.get_user(request.app[ENGINE], username)
    if user is None:
        raise missing(user=username)
    return user


@routes.post("/v2/users")
async def create_user(request: web.Request) -> web.Response:
    """Create a user (admin only)."""
    require_admin(request)
    body = await json_body(request)
    username = field(body, "username", str, required=True)
    if not USERNAME.fullmatch(username):
        raise invalid_parameters(
            f"username {username!r} may contain only letters, digits, '_', '.' and '-'.", field="username"
        )
    password = checked_password(body.get("password"))
    if await accounts.get_user(request.app[ENGINE], username) is None and await accounts.has_jobs(
        request.app[ENGINE], username
    ):
        raise CONFLICT_USER(
            "Jobs of a former user of this name remain, and a new user would inherit them and their "
            "logs (jobs are named user~job); choose another name.",
            user=username,
            field="username",
        )
    try:
        await accounts.create_user(
            request.app[ENGINE],
            username,
            await request.app[PASSWORDS].hash(password),
            admin=bool(field(body, "admin", bool)),
            virtual_clusters=field(body, "virtualCluster", list),
            email=field(body, "email", str) or "",
            extension=field(body, "extension", dict) or {},
        )
    except accounts.DuplicateError:
        raise CONFLICT_USER(user=username, field="username") from None
    await _share(request, username)
    return web.json_response({"message": "User is created successfully"}, status=201)


@routes.get("/v2/users")
async def list_users(request: web.Request) -> web.Response:
    """Every user (admin only)."""
    require_admin(request)
    return web.json_response([user_info(user) for user in await accounts.list_users(request.app[ENGINE])])


# PATCH_FOLLOWS: OpenPAI's rest-server, not its swagger's prose. The swagger says that with
# `patch: false` every field (email, password, extension, ...) is required; the rest-server's
# handlers (controllers/v2/user.js basicAdminUserUpdate for PUT /users, basicUserUpdate for
# PUT /users/me) never read `patch`: each field present in `data` is changed, each absent one
# is kept, and `extension` is merged key by key into the stored one. Clients such as OpenPAI's
# JavaScript SDK send `patch: false` without an extension and expect 201, so we do the same.


@routes.put("/v2/users")
async def update_user(request: web.Request) -> web.Response:
    """Change a user's password, email, admin right, virtual clusters or extension (admin only)."""
    admin = require_admin(request)
    body = await json_body(request)
    data = field(body, "data", dict, required=True)
    field(body, "patch", bool)  # read by OpenPAI's clients' contract only: see PATCH_FOLLOWS below
    username = field(data, "username", str, required=True)
    password = data.get("password")
    new_hash = None
    if password is not None:
        new_hash = await request.app[PASSWORDS].hash(checked_password(password))
    changes = {
        "email": field(data, "email", str),
        "virtual_clusters": field(data, "virtualCluster", list),
        "admin": field(data, "admin", bool),
        "extension": field(data, "extension", dict),
        "password_hash": new_hash,
    }
    if not await accounts.update_user(request.app[ENGINE], username, **changes):
        raise NO_USER_TO_UPDATE(user=username)
    if new_hash is not None:
        # A reset: whoever held the user's tokens holds nothing now (the admin's own stays).
        await accounts.revoke_user_tokens(request.app[ENGINE], username, keep=admin.token_id)
    await _share(request, username)
    return web.json_response({"message": f"Update user {username} successfully."}, status=201)


@routes.get("/v2/users/me")
async def who_am_i(request: web.Request) -> web.Response:
    """The caller's own user info."""
    principal = require_user(request)
    return web.json_response(user_info(await _existing(request, principal.username, NO_USER), principal))


@routes.put("/v2/users/me")
async def update_self(request: web.Request) -> web.Response:
    """Change one's own email, password (the old one is needed) or extension."""
    principal = require_interactive(request)
    body = await json_body(request)
    data = field(body, "data", dict, required=True)
    field(body, "patch", bool)  # see PATCH_FOLLOWS: present fields change, whatever patch says
    username = field(data, "username", str) or principal.username
    if username != principal.username:
        raise OTHER_USERS_DATA(
            f"This profile is {principal.username}'s; admins change others with PUT /api/v2/users."
        )
    password_hash = None
    if data.get("newPassword") is not None:
        new = checked_password(data["newPassword"], "newPassword")
        user = await _existing(request, username)
        passwords = request.app[PASSWORDS]
        if not await passwords.verify(user["password_hash"], str(data.get("oldPassword") or "")):
            raise INCORRECT_PASSWORD("oldPassword must be the current password.", field="oldPassword")
        password_hash = await passwords.hash(new)
    await accounts.update_user(
        request.app[ENGINE],
        username,
        email=field(data, "email", str),
        extension=field(data, "extension", dict),
        password_hash=password_hash,
    )
    if password_hash is not None:
        # Every other session and script of the user ends; the token making the change stays.
        await accounts.revoke_user_tokens(request.app[ENGINE], username, keep=principal.token_id)
    await _share(request, username)
    return web.json_response({"message": f"Update user {username} successfully."}, status=201)


@routes.get("/v2/users/{user}")
async def get_user(request: web.Request) -> web.Response:
    """A user's info."""
    viewer = require_user(request)
    user = await _existing(request, request.match_info["user"], NO_USER)
    return web.json_response(user_info(user, viewer))


@routes.delete("/v2/users/{user}")
async def delete_user(request: web.Request) -> web.Response:
    """Remove a user and revoke their tokens (admin only; an admin must lose the right first)."""
    require_admin(request)
    user = await _existing(request, request.match_info["user"])
    if user["admin"]:
        raise REMOVE_ADMIN(
            "Remove the admin right first (PUT /api/v2/users with admin false).", user=user["username"]
        )
    await accounts.delete_user(request.app[ENGINE], user["username"])
    await _share(request, user["username"])
    return web.json_response({"message": "user is removed successfully"})


async def _groupname(request: web.Request) -> str:
    groupname = field(await json_body(request), "groupname", str, required=True)
    if await accounts.missing_groups(request.app[ENGINE], [groupname]):
        raise NO_GROUP_TO_JOIN(group=groupname)
    return str(groupname)


async def add_to_group(request: web.Request) -> web.Response:
    """Add a group to a user's grouplist (admin only)."""
    require_admin(request)
    user = await _existing(request, request.match_info["user"])
    groupname = await _groupname(request)
    await accounts.set_grouplist(request.app[ENGINE], user["username"], [*user["grouplist"], groupname])
    return web.json_response(
        {"message": f"User {user['username']} is added into group {groupname}"}, status=201
    )


async def remove_from_group(request: web.Request) -> web.Response:
    """Remove a group from a user's grouplist (admin only)."""
    require_admin(request)
    user = await _existing(request, request.match_info["user"])
    groupname = await _groupname(request)
    remaining = [name for name in user["grouplist"] if name != groupname]
    await accounts.set_grouplist(request.app[ENGINE], user["username"], remaining)
    return web.json_response(
        {"message": f"User {user['username']} is removed from group {groupname}"}, status=201
    )


async def replace_grouplist(request: web.Request) -> web.Response:
    """Replace a user's grouplist (admin only)."""
    require_admin(request)
    user = await _existing(request, request.match_info["user"])
    grouplist = field(await json_body(request), "grouplist", list, required=True)
    if missing := await accounts.missing_groups(request.app[ENGINE], grouplist):
        raise NO_GROUPS_TO_JOIN(groups=",".join(missing))
    await accounts.set_grouplist(request.app[ENGINE], user["username"], grouplist)
    return web.json_response({"message": "update user grouplist successfully."}, status=201)


# OpenPAI writes these paths with a trailing slash; every route accepts one (trailing_slash.py).
routes.put("/v2/users/{user}/group")(add_to_group)
routes.delete("/v2/users/{user}/group")(remove_from_group)
routes.put("/v2/users/{user}/grouplist")(replace_grouplist)
