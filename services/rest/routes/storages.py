"""Storages a user may mount (GET /api/v2/storages, GET /api/v2/storages/{storage}).

The definitions come from the admin's storages file (``core/storages.py`` says its format;
``PAI_STORAGES_FILE``, else ``<data dir>/storages.yaml``),
read at each request so an edit applies without a restart; the caller's rights come from
their groups at each request, as every right does. A storage the caller's groups do not grant
is a 403 (it exists), a name nobody defined a 404 NoStorageError, as OpenPAI answers.

An admin adds or changes a storage with ``PUT /api/v2/storages/{storage}`` (``pai storage add``):
the entry is checked (core/storages.py ``put_storage``) and the file rewritten whole, atomically,
under a lock, so two writers never lose each other's entry (comments in the file are not kept).
A ``local`` storage's directory becomes its group's when a task first mounts it
(services/orchestrator/core/storage_groups.py).
"""

from __future__ import annotations

import asyncio
import contextlib
import fcntl
import os
from pathlib import Path
from typing import Any

import yaml
from aiohttp import web

from services.rest.adapters import accounts
from services.rest.adapters.auth import require_admin, require_user
from services.rest.core.errors import NO_STORAGE, NOT_STORAGE_USER, invalid_parameters, unavailable
from services.rest.core.storages import Storage, StorageConfigError, granted, parse_storages, put_storage
from services.rest.keys import READ_ENGINE, SETTINGS
from services.rest.routes.users import json_body

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


def _write(path: Path, name: str, body: dict[str, Any]) -> bool:
    """Storage ``name`` set in the file at ``path``; whether it is new (StorageConfigError: the
    entry, or the file as it stands, is invalid)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    lock = os.open(path.with_name(f".{path.name}.lock"), os.O_RDWR | os.O_CREAT, 0o600)
    try:
        fcntl.flock(lock, fcntl.LOCK_EX)
        try:
            document = yaml.safe_load(path.read_text())
        except FileNotFoundError:
            document = []
        entries, new = put_storage(document, name, body)
        tmp = path.with_name(f".{path.name}.tmp")
        with contextlib.suppress(FileNotFoundError):
            tmp.unlink()
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            yaml.safe_dump(entries, f, sort_keys=False)
        os.replace(tmp, path)
        return new
    finally:
        os.close(lock)


@routes.put("/v2/storages/{storage}")
async def put_storage_route(request: web.Request) -> web.Response:
    """Add or change a storage in the cluster's storages file (admin only); groups grant it
    through their ``extension.acls.storageConfigs``."""
    require_admin(request)
    name = request.match_info["storage"]
    body = await json_body(request)
    path = request.app[SETTINGS].resolved_storages_file()
    try:
        new = await asyncio.to_thread(_write, path, name, body)
    except StorageConfigError as exc:
        raise invalid_parameters(
            str(exc), "The body is a storage entry: {type: local, data: {path: DIR, mountPath: /mnt/NAME}}."
        ) from None
    except (yaml.YAMLError, OSError, UnicodeDecodeError) as exc:
        raise unavailable(
            f"The cluster's storage configuration (PAI_STORAGES_FILE) cannot be written: {exc}"
        ) from None
    verb = "added" if new else "updated"
    return web.json_response({"message": f"storage {name} is {verb}"}, status=201 if new else 200)
