"""Storage definitions and who may use them, as OpenPAI's storage API shows them.

An admin lists the cluster's storages in one YAML file (``PAI_STORAGES_FILE``): each has a
name, whether it is shared, its volume name, whether it is mounted by default, a type (nfs,
samba, azureFile, azureBlob, other, or ``local``: a directory on the node, ``data.path``) and
the type's connection data. A group grants storages
by name in ``extension.acls.storageConfigs``; a user may use the union over their groups,
an admin every storage. This module parses and checks the file and filters it: no I/O.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from libs.protocol.storage_paths import path_refusal

TYPES = ("nfs", "samba", "azureFile", "azureBlob", "other", "unknown", "local")
# The data field each type cannot do without (OpenPAI's StorageDetail schema).
REQUIRED_DATA = {"nfs": ("server", "path"), "samba": ("address",), "azureFile": ("shareName",)}
REQUIRED_DATA["local"] = ("path",)
REQUIRED_DATA["azureBlob"] = ("containerName",)


# The storage plugins of a job's extras."com.microsoft.pai.runtimeplugin" (runtime/storage.py).
STORAGE_PLUGINS = ("storage", "teamwise_storage")


class StorageConfigError(ValueError):
    """The storages file is not a valid list of storages; the message names the entry and field."""


@dataclass(frozen=True)
class Storage:
    name: str
    share: bool
    volume_name: str
    default: bool
    type: str
    data: dict[str, Any]
    read_only: bool | None = None
    secret_name: str | None = None
    mount_options: tuple[str, ...] | None = None

    def summary(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "share": self.share,
            "volumeName": self.volume_name,
            "default": self.default,
        }

    def detail(self) -> dict[str, Any]:
        shown = {**self.summary(), "type": self.type, "data": dict(self.data)}
        if self.read_only is not None:
            shown["readOnly"] = self.read_only
        if self.secret_name is not None:
            shown["secretName"] = self.secret_name
        if self.mount_options is not None:
            shown["mountOptions"] = list(self.mount_options)
        return shown


def _field(entry: dict[str, Any], where: str, name: str, kind: type, default: Any = ...) -> Any:
    if name not in entry or entry[name] is None:
        if default is ...:
            raise StorageConfigError(f"{where}.{name} is required.")
        return default
    value = entry[name]
    if not isinstance(value, kind) or (kind is int and isinstance(value, bool)):
        raise StorageConfigError(f"{where}.{name} must be of type {kind.__name__}, got {value!r}.")
    return value


def parse_storages(document: Any) -> list[Storage]:
    """The storages a loaded YAML document lists; raises StorageConfigError naming the problem."""
    if document is None:
        return []
    if not isinstance(document, list):
        raise StorageConfigError("The storages file must be a YAML list of storages.")
    found: dict[str, Storage] = {}
    for position, entry in enumerate(document):
        where = f"[{position}]"
        if not isinstance(entry, dict):
            raise StorageConfigError(f"{where} must be a mapping with name, volumeName, type and data.")
        name = _field(entry, where, "name", str)
        kind = _field(entry, where, "type", str, "other")
        if kind not in TYPES:
            raise StorageConfigError(f"{where}.type must be one of {', '.join(TYPES)}, got {kind!r}.")
        data = _field(entry, where, "data", dict, {})
        missing = [key for key in REQUIRED_DATA.get(kind, ()) if not isinstance(data.get(key), str)]
        if missing:
            raise StorageConfigError(f"{where}.data needs {', '.join(missing)} (strings) for type {kind}.")
        options = _field(entry, where, "mountOptions", list, None)
        if name in found:
            raise StorageConfigError(f"{where}.name {name!r} is listed twice.")
        found[name] = Storage(
            name=name,
            share=_field(entry, where, "share", bool, True),
            volume_name=_field(entry, where, "volumeName", str, name),
            default=_field(entry, where, "default", bool, False),
            type=kind,
            data=data,
            read_only=_field(entry, where, "readOnly", bool, None),
            secret_name=_field(entry, where, "secretName", str, None),
            mount_options=tuple(str(option) for option in options) if options is not None else None,
        )
    return list(found.values())


def granted(storages: Iterable[Storage], admin: bool, names: Iterable[str]) -> list[Storage]:
    """The storages a caller may use: all for an admin, else those their groups name."""
    allowed = set(names)
    return [storage for storage in storages if admin or storage.name in allowed]


class StorageRefusedError(ValueError):
    """A job names storages its user may not use."""

    def __init__(self, refused: list[str], usable: list[str]) -> None:
        super().__init__(f"storages {refused} are not usable; usable storages are {usable or 'none'}")
        self.refused = refused
        self.usable = usable


def node_path(storage: Storage) -> str:
    """Where the storage's data is on a node: ``data.path`` of a local storage, else ``data.localPath``
    (where the node mounted it; an nfs export mounted at its own path needs none)."""
    local = storage.data.get("localPath")
    if isinstance(local, str) and local:
        return local
    if storage.type in ("local", "nfs"):
        return str(storage.data["path"])
    return ""


def mount_path(storage: Storage) -> str:
    """Where a task sees the storage unless the job says otherwise: ``data.mountPath`` or OpenPAI's
    ``/mnt/<name>``."""
    chosen = storage.data.get("mountPath")
    return chosen if isinstance(chosen, str) and chosen else f"/mnt/{storage.name}"


def _named(parameters: dict[str, Any]) -> list[str] | None:
    """The storage names one plugin entry asks for; None when it names none (the defaults)."""
    if isinstance(parameters.get("storages"), list):
        entries = parameters["storages"]
        return [
            entry["name"]
            for entry in entries
            if isinstance(entry, dict) and isinstance(entry.get("name"), str)
        ]
    names = parameters.get("storageConfigNames")
    if isinstance(names, list) and names:
        return [name for name in names if isinstance(name, str)]
    return None


def job_storages(plugins: Iterable[tuple[str, dict[str, Any]]], usable: list[Storage]) -> list[Storage]:
    """The usable storages a job's storage plugins may mount, from (plugin name, parameters) pairs.

    A plugin naming storages gets those (every one must be usable, else StorageRefusedError names
    them and the usable ones); one naming none gets the user's default storages. A job without
    a storage plugin mounts nothing.
    """
    by_name = {storage.name: storage for storage in usable}
    chosen: dict[str, Storage] = {}
    refused: list[str] = []
    for plugin, parameters in plugins:
        if plugin not in STORAGE_PLUGINS:
            continue
        names = _named(parameters)
        if names is None:
            chosen.update((storage.name, storage) for storage in usable if storage.default)
            continue
        for name in names:
            if name in by_name:
                chosen[name] = by_name[name]
            elif name not in refused:
                refused.append(name)
    if refused:
        raise StorageRefusedError(sorted(refused), sorted(by_name))
    return list(chosen.values())


STORAGE_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,62}$")
# What PUT /api/v2/storages/{name} may set: the entry's fields but its name (the path's).
_PUT_FIELDS = ("type", "data", "default", "share", "volumeName", "readOnly", "mountOptions")


def put_storage(document: Any, name: str, body: dict[str, Any]) -> tuple[list[Any], bool]:
    """The storages file's document with storage ``name`` set to ``body`` (added, or replacing the
    entry of that name), and whether it is new. StorageConfigError names the field and the fix.

    A ``local`` storage's directory (``data.path``) must be one the platform may hand to the
    storage's group (libs/protocol/storage_paths.py), and its ``data.mountPath`` absolute."""
    if not STORAGE_NAME.fullmatch(name):
        raise StorageConfigError(
            f"name {name!r} must be 1-63 letters, digits, '_', '.' or '-', starting with a letter or digit."
        )
    unknown = sorted(set(body) - set(_PUT_FIELDS) - {"name"})
    if unknown:
        raise StorageConfigError(f"{', '.join(unknown)}: not a storage field; use {', '.join(_PUT_FIELDS)}.")
    if body.get("name", name) != name:
        raise StorageConfigError(f"name {body['name']!r} differs from the path's {name!r}; leave it out.")
    entry = {"name": name, **{key: body[key] for key in _PUT_FIELDS if key in body}}
    entry.setdefault("type", "local")
    kind, data = entry["type"], entry.get("data")
    if kind == "local" and isinstance(data, dict):
        refusal = path_refusal(data["path"]) if isinstance(data.get("path"), str) else ""
        if refusal:
            raise StorageConfigError(refusal + ".")
        mount = data.get("mountPath")
        if mount is not None and (not isinstance(mount, str) or not mount.startswith("/") or ".." in mount):
            raise StorageConfigError(f"data.mountPath must be an absolute path without '..', got {mount!r}.")
    if document is not None and not isinstance(document, list):
        raise StorageConfigError("The storages file must be a YAML list of storages.")
    existing = list(document or [])
    new = True
    for position, item in enumerate(existing):
        if isinstance(item, dict) and item.get("name") == name:
            existing[position], new = entry, False
            break
    else:
        existing.append(entry)
    try:
        parse_storages([entry])
    except StorageConfigError as exc:
        raise StorageConfigError(str(exc).removeprefix("[0].")) from None
    parse_storages(existing)
    return existing, new
