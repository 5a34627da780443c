"""The marketplace's pure rules: who sees an item, what a change does to its status."""

from __future__ import annotations

from dataclasses import replace
from datetime import UTC, datetime

import pytest

from libs.protocol.limits import DEFAULT_LIMITS
from services.marketplace.core.items import (
    Caller,
    FieldError,
    Item,
    NotAllowed,
    may_see,
    read_fields,
    update_item,
)
from tests.marketplace.support import HELLO

NOW = datetime(2026, 11, 23, tzinfo=UTC)
ALICE = Caller("alice", groups=frozenset({"vision"}))
BOB = Caller("bob", groups=frozenset({"default"}))
CAROL = Caller("carol", groups=frozenset({"vision"}))
ADMIN = Caller("admin", admin=True)
ITEM = Item(id="i1", name="x", author="alice", type="template", protocol=HELLO, is_private=True)
GROUP = replace(ITEM, is_private=False, group_list=("vision",))
PENDING = replace(ITEM, is_private=False, is_public=True, status="pending")
APPROVED = replace(PENDING, status="approved")
REJECTED = replace(PENDING, status="rejected")


@pytest.mark.parametrize(
    ("item", "caller", "seen"),
    [
        pytest.param(ITEM, ALICE, True, id="private-author"),
        pytest.param(ITEM, BOB, False, id="private-other"),
        pytest.param(ITEM, ADMIN, True, id="private-admin"),
        pytest.param(GROUP, CAROL, True, id="group-member"),
        pytest.param(GROUP, BOB, False, id="group-outsider"),
        pytest.param(PENDING, BOB, False, id="pending-other"),
        pytest.param(PENDING, ALICE, True, id="pending-author"),
        pytest.param(PENDING, ADMIN, True, id="pending-admin"),
        pytest.param(APPROVED, BOB, True, id="approved-other"),
        pytest.param(REJECTED, BOB, False, id="rejected-other"),
    ],
)
def test_who_sees_an_item(item: Item, caller: Caller, seen: bool) -> None:
    assert may_see(caller, item) is seen


@pytest.mark.parametrize(
    ("item", "caller", "body", "status"),
    [
        pytest.param(
            ITEM, ALICE, {"isPrivate": False, "isPublic": True}, "pending", id="made-public-by-author"
        ),
        pytest.param(
            ITEM, ADMIN, {"isPrivate": False, "isPublic": True}, "approved", id="made-public-by-admin"
        ),
        pytest.param(APPROVED, ALICE, {"protocol": HELLO + "# new\n"}, "pending", id="new-protocol"),
        pytest.param(APPROVED, ALICE, {"summary": "words"}, "pending", id="new-summary"),
        pytest.param(APPROVED, ALICE, {"tags": ["new"]}, "pending", id="new-tags"),
        pytest.param(APPROVED, ADMIN, {"summary": "words"}, "approved", id="an-admins-edit"),
        pytest.param(REJECTED, ALICE, {"isPublic": False, "isPrivate": True}, "approved", id="made-private"),
    ],
)
def test_what_a_change_does_to_the_status(
    item: Item, caller: Caller, body: dict[str, object], status: str
) -> None:
    update = update_item(item, caller, read_fields(body), None, NOW, DEFAULT_LIMITS)
    assert update.item.status == status
    assert update.item.updated_at == NOW


def test_only_the_author_or_an_admin_changes_and_only_an_admin_moderates() -> None:
    with pytest.raises(NotAllowed):
        update_item(GROUP, CAROL, {"summary": "x"}, None, NOW, DEFAULT_LIMITS)
    with pytest.raises(NotAllowed):
        update_item(PENDING, ALICE, {}, ("approved", ""), NOW, DEFAULT_LIMITS)
    done = update_item(PENDING, ADMIN, {}, ("rejected", "too big"), NOW, DEFAULT_LIMITS)
    assert (done.item.status, done.item.status_reason, done.moderated) == ("rejected", "too big", "rejected")
    with pytest.raises(FieldError) as found:
        update_item(ITEM, ADMIN, {}, ("approved", ""), NOW, DEFAULT_LIMITS)
    assert found.value.field == "status"


def test_a_change_that_changes_nothing_is_not_a_change() -> None:
    update = update_item(ITEM, ALICE, read_fields({"name": "x", "id": "other"}), None, NOW, DEFAULT_LIMITS)
    assert update.changed == ()
    assert update.item == ITEM
