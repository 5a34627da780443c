"""Group routes of OpenPAI's REST API v2: create, list, read, update, delete, members.

A group's ``extension.acls`` (``admin``, ``virtualClusters``, ``storageConfigs``) is what grants
rights, so the acls are checked for shape on every write. The default group and the admin
group exist from the first start and cannot be deleted: every user's baseline access and the
cluster's administration hang on them.
"""

from __future__ import annotations

import re
from typing import Any

from aiohttp import web

from services.rest.adapters import accounts
from services.rest.adapters.auth import require_admin, require_user
from services.rest.core.errors import BUILT_IN_GROUP, CONFLICT_GROUP, NO_GROUP, ApiError, invalid_parameters
from services.rest.keys import ENGINE
from services.rest.routes.users import field, json_body

routes = web.RouteTableDef()

GROUPNAME = re.compile(r"^[\w.-]+$")
PROTECTED = (accounts.DEFAULT_GROUP, accounts.ADMIN_GROUP)


def group_info(group: dict[str, Any]) -> dict[str, Any]:
    return {
        "groupname": group["groupname"],
        "description": group["description"] or "",
        "externalName": group["external_name"] or "",
        "extension": dict(group["extension"] or {}),
    }


def no_group(groupname: str) -> ApiError:
    return NO_GROUP(group=groupname)


def checked_extension(extension: dict[str, Any]) -> dict[str, Any]:
    """The extension with its acls validated: admin a boolean, the others lists of names."""
    acls = extension.get("acls")
    if acls is None:
        return extension
    if not isinstance(acls, dict):
        raise invalid_parameters(
            "extension.acls must be an object with admin, virtualClusters, storageConfigs."
        )
    if "admin" in acls and not isinstance(acls["admin"], bool):
        raise invalid_parameters("extension.acls.admin must be true or false.")
    for name in ("virtualClusters", "storageConfigs"):
        value = acls.get(name, [])
        if not isinstance(value, list) or not all(isinstance(item, str) for item in value):
            raise invalid_parameters(f"extension.acls.{name} must be a list of names.")
    return extension


@routes.get("/v2/groups")
async def list_groups(request: web.Request) -> web.Response:
    """Every group."""
    require_user(request)
    return web.json_response([group_info(g) for g in await accounts.list_groups(request.app[ENGINE])])


@routes.post("/v2/groups")
async def create_group(request: web.Request) -> web.Response:
    """Create a group (admin only)."""
    require_admin(request)
    body = await json_body(request)
    groupname = field(body, "groupname", str, required=True)
    if not GROUPNAME.fullmatch(groupname):
        raise invalid_parameters(
            f"groupname {groupname!r} may contain only letters, digits, '_', '.' and '-'."
        )
    try:
        await accounts.create_group(
            request.app[ENGINE],
            groupname,
            field(body, "description", str) or "",
            field(body, "externalName", str) or "",
            checked_extension(field(body, "extension", dict) or {}),
        )
    except accounts.DuplicateError:
        raise CONFLICT_GROUP(group=groupname) from None
    return web.json_response({"message": "group is created successfully"}, status=201)


@routes.put("/v2/groups")
async def update_group(request: web.Request) -> web.Response:
    """Change a group's description, external name or extension (acls) (admin only)."""
    require_admin(request)
    body = await json_body(request)
    data = field(body, "data", dict, required=True)
    patch = bool(field(body, "patch", bool))
    groupname = field(data, "groupname", str, required=True)
    group = await accounts.get_group(request.app[ENGINE], groupname)
    if group is None:
        raise no_group(groupname)
    values: dict[str, Any] = {}
    for key, column, kind in (
        ("description", "description", str),
        ("externalName", "external_name", str),
        ("extension", "extension", dict),
    ):
        value = field(data, key, kind)
        if value is None and not patch:
            raise invalid_parameters(f"{key} is required unless patch is true.")
        if value is not None:
            values[column] = checked_extension(value) if key == "extension" else value
    await accounts.update_group(request.app[ENGINE], groupname, **values)
    return web.json_response({"message": f"update group {groupname} successfully."}, status=201)


@routes.get("/v2/groups/{group}")
async def get_group(request: web.Request) -> web.Response:
    """A group."""
    require_user(request)
    group = await accounts.get_group(request.app[ENGINE], request.match_info["group"])
    if group is None:
        raise no_group(request.match_info["group"])
    return web.json_response(group_info(group))


@routes.delete("/v2/groups/{group}")
async def delete_group(request: web.Request) -> web.Response:
    """Delete a group; its members leave it (admin only; not the default or admin group)."""
    require_admin(request)
    groupname = request.match_info["group"]
    if groupname in PROTECTED:
        raise BUILT_IN_GROUP("Every user's default rights hang on it.", group=groupname)
    if await accounts.get_group(request.app[ENGINE], groupname) is None:
        raise no_group(groupname)
    await accounts.delete_group(request.app[ENGINE], groupname)
    return web.json_response({"message": "group is removed successfully"}, status=201)


@routes.get("/v2/groups/{group}/userlist")
async def group_members(request: web.Request) -> web.Response:
    """The members of a group (admin only); a group nobody belongs to has none.

    As OpenPAI's rest-server (controllers/v2/group.js getGroupUserList): admins only, and the
    users whose grouplist names the group, without checking that the group exists.
    """
    require_admin(request)
    groupname = request.match_info["group"]
    members = await accounts.group_members(request.app[ENGINE], groupname)
    return web.json_response([{"username": m["username"], "clusterAdmin": bool(m["admin"])} for m in members])
