"""Items in SQL: reading with filters and the visibility rule, writing, stars and uses.

The visibility rule of ``core/items.py`` (``may_see``) is written here once more as a SQL
condition, so a page is cut after it and ``X-Total-Count`` counts only what the caller may see;
``tests/marketplace`` checks the two agree.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import sqlalchemy as sa
from sqlalchemy.exc import IntegrityError
from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine

from libs.backbone.sql import migrate as migrate_service
from services.marketplace.adapters.tables import categories, groups, items, stars, tags, uses
from services.marketplace.core.items import Caller, Item

MIGRATIONS = Path(__file__).resolve().parent.parent / "migrations"
# An arbitrary constant naming the advisory lock that serialises the marketplace's migrations.
_MIGRATION_LOCK = 0x5041495F4D4B5450

LABEL_TABLES = {"tags": tags, "categories": categories}


async def migrate(engine: AsyncEngine) -> None:
    """The marketplace's tables at their newest revision (its own history and version table)."""
    await migrate_service(engine, MIGRATIONS, _MIGRATION_LOCK)


def _ms(moment: datetime) -> int:
    return int(moment.timestamp() * 1000)


def _time(ms: int) -> datetime:
    return datetime.fromtimestamp(ms / 1000, UTC)


@dataclass(frozen=True)
class Query:
    """The filters of ``GET /items``."""

    keyword: str | None = None
    type: str | None = None
    category: str | None = None
    tag: str | None = None
    author: str | None = None
    visibility: str | None = None
    status: str | None = None
    offset: int = 0
    limit: int = 50


def visible(caller: Caller) -> sa.ColumnElement[bool]:
    """``may_see`` as a condition on ``marketplace_items``."""
    if caller.admin:
        return sa.true()
    shared = sa.exists(
        sa.select(groups.c.item_id).where(
            groups.c.item_id == items.c.id, groups.c.groupname.in_(sorted(caller.groups))
        )
    )
    return sa.or_(
        items.c.author == caller.username,
        sa.and_(items.c.is_public, items.c.status == "approved"),
        sa.and_(sa.not_(items.c.is_private), sa.not_(items.c.is_public), shared),
    )


def _has_label(table: sa.Table, column: str, value: str) -> sa.ColumnElement[bool]:
    return sa.exists(
        sa.select(table.c.item_id).where(table.c.item_id == items.c.id, table.c[column] == value)
    )


def _conditions(caller: Caller, query: Query) -> list[sa.ColumnElement[bool]]:
    found = [visible(caller)]
    if query.keyword:
        word = query.keyword.lower()
        found.append(
            sa.or_(
                *(
                    sa.func.lower(column).contains(word, autoescape=True)
                    for column in (items.c.name, items.c.summary, items.c.description)
                )
            )
        )
    if query.type:
        found.append(items.c.type == query.type)
    if query.author:
        found.append(items.c.author == query.author)
    if query.status:
        found.append(items.c.status == query.status)
    if query.visibility == "private":
        found.append(items.c.is_private)
    elif query.visibility == "public":
        found.append(items.c.is_public)
    elif query.visibility == "group":
        found.append(sa.and_(sa.not_(items.c.is_private), sa.not_(items.c.is_public)))
    if query.tag:
        found.append(_has_label(tags, "name", query.tag))
    if query.category:
        found.append(_has_label(categories, "name", query.category))
    return found


class Store:
    def __init__(self, engine: AsyncEngine) -> None:
        self.engine = engine

    async def _load(self, connection: AsyncConnection, rows: Sequence[sa.Row[Any]]) -> list[Item]:
        ids = [row.id for row in rows]
        if not ids:
            return []
        labels: dict[str, dict[str, list[str]]] = {key: {} for key in ("tags", "categories", "groups")}
        for key, table, column in (
            ("tags", tags, "name"),
            ("categories", categories, "name"),
            ("groups", groups, "groupname"),
        ):
            result = await connection.execute(
                sa.select(table.c.item_id, table.c[column])
                .where(table.c.item_id.in_(ids))
                .order_by(table.c[column])
            )
            for item_id, value in result:
                labels[key].setdefault(item_id, []).append(value)
        return [
            Item(
                id=row.id,
                name=row.name,
                author=row.author,
                type=row.type,
                summary=row.summary,
                description=row.description,
                protocol=row.protocol,
                data_type=row.data_type,
                data_url=row.data_url,
                tags=tuple(labels["tags"].get(row.id, ())),
                categories=tuple(labels["categories"].get(row.id, ())),
                is_private=bool(row.is_private),
                is_public=bool(row.is_public),
                group_list=tuple(labels["groups"].get(row.id, ())),
                status=row.status,
                status_reason=row.status_reason,
                use_number=int(row.use_number),
                star_number=int(row.star_number),
                created_at=_time(row.created_at),
                updated_at=_time(row.updated_at),
            )
            for row in rows
        ]

    async def get(self, item_id: str) -> Item | None:
        async with self.engine.connect() as connection:
            rows = (await connection.execute(sa.select(items).where(items.c.id == item_id))).all()
            found = await self._load(connection, rows)
        return found[0] if found else None

    async def search(self, caller: Caller, query: Query) -> tuple[list[Item], int]:
        """A page of the items the caller may see that match, newest first, and the total."""
        where = sa.and_(*_conditions(caller, query))
        async with self.engine.connect() as connection:
            total = (
                await connection.execute(sa.select(sa.func.count()).select_from(items).where(where))
            ).scalar_one()
            rows = (
                await connection.execute(
                    sa.select(items)
                    .where(where)
                    .order_by(items.c.created_at.desc(), items.c.id.desc())
                    .offset(query.offset)
                    .limit(query.limit)
                )
            ).all()
            return await self._load(connection, rows), int(total)

    async def starter_exists(self, author: str, name: str) -> bool:
        async with self.engine.connect() as connection:
            found = await connection.execute(
                sa.select(items.c.id).where(items.c.author == author, items.c.name == name).limit(1)
            )
            return found.first() is not None

    @staticmethod
    def _row(item: Item) -> dict[str, Any]:
        return {
            "name": item.name,
            "author": item.author,
            "type": item.type,
            "summary": item.summary,
            "description": item.description,
            "protocol": item.protocol,
            "data_type": item.data_type,
            "data_url": item.data_url,
            "is_private": item.is_private,
            "is_public": item.is_public,
            "status": item.status,
            "status_reason": item.status_reason,
            "created_at": _ms(item.created_at),
            "updated_at": _ms(item.updated_at),
        }

    async def _write_labels(self, connection: AsyncConnection, item: Item) -> None:
        for table, column, values in (
            (tags, "name", item.tags),
            (categories, "name", item.categories),
            (groups, "groupname", item.group_list),
        ):
            await connection.execute(sa.delete(table).where(table.c.item_id == item.id))
            if values:
                await connection.execute(sa.insert(table), [{"item_id": item.id, column: v} for v in values])

    async def create(self, item: Item) -> None:
        async with self.engine.begin() as connection:
            await connection.execute(
                sa.insert(items).values(id=item.id, use_number=0, star_number=0, **self._row(item))
            )
            await self._write_labels(connection, item)

    async def save(self, item: Item) -> None:
        """Write an item's fields and labels (its counts are the tables', never overwritten)."""
        async with self.engine.begin() as connection:
            await connection.execute(sa.update(items).where(items.c.id == item.id).values(**self._row(item)))
            await self._write_labels(connection, item)

    async def delete(self, item_id: str) -> bool:
        async with self.engine.begin() as connection:
            for table in (tags, categories, groups, stars):  # SQLite without foreign keys too
                await connection.execute(sa.delete(table).where(table.c.item_id == item_id))
            result = await connection.execute(sa.delete(items).where(items.c.id == item_id))
            return bool(result.rowcount)

    async def label_counts(self, caller: Caller, kind: str) -> list[dict[str, Any]]:
        """Each tag (or category) of the items the caller may see, with how many items carry it."""
        table = LABEL_TABLES[kind]
        count = sa.func.count().label("count")
        query = (
            sa.select(table.c.name, count)
            .select_from(table.join(items, items.c.id == table.c.item_id))
            .where(visible(caller))
            .group_by(table.c.name)
            .order_by(count.desc(), table.c.name)
        )
        async with self.engine.connect() as connection:
            return [{"name": name, "count": int(n)} for name, n in await connection.execute(query)]

    async def star(self, item_id: str, username: str, now: datetime) -> int | None:
        """Star once: the new star count, or None when this user had starred the item already."""
        try:
            async with self.engine.begin() as connection:
                await connection.execute(
                    sa.insert(stars).values(item_id=item_id, username=username, created_at=_ms(now))
                )
                return await self._recount_stars(connection, item_id)
        except IntegrityError:
            return None

    async def unstar(self, item_id: str, username: str) -> int | None:
        """The new star count, or None when this user had not starred the item."""
        async with self.engine.begin() as connection:
            result = await connection.execute(
                sa.delete(stars).where(stars.c.item_id == item_id, stars.c.username == username)
            )
            if not result.rowcount:
                return None
            return await self._recount_stars(connection, item_id)

    async def _recount_stars(self, connection: AsyncConnection, item_id: str) -> int:
        number = (
            sa.select(sa.func.count()).select_from(stars).where(stars.c.item_id == item_id).scalar_subquery()
        )
        await connection.execute(sa.update(items).where(items.c.id == item_id).values(star_number=number))
        found = await connection.execute(sa.select(items.c.star_number).where(items.c.id == item_id))
        return int(found.scalar_one())

    async def star_users(self, item_id: str) -> list[str]:
        async with self.engine.connect() as connection:
            result = await connection.execute(
                sa.select(stars.c.username)
                .where(stars.c.item_id == item_id)
                .order_by(stars.c.created_at, stars.c.username)
            )
            return [name for (name,) in result]

    async def starred_by(self, caller: Caller, username: str) -> list[Item]:
        """The items ``username`` starred that the caller may see, most recently starred first."""
        async with self.engine.connect() as connection:
            rows = (
                await connection.execute(
                    sa.select(items)
                    .join(stars, stars.c.item_id == items.c.id)
                    .where(stars.c.username == username, visible(caller))
                    .order_by(stars.c.created_at.desc(), items.c.id)
                )
            ).all()
            return await self._load(connection, rows)

    async def has_starred(self, item_id: str, username: str) -> bool:
        async with self.engine.connect() as connection:
            found = await connection.execute(
                sa.select(stars.c.item_id).where(stars.c.item_id == item_id, stars.c.username == username)
            )
            return found.first() is not None

    async def record_use(self, job_id: str, item_id: str, username: str, now: datetime) -> bool:
        """Count one use of an item by a job; False when this job was counted before or the item is gone."""
        try:
            async with self.engine.begin() as connection:
                exists = await connection.execute(sa.select(items.c.id).where(items.c.id == item_id))
                if exists.first() is None:
                    return False
                await connection.execute(
                    sa.insert(uses).values(
                        job_id=job_id, item_id=item_id, username=username, used_at=_ms(now)
                    )
                )
                await connection.execute(
                    sa.update(items).where(items.c.id == item_id).values(use_number=items.c.use_number + 1)
                )
                return True
        except IntegrityError:
            return False
