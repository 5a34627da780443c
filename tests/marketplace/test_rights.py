"""Who sees what: private to the author, group items to the groups, public ones once approved."""

from __future__ import annotations

import json
from typing import Any

import pytest

from libs.backbone.connecting import Bus
from services.marketplace.core.items import Caller, Item, may_see
from tests.marketplace.support import USERS, Market
from tests.support.waiting import eventually


async def test_a_private_template_is_invisible_to_another_user(market: Market) -> None:
    item = await market.create("alice", name="my private job", isPrivate=True)
    assert (item["isPrivate"], item["status"], item["author"]) == (True, "approved", "alice")

    assert item["id"] in await market.ids("alice")
    assert item["id"] not in await market.ids("bob")
    assert (await market.call("GET", f"/items/{item['id']}", "bob")).status_code == 404
    assert (await market.call("GET", f"/items/{item['id']}/job", "bob")).status_code == 404
    assert (await market.call("GET", f"/items/{item['id']}", "admin")).status_code == 200
    # Another user cannot change or delete what they cannot see.
    assert (await market.call("PUT", f"/items/{item['id']}", "bob", json={"name": "x"})).status_code == 404
    assert (await market.call("DELETE", f"/items/{item['id']}", "bob")).status_code == 404


async def test_a_group_template_is_visible_to_its_group_only(market: Market) -> None:
    item = await market.create("alice", name="vision job", isPrivate=False, groupList=["vision"])
    assert item["groupList"] == ["vision"]
    assert item["id"] in await market.ids("carol")  # in vision
    assert item["id"] not in await market.ids("bob")  # not in vision
    assert (await market.call("GET", f"/items/{item['id']}", "carol")).status_code == 200
    assert (await market.call("GET", f"/items/{item['id']}", "bob")).status_code == 404
    # A member sees it but only the author (or an admin) changes it.
    refused = await market.call("PUT", f"/items/{item['id']}", "carol", json={"summary": "mine now"})
    assert refused.status_code == 403
    assert refused.json()["code"] == "ForbiddenUserError"
    assert (await market.call("DELETE", f"/items/{item['id']}", "carol")).status_code == 403


def as_item(answer: dict[str, Any]) -> Item:
    """The item an API answer describes, for the pure rule."""
    return Item(
        id=answer["id"],
        name=answer["name"],
        author=answer["author"],
        type=answer["type"],
        is_private=answer["isPrivate"],
        is_public=answer["isPublic"],
        group_list=tuple(answer["groupList"]),
        status=answer["status"],
    )


@pytest.mark.parametrize("made", ["created private", "made private by PUT"])
async def test_a_private_item_that_keeps_its_group_list_is_the_authors_alone(
    market: Market, made: str
) -> None:
    if made == "created private":
        item = await market.create("alice", name="groups, private", isPrivate=True, groupList=["vision"])
    else:
        item = await market.create("alice", name="made private", isPrivate=False, groupList=["vision"])
        assert item["id"] in await market.ids("carol")  # shared with vision until made private
        changed = await market.call("PUT", f"/items/{item['id']}", "alice", json={"isPrivate": True})
        assert changed.status_code == 200, changed.text
        item = changed.json()
    assert (item["isPrivate"], item["groupList"]) == (True, ["vision"])
    # The SQL rule: carol, in vision, neither lists, counts nor reads it.
    listed = await market.call("GET", "/items", "carol")
    assert item["id"] not in [found["id"] for found in listed.json()]
    assert listed.headers["X-Total-Count"] == "0"
    assert item["id"] not in await market.ids("carol", visibility="private")
    assert (await market.call("GET", f"/items/{item['id']}", "carol")).status_code == 404
    # The pure rule says the same.
    carol = Caller("carol", False, frozenset({"vision"}))
    assert not may_see(carol, as_item(item))
    assert may_see(Caller("alice", False, frozenset({"default", "vision"})), as_item(item))
    assert item["id"] in await market.ids("alice")


async def test_a_public_template_appears_to_others_only_after_an_admin_approves_it(
    market: Market, topology: Bus
) -> None:
    item = await market.create("alice", name="public job", isPrivate=False, isPublic=True)
    assert item["status"] == "pending"
    assert item["id"] not in await market.ids("bob")
    assert item["id"] in await market.ids("alice")  # the author sees it waiting
    assert item["id"] in await market.ids("admin", status="pending")  # the review queue

    refused = await market.call("PUT", f"/items/{item['id']}", "alice", json={"status": "approved"})
    assert refused.status_code == 403  # the author cannot approve their own

    approved = await market.call("PUT", f"/items/{item['id']}", "admin", json={"status": "approved"})
    assert approved.status_code == 200, approved.text
    assert approved.json()["status"] == "approved"
    assert item["id"] in await market.ids("bob")
    assert item["id"] not in await market.ids("admin", status="pending")

    # A new protocol by the author puts it back in the queue.
    changed = await market.call(
        "PUT", f"/items/{item['id']}", "alice", json={"protocol": item["protocol"] + "# v2\n"}
    )
    assert changed.json()["status"] == "pending"
    assert item["id"] not in await market.ids("bob")
    rejected = await market.call(
        "PUT", f"/items/{item['id']}", "admin", json={"status": "rejected", "statusReason": "no comments"}
    )
    assert (rejected.json()["status"], rejected.json()["statusReason"]) == ("rejected", "no comments")
    assert item["id"] not in await market.ids("bob")

    # Every change was announced on the bus, on the item's own subjects.
    seen: list[str] = []
    sub = await topology.js.subscribe(f"pai.marketplace.{item['id']}.>", ordered_consumer=True)
    try:

        async def types() -> list[str]:
            while True:
                try:
                    msg = await sub.next_msg(timeout=0.2)
                except TimeoutError:
                    return seen
                seen.append(json.loads(msg.data)["type"])

        await eventually(types, lambda found: len(found) >= 4, within=10)
    finally:
        await sub.unsubscribe()
    assert seen == [
        "marketplace.item.created",
        "marketplace.item.approved",
        "marketplace.item.updated",
        "marketplace.item.rejected",
    ]


async def test_an_admins_public_item_is_approved_at_once(market: Market) -> None:
    item = await market.create("admin", name="admin's", isPrivate=False, isPublic=True)
    assert item["status"] == "approved"
    assert item["id"] in await market.ids("bob")


async def test_without_a_token_the_marketplace_answers_401(market: Market) -> None:
    response = await market.call("GET", "/items", None)
    assert response.status_code == 401
    assert response.json()["code"] == "UnauthorizedUserError"
    assert (await market.call("GET", "/items", "nobody")).status_code == 401


async def test_the_sql_rule_and_the_core_rule_agree_on_who_sees_what(market: Market) -> None:
    made = [
        await market.create("alice", isPrivate=True),
        await market.create("alice", isPrivate=False, groupList=["vision"]),
        await market.create("alice", isPrivate=False, groupList=["default", "vision"]),
        await market.create("alice", isPrivate=False, isPublic=True),
        await market.create("bob", isPrivate=False, groupList=["default"]),
        await market.create("admin", isPrivate=False, isPublic=True),
        await market.create("admin", isPrivate=False, groupList=["speech"]),
    ]
    approved = await market.create("carol", isPrivate=False, isPublic=True)
    await market.call("PUT", f"/items/{approved['id']}", "admin", json={"status": "approved"})
    made.append((await market.call("GET", f"/items/{approved['id']}", "admin")).json())
    for token, (user, admin, groups) in USERS.items():
        caller = Caller(user, admin, frozenset(groups))
        expected = {
            item["id"]
            for item in made
            if may_see(
                caller,
                Item(
                    id=item["id"],
                    name=item["name"],
                    author=item["author"],
                    type=item["type"],
                    is_private=item["isPrivate"],
                    is_public=item["isPublic"],
                    group_list=tuple(item["groupList"]),
                    status=item["status"],
                ),
            )
        }
        listed = await market.call("GET", "/items", token)
        assert set(await market.ids(token)) == expected, user
        assert listed.headers["X-Total-Count"] == str(len(expected))
