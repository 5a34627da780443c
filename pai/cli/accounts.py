"""`pai user`, `pai group`, `pai token`: accounts, the groups that grant rights, and tokens.

Rights come from groups (admin, virtual clusters), so `pai user set --vc` and `--admin` join
or leave groups on the server; `pai group` shows and edits those groups directly. Passwords
are prompted for (hidden, confirmed) or read from ``PAI_NEW_PASSWORD`` for scripts, never
taken as a visible argument. `pai token create` prints an application token, named with
``--name`` and expiring after ``--expires-in`` days (30 unless told; 0: never): scripts use it
for job operations only. `pai token list` prints each token first on its line, then its name,
kind and expiry.
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any
from urllib.parse import quote

import typer
from rich.console import Console
from rich.table import Table

from pai.cli.client import PaiClient
from pai.cli.common import ServerOption, _client, _friendly_errors
from pai.cli.output import console

user_app = typer.Typer(no_args_is_help=True, help="Users: create, list, change, remove (admins).")
group_app = typer.Typer(no_args_is_help=True, help="Groups and the rights they grant (admins).")
token_app = typer.Typer(no_args_is_help=True, help="Your tokens: list, create for scripts, revoke.")

NewPassword = typer.Option(
    ...,
    prompt=True,
    hide_input=True,
    confirmation_prompt=True,
    envvar="PAI_NEW_PASSWORD",
    help="the password",
)


def _console() -> Console:
    return console()


def _call(client: PaiClient, method: str, path: str, **kwargs: Any) -> Any:
    # The shared client turns error bodies into ApiError, which _friendly_errors prints.
    return client._request(method, path, **kwargs).json()  # one client for every command


def _say(answer: Any) -> None:
    _console().print(str(answer.get("message", "done")) if isinstance(answer, dict) else "done", markup=False)


@user_app.command("list")
def list_users(server: str | None = ServerOption) -> None:
    """Every user with admin right, virtual clusters and groups."""
    client, _ = _client(server)
    with _friendly_errors(), client:
        users = _call(client, "GET", "/api/v2/users")
    table = Table("USER", "ADMIN", "VIRTUAL CLUSTERS", "GROUPS", "EMAIL")
    for user in users:
        table.add_row(
            user["username"],
            "yes" if user["admin"] else "",
            ",".join(user["virtualCluster"]),
            ",".join(user.get("grouplist", [])),
            user["email"],
        )
    _console().print(table)


@user_app.command("show")
def show_user(
    name: str = typer.Argument(..., help="the user's name"), server: str | None = ServerOption
) -> None:
    """One user's rights and groups."""
    client, _ = _client(server)
    with _friendly_errors(), client:
        user = _call(client, "GET", f"/api/v2/users/{quote(name, safe='')}")
    out = _console()
    out.print(f"{user['username']}{' (admin)' if user['admin'] else ''}", markup=False)
    out.print(f"  virtual clusters: {', '.join(user['virtualCluster']) or '-'}", markup=False)
    out.print(f"  groups: {', '.join(user.get('grouplist', [])) or '-'}", markup=False)
    out.print(f"  email: {user['email'] or '-'}", markup=False)


@user_app.command("create")
def create_user(
    name: str = typer.Argument(..., help="letters, digits, '_', '.', '-'"),
    password: str = NewPassword,
    admin: bool = typer.Option(False, "--admin", help="make the user an admin"),
    vc: list[str] = typer.Option([], "--vc", help="a virtual cluster beyond 'default' (repeatable)"),
    email: str = typer.Option("", "--email"),
    server: str | None = ServerOption,
) -> None:
    """Create a user (admins only)."""
    client, _ = _client(server)
    body: dict[str, Any] = {"username": name, "password": password, "admin": admin, "email": email}
    if vc:
        body["virtualCluster"] = ["default", *vc]
    with _friendly_errors(), client:
        _say(_call(client, "POST", "/api/v2/users", json=body))


@user_app.command("set")
def set_user(
    name: str = typer.Argument(..., help="the user's name"),
    admin: bool | None = typer.Option(None, "--admin/--no-admin", help="grant or withdraw the admin right"),
    vc: list[str] = typer.Option([], "--vc", help="replace the virtual clusters (repeatable)"),
    email: str | None = typer.Option(None, "--email"),
    password: bool = typer.Option(False, "--password", help="set a new password (prompted)"),
    server: str | None = ServerOption,
) -> None:
    """Change a user's admin right, virtual clusters, email or password (admins only)."""
    data: dict[str, Any] = {"username": name}
    if admin is not None:
        data["admin"] = admin
    if vc:
        data["virtualCluster"] = vc
    if email is not None:
        data["email"] = email
    if password:
        data["password"] = typer.prompt("new password", hide_input=True, confirmation_prompt=True)
    client, _ = _client(server)
    with _friendly_errors(), client:
        _say(_call(client, "PUT", "/api/v2/users", json={"data": data, "patch": True}))


@user_app.command("delete")
def delete_user(
    name: str = typer.Argument(..., help="the user's name"), server: str | None = ServerOption
) -> None:
    """Remove a user and revoke their tokens (admins only)."""
    client, _ = _client(server)
    with _friendly_errors(), client:
        _say(_call(client, "DELETE", f"/api/v2/users/{quote(name, safe='')}"))


@group_app.command("list")
def list_groups(server: str | None = ServerOption) -> None:
    """Every group with the rights it grants."""
    client, _ = _client(server)
    with _friendly_errors(), client:
        groups = _call(client, "GET", "/api/v2/groups")
    table = Table("GROUP", "ADMIN", "VIRTUAL CLUSTERS", "DESCRIPTION")
    for group in groups:
        acls = (group.get("extension") or {}).get("acls") or {}
        table.add_row(
            group["groupname"],
            "yes" if acls.get("admin") else "",
            ",".join(acls.get("virtualClusters") or []),
            group["description"],
        )
    _console().print(table)


@group_app.command("create")
def create_group(
    name: str = typer.Argument(..., help="the group's name"),
    vc: list[str] = typer.Option([], "--vc", help="a virtual cluster the group grants (repeatable)"),
    admin: bool = typer.Option(False, "--admin", help="the group grants the admin right"),
    description: str = typer.Option("", "--description"),
    server: str | None = ServerOption,
) -> None:
    """Create a group granting virtual clusters and/or the admin right (admins only)."""
    acls = {"admin": admin, "virtualClusters": vc, "storageConfigs": []}
    body = {"groupname": name, "description": description, "extension": {"acls": acls}}
    client, _ = _client(server)
    with _friendly_errors(), client:
        _say(_call(client, "POST", "/api/v2/groups", json=body))


@group_app.command("delete")
def delete_group(
    name: str = typer.Argument(..., help="the group's name"), server: str | None = ServerOption
) -> None:
    """Delete a group; its members lose what it granted (admins only)."""
    client, _ = _client(server)
    with _friendly_errors(), client:
        _say(_call(client, "DELETE", f"/api/v2/groups/{quote(name, safe='')}"))


@group_app.command("members")
def group_members(
    name: str = typer.Argument(..., help="the group's name"), server: str | None = ServerOption
) -> None:
    """The users in a group (admins only, as in OpenPAI)."""
    client, _ = _client(server)
    with _friendly_errors(), client:
        members = _call(client, "GET", f"/api/v2/groups/{quote(name, safe='')}/userlist")
    for member in members:
        _console().print(member["username"] + (" (admin)" if member["clusterAdmin"] else ""), markup=False)


@group_app.command("add-user")
def add_user(
    group: str = typer.Argument(...), user: str = typer.Argument(...), server: str | None = ServerOption
) -> None:
    """Put a user in a group (admins only)."""
    client, _ = _client(server)
    with _friendly_errors(), client:
        _say(_call(client, "PUT", f"/api/v2/users/{quote(user, safe='')}/group/", json={"groupname": group}))


@group_app.command("remove-user")
def remove_user(
    group: str = typer.Argument(...), user: str = typer.Argument(...), server: str | None = ServerOption
) -> None:
    """Take a user out of a group (admins only)."""
    client, _ = _client(server)
    with _friendly_errors(), client:
        _say(
            _call(client, "DELETE", f"/api/v2/users/{quote(user, safe='')}/group/", json={"groupname": group})
        )


DAY_SECONDS = 86_400


def _expiry(ms: Any) -> str:
    if ms is None:
        return "never expires"
    return "expires " + datetime.fromtimestamp(int(ms) / 1000, UTC).strftime("%Y-%m-%d %H:%M UTC")


@token_app.command("list")
def list_tokens(server: str | None = ServerOption) -> None:
    """Your tokens that are still valid, one a line: the token, its name, kind and expiry."""
    client, _ = _client(server)
    with _friendly_errors(), client:
        answer = _call(client, "GET", "/api/v2/tokens")
    details = answer.get("details") or [{"token": token} for token in answer["tokens"]]
    for item in details:
        kind = "application" if item.get("application") else "sign-in"
        name = item.get("name") or "-"
        typer.echo(f"{item['token']}  {name}  {kind}  {_expiry(item.get('expiresTime'))}")


@token_app.command("create")
def create_token(
    name: str = typer.Option("", "--name", help="what the token is for, shown in token lists"),
    expires_in: int = typer.Option(
        30, "--expires-in", min=0, max=3660, help="days until the token expires (0: never)"
    ),
    server: str | None = ServerOption,
) -> None:
    """Print a new application token: it serves job operations only."""
    body: dict[str, Any] = {"name": name}
    if expires_in:
        body["expiration"] = expires_in * DAY_SECONDS
    client, _ = _client(server)
    with _friendly_errors(), client:
        typer.echo(_call(client, "POST", "/api/v2/tokens/application", json=body)["token"])


@token_app.command("revoke")
def revoke_token(
    token: str = typer.Argument(..., help="the token, as `pai token list` shows it"),
    server: str | None = ServerOption,
) -> None:
    """Revoke one of your tokens."""
    client, _ = _client(server)
    with _friendly_errors(), client:
        _say(_call(client, "DELETE", f"/api/v2/tokens/{quote(token, safe='')}"))
