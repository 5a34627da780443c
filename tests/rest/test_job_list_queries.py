"""The job list's queries against a plain statement of OpenPAI's list semantics, on both backends.

``reference_page`` is the list as first written: every filter in one WHERE, the order with
``<field> IS NULL`` in front, tags filtered row by row in Python, a count over every match. The
indexed queries of ``jobs_store.list_jobs`` must return the same page and the same total for any
filter, including keywords holding LIKE's wildcards, the search separator or non-ASCII letters.
The migration adding those indexes is checked on its own: it applies over rows written by the
previous revision, fills the keyword text for them, and goes down and up again.
"""

from __future__ import annotations

import random
import uuid
from collections.abc import Sequence
from typing import Any

from alembic import command
from alembic.config import Config
from sqlalchemy import func, insert, or_, select, text
from sqlalchemy.engine import Connection
from sqlalchemy.ext.asyncio import AsyncEngine

from services.rest.adapters.database import MIGRATIONS, create_engine, migrate
from services.rest.adapters.jobs_store import ORDER_FIELDS, JobFilter, list_jobs
from services.rest.adapters.tables import jobs

USERS = ("ann", "Ann.B", "bob_x", "jürgen", "zoë.k", "carol")
VCS = ("default", "vision", "nlp_2")
NAMES = ("resnet-imagenet", "bert_base", "100%-gpu", "a/b", "Kim-sweep", "über-run", "x")
TAGS = ("oom", "paper", "abnormal", "a b", "nul\x00", "größe")
STATES = ("WAITING", "RUNNING", "SUCCEEDED", "FAILED", "STOPPED")
KEYWORDS = ("kim", "BERT", "_", "%", "0%", "a/b", "/", "ann", "Ü", "ü", "ber", "nlp", "IMAGE", "zzz", "\\")


def _rows(count: int, rng: random.Random) -> list[dict[str, Any]]:
    rows = []
    for n in range(count):
        state = rng.choice(STATES)
        submitted = 1_000_000 + rng.randrange(count // 3) * 1000  # repeated times test the tie order
        done = state in ("SUCCEEDED", "FAILED", "STOPPED")
        rows.append(
            {
                "id": uuid.UUID(int=rng.getrandbits(128)).hex,
                "username": rng.choice(USERS),
                "name": f"{rng.choice(NAMES)}-{n}",
                "virtual_cluster": rng.choice(VCS),
                "priority": 0,
                "priority_class": rng.choice((None, None, "prod", "test", "oppo")),
                "tags": rng.sample(TAGS, rng.choice((0, 0, 0, 1, 2))),
                "state": state,
                "sub_state": "Completed" if done else "Running",
                "execution_type": "START",
                "retries": rng.choice((0, 0, 1, 3)),
                "retries_user": 0,
                "retries_platform": 0,
                "retries_resource": 0,
                "submission_time": submitted,
                "created_time": submitted,
                "completed_time": submitted + rng.randrange(3) * 5000 if done else None,
                "total_gpus": rng.choice((0, 1, 8)),
                "total_tasks": rng.choice((1, 2)),
                "total_task_roles": 1,
                "config": {"name": "x"},
            }
        )
    return rows


async def reference_page(engine: AsyncEngine, flt: JobFilter) -> tuple[list[str], int]:
    """The list as first written: one WHERE, ``IS NULL`` ordering, tags checked in Python."""
    conditions: list[Any] = []
    if flt.usernames:
        conditions.append(jobs.c.username.in_(flt.usernames))
    if flt.virtual_clusters:
        conditions.append(jobs.c.virtual_cluster.in_(flt.virtual_clusters))
    if flt.states:
        conditions.append(jobs.c.state.in_(flt.states))
    if flt.keyword:
        pattern = f"%{flt.keyword.lower()}%"
        searched = (jobs.c.name, jobs.c.username, jobs.c.virtual_cluster)
        conditions.append(or_(*(func.lower(column).like(pattern) for column in searched)))
    if flt.priorities:
        options: list[Any] = [jobs.c.priority_class.in_([p for p in flt.priorities if p != "default"])]
        if "default" in flt.priorities:
            options.append(jobs.c.priority_class.is_(None))
        conditions.append(or_(*options))
    column = ORDER_FIELDS[flt.order_field]
    if flt.descending:
        order = [column.is_(None).desc(), column.desc()]
    else:
        order = [column.is_(None).asc(), column.asc()]
    query = select(jobs.c.id, jobs.c.tags).where(*conditions)
    query = query.order_by(*order, jobs.c.submission_time.desc(), jobs.c.id.desc())
    async with engine.connect() as conn:
        rows = (await conn.execute(query)).all()
    kept = []
    for job_id, tags in rows:
        have = set(tags or [])
        if flt.tags_contain and not have.intersection(flt.tags_contain):
            continue
        if flt.tags_not_contain and have.intersection(flt.tags_not_contain):
            continue
        kept.append(job_id)
    return kept[flt.offset : flt.offset + flt.limit], len(kept)


def _some(rng: random.Random, values: Sequence[str]) -> tuple[str, ...]:
    return tuple(rng.sample(values, rng.randint(1, 2))) if rng.random() < 0.3 else ()


def _filter(rng: random.Random) -> JobFilter:
    return JobFilter(
        usernames=_some(rng, USERS),
        virtual_clusters=_some(rng, VCS),
        states=_some(rng, STATES),
        keyword=rng.choice(KEYWORDS) if rng.random() < 0.4 else None,
        tags_contain=_some(rng, TAGS),
        tags_not_contain=_some(rng, TAGS),
        priorities=_some(rng, ("prod", "test", "oppo", "default")),
        offset=rng.choice((0, 0, 3, 40, 500)),
        limit=rng.choice((1, 5, 20, 5000)),
        order_field=rng.choice(list(ORDER_FIELDS)),
        descending=rng.random() < 0.5,
        with_total_count=True,
    )


async def test_every_filter_order_and_page_matches_the_plain_statement(database_url: str) -> None:
    engine = create_engine(database_url)
    try:
        await migrate(engine)
        rng = random.Random(20261122)
        async with engine.begin() as conn:
            await conn.execute(insert(jobs), _rows(300, rng))
        checked = 0
        for _ in range(250):
            flt = _filter(rng)
            expected_ids, expected_total = await reference_page(engine, flt)
            rows, total = await list_jobs(engine, flt)
            assert [row["id"] for row in rows] == expected_ids, flt
            assert total == expected_total, flt
            checked += bool(expected_ids)
        assert checked > 50  # most filters select something, so the pages are compared, not just empties
        for keyword in KEYWORDS:  # every keyword alone, over all jobs
            flt = JobFilter(keyword=keyword, with_total_count=True)
            expected_ids, expected_total = await reference_page(engine, flt)
            rows, total = await list_jobs(engine, flt)
            assert ([row["id"] for row in rows], total) == (expected_ids, expected_total), keyword
    finally:
        await engine.dispose()


async def test_the_total_is_counted_only_when_asked_for(database_url: str) -> None:
    engine = create_engine(database_url)
    try:
        await migrate(engine)
        async with engine.begin() as conn:
            await conn.execute(insert(jobs), _rows(30, random.Random(3)))
        rows, total = await list_jobs(engine, JobFilter(limit=5))
        assert (len(rows), total) == (5, None)
        rows, total = await list_jobs(engine, JobFilter(limit=5, offset=100, with_total_count=True))
        assert (rows, total) == ([], 30)
    finally:
        await engine.dispose()


def _migrate_to(connection: Connection, revision: str, *, down: bool = False) -> None:
    config = Config()
    config.set_main_option("script_location", str(MIGRATIONS))
    config.attributes["connection"] = connection
    (command.downgrade if down else command.upgrade)(config, revision)


def _job_indexes(connection: Connection) -> set[str]:
    # Read from the catalogue: SQLAlchemy's reflection skips expression indexes, with a warning.
    if connection.dialect.name == "postgresql":
        query = "SELECT indexname FROM pg_indexes WHERE tablename = 'jobs'"
    else:
        query = "SELECT name FROM sqlite_master WHERE type = 'index' AND tbl_name = 'jobs'"
    return set(connection.execute(text(query)).scalars())


async def test_the_list_index_migration_applies_over_existing_jobs_and_reverts(database_url: str) -> None:
    engine = create_engine(database_url)
    try:
        async with engine.begin() as conn:
            await conn.run_sync(_migrate_to, "0002")
            old = _rows(20, random.Random(5))
            columns = ", ".join(old[0])
            values = ", ".join(f":{key}" for key in old[0])
            for row in old:  # as revision 0002 knew the table: no search_text column yet
                statement = text(f"INSERT INTO jobs ({columns}) VALUES ({values})")
                await conn.execute(statement, {**row, "tags": "[]", "config": "{}"})
        await migrate(engine)
        async with engine.connect() as conn:
            indexes = await conn.run_sync(_job_indexes)
            stored = dict((await conn.execute(select(jobs.c.id, jobs.c.search_text))).all())
        assert {"ix_jobs_submission", "ix_jobs_completed_order", "ix_jobs_state_submission"} <= indexes
        assert {
            "ix_jobs_tagged_include" if engine.dialect.name == "postgresql" else "ix_jobs_tagged"
        } <= indexes
        assert "ix_jobs_state" not in indexes
        # Upper case in this data is ASCII only, which both backends' lower() folds as Python does.
        assert stored == {
            row["id"]: f"{row['name']}/{row['username']}/{row['virtual_cluster']}".lower() for row in old
        }
        async with engine.begin() as conn:
            await conn.run_sync(_migrate_to, "0002", down=True)
            assert "ix_jobs_state" in await conn.run_sync(_job_indexes)
        await migrate(engine)
        rows, total = await list_jobs(engine, JobFilter(keyword="-1", with_total_count=True))
        assert total == len([row for row in old if "-1" in row["name"]])
        assert len(rows) == total
    finally:
        await engine.dispose()
