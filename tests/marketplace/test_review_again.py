"""An approved public item changed by its author is reviewed again; hostile bodies are 400."""

from __future__ import annotations

import pytest

from tests.marketplace.support import Market

DATA = {"type": "data", "protocol": "", "dataType": "url", "dataUrl": "https://data.example/set.tar"}


async def approved_public(market: Market) -> str:
    item = await market.create("alice", isPrivate=False, isPublic=True, **DATA)
    assert item["status"] == "pending"
    done = await market.call("PUT", f"/items/{item['id']}", "admin", json={"status": "approved"})
    assert done.json()["status"] == "approved"
    return str(item["id"])


@pytest.mark.parametrize(
    "change",
    [
        {"dataUrl": "https://elsewhere.example/other.tar"},
        {"name": "another name"},
        {"description": "now with different words"},
        {"tags": ["changed"]},
    ],
    ids=["dataUrl", "name", "description", "tags"],
)
async def test_an_authors_content_change_sends_an_approved_item_back_to_review(
    market: Market, change: dict[str, object]
) -> None:
    item = await approved_public(market)
    changed = await market.call("PUT", f"/items/{item}", "alice", json=change)
    assert changed.status_code == 200, changed.text
    body = changed.json()
    assert body["status"] == "pending"
    assert next(iter(change)) in body["statusReason"], "the author sees why"
    # Others no longer see it until an admin approves it again.
    assert item not in await market.ids("bob")
    job = await market.call("GET", f"/items/{item}/job", "bob")
    assert job.status_code == 404


async def test_who_sees_it_is_not_content(market: Market) -> None:
    item = await approved_public(market)
    changed = await market.call("PUT", f"/items/{item}", "alice", json={"isPublic": True})
    assert changed.json()["status"] == "approved"


async def test_deep_json_is_400_not_500(market: Market) -> None:
    deep = "[" * 100_000 + "]" * 100_000
    item = (await market.create("alice"))["id"]
    for method, path in (("POST", "/items"), ("PUT", f"/items/{item}")):
        answer = await market.client.request(
            method,
            "/marketplace/api" + path,
            content=deep,
            headers={"Authorization": "Bearer alice", "Content-Type": "application/json"},
        )
        assert answer.status_code == 400, (path, answer.status_code, answer.text[:200])
