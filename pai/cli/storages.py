"""`pai storage`: the cluster's storages and the groups they are granted to (admins).

`list` shows every storage the caller may use with its type, node path, mount path and the
groups granting it; `add NAME --path DIR` adds (or changes) a local storage through
``PUT /api/v2/storages/{name}``; `grant NAME --group G` and `revoke NAME --group G` change the
group's ``extension.acls.storageConfigs`` through ``PUT /api/v2/groups`` with ``patch: true``,
keeping the rest of its extension. A granted local storage is writable by every member's tasks
and closed to everyone else (docs/security.md, "Team storages").
"""

from __future__ import annotations

import json
from typing import Any
from urllib.parse import quote

import typer
from rich.table import Table

from pai.cli.client import PaiClient
from pai.cli.common import ServerOption, _client, _error_console, _friendly_errors
from pai.cli.output import console

storage_app = typer.Typer(
    no_args_is_help=True, help="Storages: list, add a local one, grant or revoke it to a group (admins)."
)


def _call(client: PaiClient, method: str, path: str, **kwargs: Any) -> Any:
    return client._request(method, path, **kwargs).json()


def _refuse(message: str) -> None:
    _error_console().print(f"error: {message}", markup=False)
    raise typer.Exit(2)


def _acls(group: dict[str, Any]) -> dict[str, Any]:
    acls = (group.get("extension") or {}).get("acls") or {}
    return acls if isinstance(acls, dict) else {}


def granting_groups(groups: list[dict[str, Any]]) -> dict[str, list[str]]:
    """Storage name -> the groups whose acls.storageConfigs name it."""
    found: dict[str, list[str]] = {}
    for group in groups:
        for name in _acls(group).get("storageConfigs") or []:
            found.setdefault(str(name), []).append(str(group["groupname"]))
    return found


def granted_extension(group: dict[str, Any], storage: str, grant: bool) -> tuple[dict[str, Any], bool]:
    """The group's extension with ``storage`` added to (or taken from) acls.storageConfigs, the
    rest kept; and whether that changes anything."""
    extension = dict(group.get("extension") or {})
    acls = dict(_acls(group))
    names = [str(name) for name in acls.get("storageConfigs") or []]
    if grant == (storage in names):
        return extension, False
    names = [*names, storage] if grant else [name for name in names if name != storage]
    acls["storageConfigs"] = names
    extension["acls"] = acls
    return extension, True


@storage_app.command("list")
def list_storages(
    as_json: bool = typer.Option(False, "--json", help="print JSON"), server: str | None = ServerOption
) -> None:
    """Every storage you may use (all of them for an admin): type, path, mount path, groups granted."""
    client, _ = _client(server)
    with _friendly_errors(), client:
        names = [s["name"] for s in _call(client, "GET", "/api/v2/storages")["storages"]]
        details = [_call(client, "GET", f"/api/v2/storages/{quote(name, safe='')}") for name in names]
        groups = granting_groups(_call(client, "GET", "/api/v2/groups"))
    rows = [
        {
            "name": detail["name"],
            "type": detail.get("type", ""),
            "path": str((detail.get("data") or {}).get("path", "")),
            "mountPath": str((detail.get("data") or {}).get("mountPath") or f"/mnt/{detail['name']}"),
            "default": bool(detail.get("default")),
            "groups": groups.get(detail["name"], []),
        }
        for detail in details
    ]
    if as_json:
        typer.echo(json.dumps(rows, indent=2))
        return
    table = Table("STORAGE", "TYPE", "PATH", "MOUNT", "DEFAULT", "GROUPS")
    for row in rows:
        table.add_row(
            row["name"],
            row["type"],
            row["path"],
            row["mountPath"],
            "yes" if row["default"] else "",
            ",".join(row["groups"]) or "-",
        )
    console().print(table)


@storage_app.command("add")
def add_storage(
    name: str = typer.Argument(..., help="the storage's name (letters, digits, '_', '.', '-')"),
    path: str = typer.Option("", "--path", help="the directory on the node, e.g. /srv/NAME"),
    mount: str = typer.Option("", "--mount", help="where tasks see it [default: /mnt/NAME]"),
    default: bool = typer.Option(False, "--default", help="mounted when a job names no storage"),
    read_only: bool = typer.Option(False, "--read-only", help="tasks may only read it"),
    server: str | None = ServerOption,
) -> None:
    """Add (or change) a local storage: a directory on the node, handed to the groups it is granted to."""
    if not path:
        _refuse("--path is required: the storage's directory on the node, e.g. --path /srv/" + name)
    if not path.startswith("/"):
        _refuse(f"--path must be an absolute path, e.g. /srv/{name}; got {path!r}")
    if mount and not mount.startswith("/"):
        _refuse(f"--mount must be an absolute path, e.g. /mnt/{name}; got {mount!r}")
    data = {"path": path, **({"mountPath": mount} if mount else {})}
    body: dict[str, Any] = {"type": "local", "data": data, "default": default}
    if read_only:
        body["readOnly"] = True
    client, _ = _client(server)
    with _friendly_errors(), client:
        answer = _call(client, "PUT", f"/api/v2/storages/{quote(name, safe='')}", json=body)
    console().print(str(answer.get("message", "done")), markup=False)


def _change_grant(name: str, group: str, server: str | None, grant: bool) -> None:
    if not group:
        _refuse("--group is required: the group whose members may use the storage")
    client, _ = _client(server)
    with _friendly_errors(), client:
        if grant:
            # 404 NoStorageError for a name the storages file does not define.
            _call(client, "GET", f"/api/v2/storages/{quote(name, safe='')}")
        found = _call(client, "GET", f"/api/v2/groups/{quote(group, safe='')}")
        extension, changed = granted_extension(found, name, grant)
        if changed:
            data = {"groupname": group, "extension": extension}
            _call(client, "PUT", "/api/v2/groups", json={"data": data, "patch": True})
    if not changed:
        state = "already granted to" if grant else "not granted to"
        console().print(f"storage {name} is {state} group {group}", markup=False)
        return
    verb = "granted to" if grant else "revoked from"
    console().print(f"storage {name} is {verb} group {group}", markup=False)


@storage_app.command("grant")
def grant_storage(
    name: str = typer.Argument(..., help="the storage's name"),
    group: str = typer.Option("", "--group", help="the group whose members may use it"),
    server: str | None = ServerOption,
) -> None:
    """Let a group's members mount a storage (their tasks read and write it)."""
    _change_grant(name, group, server, True)


@storage_app.command("revoke")
def revoke_storage(
    name: str = typer.Argument(..., help="the storage's name"),
    group: str = typer.Option("", "--group", help="the group to take it from"),
    server: str | None = ServerOption,
) -> None:
    """Take a storage from a group: its members' next tasks no longer mount it or get its group."""
    _change_grant(name, group, server, False)
