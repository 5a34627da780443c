"""Users, groups and tokens in SQL: who may log in, what each may do, which tokens still count.

Rights come from groups, as in OpenPAI: each group's ``extension.acls`` may grant ``admin``,
``virtualClusters`` and ``storageConfigs``, and a user holds the union over their groups. The
``users.admin`` column is kept in step as a cache for readers of the first schema. A token is
a signed JWT whose id is also recorded here, so logout or revocation takes effect at once.
"""

from __future__ import annotations

import time
from collections.abc import Iterable
from typing import Any

from sqlalchemy import and_, delete, insert, select, update
from sqlalchemy.exc import IntegrityError
from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine

from services.rest.adapters.tables import groups, jobs, tokens, user_groups, users
from services.rest.core.text import unstorable

DEFAULT_GROUP = "default"
ADMIN_GROUP = "admingroup"
# Application tokens never expire; the row still needs an instant to compare with.
NEVER_MS = 253_402_300_799_000


class DuplicateError(Exception):
    """A user or group of that name exists already."""


def now_ms() -> int:
    return int(time.time() * 1000)


def acls_of(extension: dict[str, Any] | None) -> dict[str, Any]:
    """A group's acls with every field present (OpenPAI leaves absent ones unset)."""
    acls = dict((extension or {}).get("acls") or {})
    return {
        "admin": bool(acls.get("admin", False)),
        "virtualClusters": [str(v) for v in acls.get("virtualClusters") or []],
        "storageConfigs": [str(v) for v in acls.get("storageConfigs") or []],
    }


def rights(group_rows: Iterable[dict[str, Any]]) -> dict[str, Any]:
    """The union of the acls of a user's groups (order kept, duplicates dropped)."""
    admin, vcs, storages = False, dict[str, None](), dict[str, None]()
    for row in group_rows:
        acls = acls_of(row["extension"])
        admin = admin or acls["admin"]
        vcs.update(dict.fromkeys(acls["virtualClusters"]))
        storages.update(dict.fromkeys(acls["storageConfigs"]))
    return {"admin": admin, "virtual_clusters": list(vcs), "storage_configs": list(storages)}


async def _groups_of(conn: AsyncConnection, username: str) -> list[dict[str, Any]]:
    query = (
        select(groups)
        .join(user_groups, user_groups.c.groupname == groups.c.groupname)
        .where(user_groups.c.username == username)
        .order_by(groups.c.groupname)
    )
    return [dict(row) for row in (await conn.execute(query)).mappings()]


async def _user(conn: AsyncConnection, row: dict[str, Any]) -> dict[str, Any]:
    member_of = await _groups_of(conn, row["username"])
    return {**row, "grouplist": [g["groupname"] for g in member_of], **rights(member_of)}


async def get_user(engine: AsyncEngine, username: str) -> dict[str, Any] | None:
    """The user row plus ``grouplist``, ``admin``, ``virtual_clusters``, ``storage_configs``."""
    if unstorable(username):
        return None  # no user can be named so; PostgreSQL would refuse to compare it
    async with engine.connect() as conn:
        row = (await conn.execute(select(users).where(users.c.username == username))).mappings().first()
        return await _user(conn, dict(row)) if row is not None else None


async def list_users(engine: AsyncEngine) -> list[dict[str, Any]]:
    async with engine.connect() as conn:
        rows = (await conn.execute(select(users).order_by(users.c.username))).mappings().all()
        return [await _user(conn, dict(row)) for row in rows]


async def _vc_group(conn: AsyncConnection, vc: str) -> str:
    """The group granting exactly ``vc``; created (named after it) when none exists."""
    for row in (await conn.execute(select(groups))).mappings():
        acls = acls_of(row["extension"])
        if acls["virtualClusters"] == [vc] and not acls["admin"]:
            return str(row["groupname"])
    extension = {"acls": {"admin": False, "virtualClusters": [vc], "storageConfigs": []}}
    await conn.execute(
        insert(groups).values(
            groupname=vc,
            description=f"group for vc {vc}",
            external_name="",
            extension=extension,
            created_time=now_ms(),
        )
    )
    return vc


async def _set_membership(conn: AsyncConnection, username: str, names: Iterable[str]) -> None:
    await conn.execute(delete(user_groups).where(user_groups.c.username == username))
    wanted = list(dict.fromkeys(names))
    if wanted:
        await conn.execute(insert(user_groups), [{"username": username, "groupname": g} for g in wanted])
    admin = rights(await _groups_of(conn, username))["admin"]
    await conn.execute(update(users).where(users.c.username == username).values(admin=admin))


async def _apply_rights(
    conn: AsyncConnection, username: str, admin: bool | None, virtual_clusters: list[str] | None
) -> None:
    """Set admin and VC access the way OpenPAI's user routes do: by joining or leaving groups."""
    current = await _groups_of(conn, username)
    keep: list[str] = []
    for row in current:
        acls = acls_of(row["extension"])
        if admin is False and acls["admin"]:
            continue
        if virtual_clusters is not None and acls["virtualClusters"] and not acls["admin"]:
            continue
        keep.append(str(row["groupname"]))
    if admin:
        keep.append(ADMIN_GROUP)
    for vc in virtual_clusters or []:
        keep.append(await _vc_group(conn, vc))
    await _set_membership(conn, username, keep)


async def create_user(
    engine: AsyncEngine,
    username: str,
    password_hash: str,
    *,
    admin: bool = False,
    virtual_clusters: list[str] | None = None,
    email: str = "",
    extension: dict[str, Any] | None = None,
) -> None:
    """A new user in the default group (plus the admin group, plus one group per extra VC)."""
    try:
        async with engine.begin() as conn:
            await conn.execute(
                insert(users).values(
                    username=username,
                    password_hash=password_hash,
                    admin=admin,
                    email=email,
                    virtual_clusters=[],
                    extension=extension or {},
                    created_time=now_ms(),
                )
            )
            await _set_membership(conn, username, [DEFAULT_GROUP])
            await _apply_rights(conn, username, admin, virtual_clusters)
    except IntegrityError:
        raise DuplicateError(username) from None


async def update_user(engine: AsyncEngine, username: str, **changes: Any) -> bool:
    """Change any of password_hash, email, extension, admin, virtual_clusters; False if no user.

    The extension given is merged into the stored one key by key (a key given replaces its
    value, the others stay), in the same transaction as the read.
    """
    plain = {k: changes[k] for k in ("password_hash", "email", "extension") if changes.get(k) is not None}
    async with engine.begin() as conn:
        query = select(users.c.username, users.c.extension).where(users.c.username == username)
        row = (await conn.execute(query)).first()
        if row is None:
            return False
        if "extension" in plain:
            plain["extension"] = {**dict(row.extension or {}), **plain["extension"]}
        if plain:
            await conn.execute(update(users).where(users.c.username == username).values(**plain))
        if changes.get("admin") is not None or changes.get("virtual_clusters") is not None:
            await _apply_rights(conn, username, changes.get("admin"), changes.get("virtual_clusters"))
    return True


async def delete_user(engine: AsyncEngine, username: str) -> None:
    async with engine.begin() as conn:
        # Explicit, not left to ON DELETE CASCADE: SQLite enforces it only with foreign_keys on.
        await conn.execute(delete(tokens).where(tokens.c.username == username))
        await conn.execute(delete(user_groups).where(user_groups.c.username == username))
        await conn.execute(delete(users).where(users.c.username == username))


async def set_grouplist(engine: AsyncEngine, username: str, names: list[str]) -> None:
    async with engine.begin() as conn:
        await _set_membership(conn, username, names)


async def missing_groups(engine: AsyncEngine, names: Iterable[str]) -> list[str]:
    wanted = list(dict.fromkeys(names))
    async with engine.connect() as conn:
        found = set(
            (await conn.execute(select(groups.c.groupname).where(groups.c.groupname.in_(wanted)))).scalars()
        )
    return [name for name in wanted if name not in found]


async def get_group(engine: AsyncEngine, groupname: str) -> dict[str, Any] | None:
    async with engine.connect() as conn:
        row = (await conn.execute(select(groups).where(groups.c.groupname == groupname))).mappings().first()
    return dict(row) if row is not None else None


async def list_groups(engine: AsyncEngine) -> list[dict[str, Any]]:
    async with engine.connect() as conn:
        return [dict(r) for r in (await conn.execute(select(groups).order_by(groups.c.groupname))).mappings()]


async def create_group(
    engine: AsyncEngine, groupname: str, description: str, external_name: str, extension: dict[str, Any]
) -> None:
    try:
        async with engine.begin() as conn:
            await conn.execute(
                insert(groups).values(
                    groupname=groupname,
                    description=description,
                    external_name=external_name,
                    extension=extension,
                    created_time=now_ms(),
                )
            )
    except IntegrityError:
        raise DuplicateError(groupname) from None


async def update_group(engine: AsyncEngine, groupname: str, **values: Any) -> None:
    async with engine.begin() as conn:
        await conn.execute(update(groups).where(groups.c.groupname == groupname).values(**values))
        # A group's admin acl changed: refresh the cached flag of its members.
        members = (
            await conn.execute(select(user_groups.c.username).where(user_groups.c.groupname == groupname))
        ).scalars()
        for member in list(members):
            admin = rights(await _groups_of(conn, member))["admin"]
            await conn.execute(update(users).where(users.c.username == member).values(admin=admin))


async def delete_group(engine: AsyncEngine, groupname: str) -> None:
    async with engine.begin() as conn:
        members = list(
            (
                await conn.execute(select(user_groups.c.username).where(user_groups.c.groupname == groupname))
            ).scalars()
        )
        await conn.execute(delete(user_groups).where(user_groups.c.groupname == groupname))
        await conn.execute(delete(groups).where(groups.c.groupname == groupname))
        for member in members:
            admin = rights(await _groups_of(conn, member))["admin"]
            await conn.execute(update(users).where(users.c.username == member).values(admin=admin))


async def group_members(engine: AsyncEngine, groupname: str) -> list[dict[str, Any]]:
    async with engine.connect() as conn:
        query = (
            select(users.c.username, users.c.admin)
            .join(user_groups, user_groups.c.username == users.c.username)
            .where(user_groups.c.groupname == groupname)
            .order_by(users.c.username)
        )
        return [dict(row) for row in (await conn.execute(query)).mappings()]


async def record_token(
    engine: AsyncEngine,
    jti: str,
    username: str,
    expires_ms: int,
    kind: str = "user",
    created_ms: int | None = None,
    name: str = "",
) -> None:
    async with engine.begin() as conn:
        await conn.execute(
            insert(tokens).values(
                jti=jti,
                username=username,
                kind=kind,
                created_time=created_ms if created_ms is not None else now_ms(),
                expires_time=expires_ms,
                revoked=False,
                name=name,
            )
        )


async def token_kind(engine: AsyncEngine, jti: str, username: str) -> str | None:
    """The kind ("user" or "application") of an active token; None when revoked or expired."""
    async with engine.connect() as conn:
        row = await conn.scalar(
            select(tokens.c.kind).where(
                and_(
                    tokens.c.jti == jti,
                    tokens.c.username == username,
                    tokens.c.revoked.is_(False),
                    tokens.c.expires_time > now_ms(),
                )
            )
        )
    return str(row) if row is not None else None


async def token_is_active(engine: AsyncEngine, jti: str, username: str) -> bool:
    return await token_kind(engine, jti, username) is not None


async def active_tokens(engine: AsyncEngine, username: str) -> list[dict[str, Any]]:
    async with engine.connect() as conn:
        query = (
            select(tokens)
            .where(
                and_(
                    tokens.c.username == username,
                    tokens.c.revoked.is_(False),
                    tokens.c.expires_time > now_ms(),
                )
            )
            .order_by(tokens.c.created_time)
        )
        return [dict(row) for row in (await conn.execute(query)).mappings()]


async def revoke_token(engine: AsyncEngine, jti: str) -> None:
    async with engine.begin() as conn:
        await conn.execute(update(tokens).where(tokens.c.jti == jti).values(revoked=True))


async def revoke_user_tokens(engine: AsyncEngine, username: str, keep: str | None = None) -> None:
    """Revoke every token of a user (login and application) but ``keep``, the changer's own."""
    condition = and_(tokens.c.username == username, tokens.c.revoked.is_(False))
    if keep is not None:
        condition = and_(condition, tokens.c.jti != keep)
    async with engine.begin() as conn:
        await conn.execute(update(tokens).where(condition).values(revoked=True))


async def has_jobs(engine: AsyncEngine, username: str) -> bool:
    """Whether the read model holds any job submitted under this user name."""
    async with engine.connect() as conn:
        found = await conn.scalar(select(jobs.c.username).where(jobs.c.username == username).limit(1))
    return found is not None
