"""Storages a user may mount (GET /api/v2/storages, GET /api/v2/storages/{storage}).

The definitions come from the admin's storages file (``core/storages.py`` says its format;
``PAI_STORAGES_FILE``, else ``<data dir>/storages.yaml``),
read at each request so an edit applies without a restart; the caller's rights come from
their groups at each request, as every right does. A storage the caller's groups do not grant
is a 403 (it exists), a name nobody defined a 404 NoStorageError, as OpenPAI answers.
"""

from __future__ import annotations

import asyncio
from pathlib import Path

import yaml
from aiohttp import web

from services.rest.adapters import accounts
from services.rest.auth import require_user
from services.rest.core.storages import Storage, StorageConfigError, granted, parse_storages
from services.rest.errors import NO_STORAGE, NOT_STORAGE_USER, invalid_parameters, unavailable
from services.rest.keys import READ_ENGINE, SETTINGS

routes = web.RouteTableDef()


def _read(path: Path) -> list[Storage]:
    try:
        text = path.read_text()
    except FileNotFoundError:
        return []
    return parse_storages(yaml.safe_load(text))


async def usable_storages(request: web.Request) -> list[Storage]:
    """The storages the caller's groups grant (every one for an admin), from the current file."""
    admin, names = await _granted_names(request)
    return granted(await _storages(request), admin, names)


async def _storages(request: web.Request) -> list[Storage]:
    path = request.app[SETTINGS].resolved_storages_file()
    try:
        return await asyncio.to_thread(_read, path)
    except (StorageConfigError, yaml.YAMLError, OSError, UnicodeDecodeError) as exc:
        # The operator's file, not the caller's input: say what to fix without showing the file.
        raise unavailable(
            f"The cluster's storage configuration (PAI_STORAGES_FILE) is invalid: {exc}"
        ) from None


async def _granted_names(request: web.Request) -> tuple[bool, list[str]]:
    principal = require_user(request)
    user = await accounts.get_user(request.app[READ_ENGINE], principal.username)
    if user is None:
        return False, []
    return bool(user["admin"]), list(user["storage_configs"])


@routes.get("/v2/storages")
async def get_storages(request: web.Request) -> web.Response:
    """Storages the caller's groups grant (every one for an admin); ``default=true`` keeps defaults."""
    flag = (request.query.get("default") or "").lower()
    if flag not in ("", "true", "false"):
        raise invalid_parameters(f"default must be true or false, got {request.query['default']!r}.")
    admin, names = await _granted_names(request)
    usable = granted(await _storages(request), admin, names)
    if flag == "true":
        usable = [storage for storage in usable if storage.default]
    return web.json_response({"storages": [storage.summary() for storage in usable]})


@routes.get("/v2/storages/{storage}")
async def get_storage(request: web.Request) -> web.Response:
    """One storage with its type and connection data, if the caller's groups grant it."""
    name = request.match_info["storage"]
    admin, names = await _granted_names(request)
    principal = require_user(request)
    for storage in await _storages(request):
        if storage.name == name:
            if not granted([storage], admin, names):
                raise NOT_STORAGE_USER(
                    "An admin grants storages through a group's acls.storageConfigs.",
                    user=principal.username,
                    storage=name,
                )
            return web.json_response(storage.detail())
    raise NO_STORAGE(storage=name)
