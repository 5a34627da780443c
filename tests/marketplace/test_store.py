"""The marketplace's SQL store on SQLite, met directly: what each caller finds with each filter
(the visibility rule as SQL), pages and totals, labels counted over what one may see, stars and
uses counted once, edits and deletes."""

from __future__ import annotations

import asyncio
import shutil
from collections.abc import AsyncIterator
from dataclasses import replace
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from libs.backbone.sql import create_engine
from services.marketplace.adapters.storing import Query, Store, migrate
from services.marketplace.core.items import Caller, Item, may_see

T0 = datetime(2026, 11, 1, 12, 0, 0, 123_000, tzinfo=UTC)
ALICE = Caller("alice", groups=frozenset({"ml"}))
BOB = Caller("bob", groups=frozenset({"vision"}))
CAROL = Caller("carol")
ADMIN = Caller("root", admin=True)


def item(item_id: str, author: str, minutes: int, **fields: object) -> Item:
    base: dict[str, Any] = {"type": "template", "is_public": True, "status": "approved"}
    base.update(fields)
    moment = T0 + timedelta(minutes=minutes)
    return Item(
        id=item_id, name=f"Item {item_id}", author=author, created_at=moment, updated_at=moment, **base
    )


ITEMS = (
    item("pub", "alice", 1, summary="MNIST on PyTorch", tags=("mnist", "pytorch"), categories=("training",)),
    item("pending", "alice", 2, status="pending", tags=("pytorch",)),
    item("rejected", "bob", 3, status="rejected", status_reason="no README", tags=("pytorch",)),
    item("private", "alice", 4, is_public=False, is_private=True, tags=("secret",)),
    item(
        "ml", "bob", 5, is_public=False, group_list=("ml", "nlp"), tags=("pytorch",), categories=("training",)
    ),
    item(
        "vision",
        "carol",
        6,
        is_public=False,
        group_list=("vision",),
        type="data",
        data_type="url",
        data_url="https://h/d.tgz",
        protocol="",
        description="Images 100%_done",
    ),
    item("bobs", "bob", 7, description="A Keyword in the text", categories=("serving",)),
    item("kept", "carol", 8, is_public=False, is_private=True, group_list=("ml",)),
    item("queued", "bob", 9, status="pending", group_list=("ml",)),
)


@pytest.fixture(scope="module")
def seeded(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A database at the newest revision holding ITEMS, made once: each test starts from a copy."""
    path = tmp_path_factory.mktemp("market") / "market.db"

    async def make() -> None:
        engine = create_engine(f"sqlite+aiosqlite:///{path}")
        await migrate(engine)
        store = Store(engine)
        for entry in ITEMS:
            await store.create(entry)
        await engine.dispose()

    asyncio.run(make())
    return path


@pytest.fixture
async def store(tmp_path: Path, seeded: Path) -> AsyncIterator[Store]:
    shutil.copy(seeded, tmp_path / "market.db")
    engine = create_engine(f"sqlite+aiosqlite:///{tmp_path / 'market.db'}")
    try:
        yield Store(engine)
    finally:
        await engine.dispose()


async def ids(store: Store, caller: Caller, **filters: object) -> list[str]:
    found, total = await store.search(caller, Query(**filters))  # type: ignore[arg-type]
    assert total == len(found)
    return [entry.id for entry in found]


async def test_an_item_reads_back_as_it_was_written(store: Store) -> None:
    for entry in ITEMS:
        assert await store.get(entry.id) == entry
    assert await store.get("none") is None


async def test_labels_read_back_in_alphabetical_order(store: Store) -> None:
    await store.create(item("z", "zed", 9, tags=("zeta", "alpha"), categories=("b", "a")))
    found = await store.get("z")
    assert found is not None
    assert (found.tags, found.categories) == (("alpha", "zeta"), ("a", "b"))


@pytest.mark.parametrize(
    "caller", [ALICE, BOB, CAROL, ADMIN, Caller("dave", groups=frozenset({"nlp", "vision"}))]
)
async def test_each_caller_finds_what_the_core_rule_lets_them_see_newest_first(
    store: Store, caller: Caller
) -> None:
    expected = [
        entry.id
        for entry in sorted(ITEMS, key=lambda e: e.created_at, reverse=True)
        if may_see(caller, entry)
    ]
    assert await ids(store, caller) == expected


async def test_what_each_caller_sees(store: Store) -> None:
    assert await ids(store, CAROL) == ["kept", "bobs", "vision", "pub"]
    assert await ids(store, ALICE) == ["bobs", "ml", "private", "pending", "pub"]
    assert await ids(store, BOB) == ["queued", "bobs", "vision", "ml", "rejected", "pub"]
    assert len(await ids(store, ADMIN)) == len(ITEMS)


async def test_a_keyword_is_found_in_name_summary_or_description_whatever_its_case(store: Store) -> None:
    assert await ids(store, ADMIN, keyword="pytorch") == ["pub"]
    assert await ids(store, ADMIN, keyword="KEYWORD") == ["bobs"]
    assert await ids(store, ADMIN, keyword="item ML") == ["ml"]
    assert await ids(store, ADMIN, keyword="100%_") == ["vision"]
    assert await ids(store, ADMIN, keyword="%") == ["vision"]
    assert await ids(store, ADMIN, keyword="_") == ["vision"]


async def test_each_filter_narrows_to_its_items(store: Store) -> None:
    assert await ids(store, ADMIN, type="data") == ["vision"]
    assert await ids(store, ADMIN, author="bob") == ["queued", "bobs", "ml", "rejected"]
    assert await ids(store, ADMIN, status="pending") == ["queued", "pending"]
    assert await ids(store, ADMIN, visibility="private") == ["kept", "private"]
    assert await ids(store, ADMIN, visibility="public") == ["queued", "bobs", "rejected", "pending", "pub"]
    assert await ids(store, ADMIN, visibility="group") == ["vision", "ml"]
    assert await ids(store, ADMIN, tag="pytorch") == ["ml", "rejected", "pending", "pub"]
    assert await ids(store, ADMIN, category="training") == ["ml", "pub"]
    assert await ids(store, ADMIN, tag="pytorch", category="training", author="bob") == ["ml"]
    assert await ids(store, CAROL, tag="pytorch") == ["pub"]


async def test_a_page_is_cut_after_the_rule_and_the_total_counts_every_match(store: Store) -> None:
    page, total = await store.search(ALICE, Query(offset=1, limit=2))
    assert [entry.id for entry in page] == ["ml", "private"]
    assert total == 5
    page, total = await store.search(ALICE, Query(offset=4, limit=2))
    assert [entry.id for entry in page] == ["pub"]
    assert total == 5


async def test_items_made_at_the_same_moment_are_ordered_by_id_descending(store: Store) -> None:
    await store.create(item("a1", "zed", 100))
    await store.create(item("a2", "zed", 100))
    assert await ids(store, CAROL, author="zed") == ["a2", "a1"]


async def test_labels_are_counted_over_the_items_the_caller_may_see(store: Store) -> None:
    assert await store.label_counts(CAROL, "tags") == [
        {"name": "mnist", "count": 1},
        {"name": "pytorch", "count": 1},
    ]
    assert await store.label_counts(ALICE, "tags") == [
        {"name": "pytorch", "count": 3},
        {"name": "mnist", "count": 1},
        {"name": "secret", "count": 1},
    ]
    assert await store.label_counts(ADMIN, "categories") == [
        {"name": "training", "count": 2},
        {"name": "serving", "count": 1},
    ]


async def test_an_author_finds_out_whether_a_starter_is_there(store: Store) -> None:
    assert await store.starter_exists("alice", "Item pub")
    assert not await store.starter_exists("bob", "Item pub")
    assert not await store.starter_exists("alice", "Item bobs")


async def test_a_saved_item_keeps_its_counts_and_replaces_its_labels(store: Store) -> None:
    await store.star("pub", "bob", T0)
    assert await store.record_use("job-1", "pub", "bob", T0)
    edited = replace(
        ITEMS[0],
        name="Renamed",
        summary="new",
        tags=("jax",),
        categories=(),
        is_public=False,
        group_list=("ml",),
        status="pending",
        status_reason="again",
        updated_at=T0 + timedelta(days=1),
        use_number=99,
        star_number=99,
    )
    await store.save(edited)
    assert await store.get("pub") == replace(edited, use_number=1, star_number=1)


async def test_a_deleted_item_is_gone_with_its_labels_and_stars(store: Store) -> None:
    await store.star("ml", "alice", T0)
    assert await store.delete("ml")
    assert not await store.delete("ml")
    assert await store.get("ml") is None
    assert await store.label_counts(ADMIN, "categories") == [
        {"name": "serving", "count": 1},
        {"name": "training", "count": 1},
    ]
    assert await store.star_users("ml") == []


async def test_a_star_is_counted_once_per_user(store: Store) -> None:
    assert await store.star("pub", "bob", T0 + timedelta(seconds=2)) == 1
    assert await store.star("pub", "bob", T0) is None
    assert await store.star("pub", "carol", T0 + timedelta(seconds=1)) == 2
    assert await store.star("bobs", "bob", T0 + timedelta(seconds=3)) == 1
    assert await store.star_users("pub") == ["carol", "bob"]
    assert await store.has_starred("pub", "bob")
    assert not await store.has_starred("pub", "alice")
    assert not await store.has_starred("bobs", "carol")
    found = await store.get("pub")
    assert found is not None
    assert found.star_number == 2
    assert await store.unstar("pub", "bob") == 1
    assert await store.unstar("pub", "bob") is None
    assert await store.has_starred("bobs", "bob"), "only that item's star is taken back"
    assert await store.star_users("pub") == ["carol"]


async def test_the_items_a_user_starred_are_those_the_caller_may_see_latest_first(store: Store) -> None:
    await store.star("bobs", "bob", T0)
    await store.star("private", "bob", T0 + timedelta(seconds=1))
    await store.star("pub", "bob", T0 + timedelta(seconds=2))
    await store.star("ml", "carol", T0 + timedelta(seconds=3))
    assert [entry.id for entry in await store.starred_by(CAROL, "bob")] == ["pub", "bobs"]
    assert [entry.id for entry in await store.starred_by(ALICE, "bob")] == ["pub", "private", "bobs"]
    starred = await store.starred_by(ADMIN, "bob")
    assert [entry.star_number for entry in starred] == [1, 1, 1]


async def test_a_use_is_counted_once_per_job_and_only_for_an_item_that_exists(store: Store) -> None:
    assert await store.record_use("job-1", "pub", "bob", T0)
    assert not await store.record_use("job-1", "pub", "bob", T0)
    assert await store.record_use("job-2", "pub", "carol", T0)
    assert not await store.record_use("job-3", "gone", "carol", T0)
    found = await store.get("pub")
    assert found is not None
    assert found.use_number == 2
