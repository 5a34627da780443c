"""Items through the API: validation errors name the field, stars count once, labels, paging, the job."""

from __future__ import annotations

import pytest
import yaml

from libs.protocol import parse_job
from tests.marketplace.support import HELLO, Market


@pytest.mark.parametrize(
    ("fields", "field", "words"),
    [
        pytest.param(
            {"protocol": "protocolVersion: 2\nname: x\n"}, "protocol", "taskRoles", id="invalid-job"
        ),
        pytest.param({"protocol": "a: [unclosed"}, "protocol", "protocol is not a valid job", id="not-yaml"),
        pytest.param({"protocol": ""}, "protocol", "required", id="no-protocol"),
        pytest.param(
            {"isPrivate": False, "groupList": ["speech"]},
            "groupList",
            "not a group of yours",
            id="not-my-group",
        ),
        pytest.param({"isPrivate": False, "groupList": []}, "groupList", "names its groups", id="no-group"),
        pytest.param({"summary": "x" * 1025}, "summary", "over the limit of 1,024", id="oversize-summary"),
        pytest.param({"name": "n" * 256}, "name", "shorten it", id="oversize-name"),
        pytest.param(
            {"tags": ["t"] * 0 + [f"t{i}" for i in range(33)]}, "tags", "over the limit", id="many-tags"
        ),
        pytest.param({"tags": ["a/b"]}, "tags", "may not contain", id="bad-tag"),
        pytest.param({"isPublic": True}, "isPublic", "not both", id="private-and-public"),
        pytest.param({"type": "model"}, "type", "template, data", id="bad-type"),
        pytest.param({"colour": "red"}, "colour", "not an item field", id="unknown-field"),
        pytest.param({"isPrivate": "yes"}, "isPrivate", "true or false", id="not-a-bool"),
        pytest.param(
            {"type": "data", "protocol": "", "dataType": "url", "dataUrl": "ftp://x"},
            "dataUrl",
            "http",
            id="bad-url",
        ),
        pytest.param(
            {"type": "data", "protocol": "", "dataType": "storage", "dataUrl": "nopath"},
            "dataUrl",
            "storageConfigName",
            id="bad-storage-path",
        ),
    ],
)
async def test_bad_input_is_400_naming_the_field(
    market: Market, fields: dict[str, object], field: str, words: str
) -> None:
    body = {"name": "an item", "type": "template", "protocol": HELLO, "isPrivate": True, **fields}
    response = await market.call("POST", "/items", "alice", json=body)
    assert response.status_code == 400, response.text
    error = response.json()
    assert error["code"] == "InvalidParametersError"
    assert error["field"] == field
    assert words in error["message"]


async def test_a_template_problem_lists_each_place_in_the_yaml(market: Market) -> None:
    bad = HELLO.replace("instances: 1", "instances: -1").replace("memoryMB: 256", "memoryMB: lots")
    response = await market.call(
        "POST", "/items", "alice", json={"name": "x", "type": "template", "protocol": bad, "isPrivate": True}
    )
    assert response.status_code == 400
    paths = [problem["path"] for problem in response.json()["problems"]]
    assert "taskRoles.main.instances" in paths
    assert "taskRoles.main.resourcePerInstance.memoryMB" in paths


async def test_an_admin_may_share_with_any_group_that_exists_but_not_an_unknown_one(market: Market) -> None:
    item = await market.create("admin", isPrivate=False, groupList=["speech"])
    assert item["groupList"] == ["speech"]
    response = await market.call(
        "POST",
        "/items",
        "admin",
        json={"name": "x", "type": "template", "protocol": HELLO, "groupList": ["nope"]},
    )
    assert response.status_code == 400
    assert response.json()["field"] == "groupList"
    assert "no group 'nope'" in response.json()["message"]


async def test_a_user_stars_an_item_once(market: Market) -> None:
    item = await market.create("alice", isPrivate=False, groupList=["default"])
    path = f"/users/bob/starItems/{item['id']}"
    first = await market.call("PUT", path, "bob")
    assert first.status_code == 200, first.text
    assert first.json()["starNumber"] == 1
    again = await market.call("PUT", path, "bob")
    assert again.status_code == 409
    assert (await market.call("PUT", path, "alice")).status_code == 403  # only as oneself
    assert (await market.call("PUT", f"/users/alice/starItems/{item['id']}", "alice")).json()[
        "starNumber"
    ] == 2
    got = (await market.call("GET", f"/items/{item['id']}", "bob")).json()
    assert got["starNumber"] == 2
    users = (await market.call("GET", f"/items/{item['id']}/starUsers", "bob")).json()
    assert users == [{"name": "bob"}, {"name": "alice"}]
    starred = (await market.call("GET", "/users/bob/starItems", "bob")).json()
    assert [s["id"] for s in starred] == [item["id"]]
    assert (await market.call("GET", path, "bob")).status_code == 200
    assert (await market.call("DELETE", path, "bob")).json()["starNumber"] == 1
    assert (await market.call("DELETE", path, "bob")).status_code == 404
    assert (await market.call("GET", path, "bob")).status_code == 404


async def test_tags_and_categories_filter_and_count_over_visible_items(market: Market) -> None:
    shared = await market.create(
        "alice", isPrivate=False, groupList=["default"], tags=["cpu"], categories=["Demo"]
    )
    hidden = await market.create("alice", isPrivate=True, tags=["cpu", "secret"])
    added = await market.call("PUT", f"/items/{shared['id']}/tags/pytorch", "alice")
    assert added.json() == ["cpu", "pytorch"]
    assert (await market.call("PUT", f"/items/{shared['id']}/tags/x", "bob")).status_code == 403
    assert (
        await market.call("PUT", f"/items/{shared['id']}/categories/Training", "alice")
    ).status_code == 200
    assert (await market.call("GET", f"/items/{shared['id']}/categories", "bob")).json() == [
        "Demo",
        "Training",
    ]

    assert await market.ids("bob", tag="pytorch") == [shared["id"]]
    assert await market.ids("bob", category="Training") == [shared["id"]]
    assert await market.ids("alice", tag="cpu") == [hidden["id"], shared["id"]]
    assert (await market.call("GET", "/tags", "bob")).json() == [
        {"name": "cpu", "count": 1},
        {"name": "pytorch", "count": 1},
    ]
    assert {"name": "cpu", "count": 2} in (await market.call("GET", "/tags", "alice")).json()
    assert (await market.call("GET", "/categories", "bob")).json() == [
        {"name": "Demo", "count": 1},
        {"name": "Training", "count": 1},
    ]
    removed = await market.call("DELETE", f"/items/{shared['id']}/tags/pytorch", "alice")
    assert removed.json() == ["cpu"]
    assert (await market.call("DELETE", f"/items/{shared['id']}/tags/pytorch", "alice")).status_code == 404


async def test_filters_and_pages(market: Market) -> None:
    made = [
        await market.create("alice", name=f"job {i}", summary="mnist" if i % 2 else "cifar", isPrivate=True)
        for i in range(5)
    ]
    newest_first = [item["id"] for item in reversed(made)]
    first = await market.call("GET", "/items", "alice", params={"limit": 2})
    assert first.headers["X-Total-Count"] == "5"
    second = await market.call("GET", "/items", "alice", params={"limit": 2, "offset": 2})
    third = await market.call("GET", "/items", "alice", params={"limit": 2, "offset": 4})
    pages = [r.json() for r in (first, second, third)]
    assert [item["id"] for page in pages for item in page] == newest_first
    assert len(await market.ids("alice", keyword="MNIST")) == 2
    assert await market.ids("alice", author="bob") == []
    assert len(await market.ids("alice", visibility="private", type="template")) == 5
    assert await market.ids("alice", type="data") == []
    bad = await market.call("GET", "/items", "alice", params={"limit": 0})
    assert bad.status_code == 400
    assert bad.json()["field"] == "limit"
    assert (await market.call("GET", "/items", "alice", params={"visibility": "everyone"})).json()[
        "field"
    ] == ("visibility")


async def test_the_job_of_a_template_names_it_in_extras_submit_from(market: Market) -> None:
    item = await market.create(
        "alice", protocol=HELLO.replace("taskRoles:", "extras:\n  keep: 1\ntaskRoles:")
    )
    response = await market.call("GET", f"/items/{item['id']}/job", "alice")
    assert response.status_code == 200
    text = response.json()["protocol"]
    job = parse_job(text)
    assert job.extras is not None
    assert job.extras.submit_from == item["id"]
    assert yaml.safe_load(text)["extras"]["keep"] == 1


async def test_the_job_of_a_data_item_mounts_its_storage(market: Market) -> None:
    item = await market.create(
        "alice", type="data", protocol="", dataType="storage", dataUrl="confignfs/datasets/mnist"
    )
    assert (item["protocol"], item["dataType"]) == ("", "storage")
    text = (await market.call("GET", f"/items/{item['id']}/job", "alice")).json()["protocol"]
    job = parse_job(text)
    assert job.extras is not None
    assert job.extras.submit_from == item["id"]
    [plugin] = yaml.safe_load(text)["extras"]["com.microsoft.pai.runtimeplugin"]
    assert plugin == {
        "plugin": "teamwise_storage",
        "parameters": {"storages": [{"name": "confignfs", "mountPath": "/mnt/data"}]},
    }
    url_item = await market.create(
        "alice", type="data", protocol="", dataType="url", dataUrl="https://e.x/d.tgz"
    )
    url_job = (await market.call("GET", f"/items/{url_item['id']}/job", "alice")).json()["protocol"]
    assert "https://e.x/d.tgz" in url_job
    parse_job(url_job)


async def test_the_author_edits_and_deletes(market: Market) -> None:
    item = await market.create("alice")
    changed = await market.call(
        "PUT", f"/items/{item['id']}", "alice", json={"summary": "new", "id": "ignored"}
    )
    assert changed.status_code == 200
    assert changed.json()["summary"] == "new"
    assert changed.json()["id"] == item["id"]
    assert changed.json()["updatedAt"] >= item["updatedAt"]
    bad = await market.call("PUT", f"/items/{item['id']}", "alice", json={"protocol": "name: x"})
    assert bad.json()["field"] == "protocol"
    deleted = await market.call("DELETE", f"/items/{item['id']}", "alice")
    assert deleted.status_code == 200
    assert (await market.call("GET", f"/items/{item['id']}", "alice")).status_code == 404
