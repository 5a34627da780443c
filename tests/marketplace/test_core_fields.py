"""The marketplace's field rules (services/marketplace/core/items.py), as a client meets them.

Each refused body names the field and says the fix in words the client shows; each accepted one
becomes exactly the item fields asked for; a new or changed item gets the status, times and
moderation the marketplace promises. The messages are compared whole: they are what a user reads.
"""

from __future__ import annotations

import time
from dataclasses import replace
from datetime import UTC, datetime, timedelta, timezone

import pytest

from libs.protocol.limits import DEFAULT_LIMITS, JobLimits
from services.marketplace.core.items import (
    Caller,
    FieldError,
    Item,
    NotAllowed,
    check_data_location,
    check_groups,
    check_item,
    check_label,
    check_protocol,
    new_item,
    read_fields,
    read_moderation,
    update_item,
)
from tests.marketplace.support import HELLO

NOW = datetime(2026, 11, 23, 8, 30, 15, 123456, tzinfo=UTC)
LATER = NOW + timedelta(hours=1)
ALICE = Caller("alice", groups=frozenset({"vision", "default"}))
ADMIN = Caller("admin", admin=True)
FIELDS = (
    "categories, dataType, dataUrl, description, groupList, isPrivate, isPublic, name, protocol, summary, "
    "tags, type"
)


def refused(call: object, *args: object) -> FieldError:
    assert callable(call)
    with pytest.raises(FieldError) as found:
        call(*args)
    return found.value


@pytest.mark.parametrize(
    ("body", "field", "message"),
    [
        pytest.param(
            {"colour": "red", "zebra": 1},
            "colour",
            f"colour is not an item field; the fields are {FIELDS}.",
            id="unknown-field-first-of-two",
        ),
        pytest.param({"name": 7}, "name", "name must be a string.", id="name-not-text"),
        pytest.param(
            {"summary": "a\x00b"}, "summary", "summary contains a NUL character; remove it.", id="nul"
        ),
        pytest.param(
            {"summary": "x" * 1025},
            "summary",
            "summary has 1,025 characters, over the limit of 1,024; shorten it.",
            id="summary-over",
        ),
        pytest.param(
            {"dataUrl": "u" * 2049},
            "dataUrl",
            "dataUrl has 2,049 characters, over the limit of 2,048; shorten it.",
            id="data-url-over",
        ),
        pytest.param(
            {"name": "  "}, "name", "name must not be empty; give the item a short title.", id="blank-name"
        ),
        pytest.param(
            {"type": "model"}, "type", "type must be one of template, data, not 'model'.", id="bad-type"
        ),
        pytest.param(
            {"dataType": "ftp"},
            "dataType",
            "dataType must be one of storage, url, not 'ftp'.",
            id="bad-data-type",
        ),
        pytest.param({"isPublic": "yes"}, "isPublic", "isPublic must be true or false.", id="flag-not-bool"),
        pytest.param({"tags": "a,b"}, "tags", "tags must be a list of strings.", id="tags-not-a-list"),
        pytest.param(
            {"categories": [" "]}, "categories", "categories must be a non-empty string.", id="blank-category"
        ),
        pytest.param(
            {"tags": [f"t{i}" for i in range(33)]},
            "tags",
            "tags has 33 entries, over the limit of 32; keep the most useful.",
            id="too-many-tags",
        ),
        pytest.param(
            {"tags": ["x" * 65]},
            "tags",
            f"tags {'x' * 20!r}... has 65 characters, over 64; shorten it.",
            id="tag-too-long",
        ),
        pytest.param(
            {"groupList": ["g" * 129]},
            "groupList",
            f"groupList {'g' * 20!r}... has 129 characters, over 128; shorten it.",
            id="group-too-long",
        ),
        pytest.param(
            {"groupList": [f"g{i}" for i in range(65)]},
            "groupList",
            "groupList has 65 entries, over the limit of 64; keep the most useful.",
            id="too-many-groups",
        ),
        pytest.param(
            {"tags": ["a#b"]},
            "tags",
            "tags 'a#b' may not contain control characters or / \\ ? # %.",
            id="tag-with-hash",
        ),
    ],
)
def test_a_refused_field_is_named_with_its_fix(body: dict[str, object], field: str, message: str) -> None:
    error = refused(read_fields, body)
    assert (error.field, error.message, str(error), error.problems) == (field, message, message, [])


def test_the_fields_sent_become_the_items_fields() -> None:
    body = {
        "name": "  mnist  ",
        "type": "data",
        "summary": "s",
        "description": "d",
        "protocol": "",
        "dataType": "storage",
        "dataUrl": "nfs/mnist",
        "tags": [" a ", "b", "a"],
        "categories": ["vision"],
        "isPrivate": False,
        "isPublic": True,
        "groupList": ["vision", "vision"],
        # What a client got back and sends again is ignored; moderation is read apart.
        "id": "other",
        "author": "mallory",
        "useNumber": 99,
        "status": "approved",
    }
    assert read_fields(body) == {
        "name": "mnist",
        "type": "data",
        "summary": "s",
        "description": "d",
        "protocol": "",
        "data_type": "storage",
        "data_url": "nfs/mnist",
        "tags": ("a", "b"),
        "categories": ("vision",),
        "is_private": False,
        "is_public": True,
        "group_list": ("vision",),
    }
    assert read_fields({"dataType": "", "tags": [], "name": None}) == {"data_type": "", "tags": ()}
    limits = {"tags": [f"t{i}" for i in range(32)], "summary": "x" * 1024, "groupList": ["g" * 128]}
    assert len(read_fields(limits)["tags"]) == 32


@pytest.mark.parametrize(
    ("body", "verdict"),
    [
        pytest.param({}, None, id="none"),
        pytest.param(
            {"status": "rejected", "statusReason": "  too big "}, ("rejected", "too big"), id="rejected"
        ),
        pytest.param({"status": "approved"}, ("approved", ""), id="approved"),
        pytest.param({"status": "pending"}, ("pending", ""), id="back-to-the-queue"),
    ],
)
def test_an_admins_verdict_is_read_with_its_reason(
    body: dict[str, object], verdict: tuple[str, str] | None
) -> None:
    assert read_moderation(body) == verdict


@pytest.mark.parametrize(
    ("body", "message"),
    [
        pytest.param(
            {"statusReason": "why"},
            "statusReason goes with status: send status 'rejected' too.",
            id="reason-alone",
        ),
        pytest.param(
            {"status": "done"},
            "status must be 'approved', 'rejected' or 'pending' (back to the queue), not 'done'.",
            id="unknown-status",
        ),
    ],
)
def test_a_verdict_that_cannot_be_read_names_status(body: dict[str, object], message: str) -> None:
    error = refused(read_moderation, body)
    assert (error.field, error.message) == ("status", message)


def test_a_templates_protocol_passes_the_submission_validator() -> None:
    check_protocol(HELLO, DEFAULT_LIMITS)
    error = refused(check_protocol, "  \n", DEFAULT_LIMITS)
    assert (error.field, error.message) == (
        "protocol",
        "protocol is required for a template: the job protocol v2 YAML.",
    )
    error = refused(check_protocol, "protocolVersion: 2\nname: x\n", DEFAULT_LIMITS)
    assert error.field == "protocol"
    assert error.message.startswith("protocol is not a valid job: type: is required (line 1)")
    assert error.message.endswith(". Fix the YAML (`pai job validate FILE` checks it).")
    assert [problem["path"] for problem in error.problems] == ["type", "taskRoles"]
    assert error.problems[1] == {
        "path": "taskRoles",
        "message": "is required (line 1)",
        "hint": "add `taskRoles:` with at least one task role",
    }
    assert error.__cause__ is None  # raised `from None`: the client sees the problems, not a trace
    assert error.__suppress_context__
    # The platform's limits hold for a template as for a submission.
    error = refused(check_protocol, HELLO, JobLimits(memory_mb_per_task=128))
    assert [problem["path"] for problem in error.problems] == ["taskRoles.main.resourcePerInstance.memoryMB"]


@pytest.mark.parametrize(
    ("data_type", "url", "field", "message"),
    [
        pytest.param("", "x/y", "dataType", "a data item needs dataType: 'storage' or 'url'.", id="no-type"),
        pytest.param(
            "url",
            "ftp://host/x",
            "dataUrl",
            "dataUrl must be an http(s) URL for dataType 'url', e.g. https://host/data.tgz.",
            id="not-http",
        ),
        pytest.param(
            "url",
            "https://host/a b",
            "dataUrl",
            "dataUrl must be an http(s) URL for dataType 'url', e.g. https://host/data.tgz.",
            id="space-in-url",
        ),
        *[
            pytest.param(
                "storage",
                url,
                "dataUrl",
                "dataUrl must be '<storageConfigName>/<path>' for dataType 'storage', "
                "e.g. confignfs/datasets/mnist.",
                id=f"storage-{name}",
            )
            for name, url in (("no-slash", "nfs"), ("no-config", "/data"), ("bad-config", "n%s/data"))
        ],
    ],
)
def test_a_data_items_location_must_be_reachable(data_type: str, url: str, field: str, message: str) -> None:
    error = refused(check_data_location, data_type, url)
    assert (error.field, error.message) == (field, message)


@pytest.mark.parametrize(
    ("data_type", "url"),
    [
        ("url", "http://host/x"),
        ("url", "https://h/d.tgz"),
        ("storage", "nfs/"),
        ("storage", "nfs/sets/mnist"),
    ],
)
def test_a_reachable_location_passes(data_type: str, url: str) -> None:
    check_data_location(data_type, url)


TEMPLATE = Item(id="i1", name="t", author="alice", type="template", protocol=HELLO, is_private=True)
DATA = Item(
    id="d1", name="d", author="alice", type="data", data_type="url", data_url="https://h/x", is_public=True
)


@pytest.mark.parametrize(
    ("item", "field", "message"),
    [
        pytest.param(
            replace(TEMPLATE, name=""), "name", "name is required; give the item a short title.", id="no-name"
        ),
        pytest.param(
            replace(TEMPLATE, is_public=True),
            "isPublic",
            "an item is either private (isPrivate) or public (isPublic), not both.",
            id="both",
        ),
        pytest.param(
            replace(TEMPLATE, is_private=False),
            "groupList",
            "a group item names its groups in groupList; or set isPrivate or isPublic to true.",
            id="group-without-groups",
        ),
        pytest.param(
            replace(TEMPLATE, data_url="https://h/x"),
            "dataType",
            "a template has no dataType or dataUrl; use type 'data' for data.",
            id="template-with-data-url",
        ),
        pytest.param(
            replace(TEMPLATE, data_type="url"),
            "dataType",
            "a template has no dataType or dataUrl; use type 'data' for data.",
            id="template-with-data-type",
        ),
        pytest.param(
            replace(TEMPLATE, protocol=""),
            "protocol",
            "protocol is required for a template: the job protocol v2 YAML.",
            id="template-without-protocol",
        ),
        pytest.param(
            replace(DATA, protocol=HELLO),
            "protocol",
            "a data item has no protocol; use type 'template' for a job.",
            id="data-with-protocol",
        ),
        pytest.param(
            replace(DATA, data_type=""),
            "dataType",
            "a data item needs dataType: 'storage' or 'url'.",
            id="data-without-type",
        ),
    ],
)
def test_an_item_is_checked_whole(item: Item, field: str, message: str) -> None:
    error = refused(check_item, item, DEFAULT_LIMITS)
    assert (error.field, error.message) == (field, message)


def test_items_that_hold_together_pass() -> None:
    for item in (TEMPLATE, DATA, replace(TEMPLATE, is_private=False, group_list=("vision",))):
        check_item(item, DEFAULT_LIMITS)


def test_an_author_shares_only_with_their_own_groups_an_admin_with_any_that_exists() -> None:
    check_groups(ALICE, ("vision", "default"), frozenset())
    error = refused(check_groups, ALICE, ("vision", "speech"), None)
    assert (error.field, error.message) == (
        "groupList",
        "groupList: 'speech' is not a group of yours (yours: default, vision); share with your own groups.",
    )
    error = refused(check_groups, Caller("bob"), ("vision",), None)
    assert error.message == (
        "groupList: 'vision' is not a group of yours (yours: none); share with your own groups."
    )
    check_groups(ADMIN, ("speech",), frozenset({"speech"}))
    check_groups(ADMIN, ("speech",), None)  # the groups are not known: REST checks them
    error = refused(check_groups, ADMIN, ("speech", "nobody"), frozenset({"speech"}))
    assert (error.field, error.message) == (
        "groupList",
        "groupList: no group 'nobody'; `GET /api/v2/groups` lists the groups.",
    )


def test_a_new_item_is_its_authors_at_the_time_sent() -> None:
    fields = read_fields({"name": "t", "type": "template", "protocol": HELLO, "groupList": ["vision"]})
    item = new_item("i9", ALICE, fields, NOW, DEFAULT_LIMITS)
    assert (item.id, item.author, item.created_at, item.updated_at) == ("i9", "alice", NOW, NOW)
    assert (item.is_private, item.is_public, item.visibility, item.status) == (
        False,
        False,
        "group",
        "approved",
    )
    public = new_item("i8", ALICE, {**fields, "is_public": True}, NOW, DEFAULT_LIMITS)
    assert (public.visibility, public.status) == ("public", "pending")
    by_admin = new_item("i7", ADMIN, {**fields, "is_public": True, "group_list": ()}, NOW, DEFAULT_LIMITS)
    assert (by_admin.author, by_admin.status) == ("admin", "approved")


@pytest.mark.parametrize(
    ("fields", "field", "message"),
    [
        pytest.param(
            {"type": "template"}, "name", "name is required; give the item a short title.", id="no-name"
        ),
        pytest.param({"name": "t"}, "type", "type is required: 'template' (a job) or 'data'.", id="no-type"),
        pytest.param(
            {"name": "t", "type": "template", "protocol": HELLO},
            "groupList",
            "a group item names its groups in groupList; or set isPrivate or isPublic to true.",
            id="neither-private-nor-public-nor-groups",
        ),
    ],
)
def test_a_new_item_needs_a_name_a_type_and_an_audience(
    fields: dict[str, object], field: str, message: str
) -> None:
    error = refused(new_item, "i1", ALICE, fields, NOW, DEFAULT_LIMITS)
    assert (error.field, error.message) == (field, message)


def test_an_item_reads_back_as_openpais_marketplace_writes_it() -> None:
    item = replace(
        DATA,
        summary="s",
        description="d",
        tags=("a",),
        categories=("c",),
        group_list=("g",),
        status="rejected",
        status_reason="r",
        use_number=3,
        star_number=4,
        created_at=NOW,
        updated_at=datetime(2026, 11, 23, 10, 0, tzinfo=timezone(timedelta(hours=2))),
    )
    assert item.to_json() == {
        "id": "d1",
        "name": "d",
        "author": "alice",
        "type": "data",
        "summary": "s",
        "description": "d",
        "protocol": "",
        "dataType": "url",
        "dataUrl": "https://h/x",
        "tags": ["a"],
        "categories": ["c"],
        "isPrivate": False,
        "isPublic": True,
        "groupList": ["g"],
        "status": "rejected",
        "statusReason": "r",
        "useNumber": 3,
        "starNumber": 4,
        "createdAt": "2026-11-23T08:30:15.123Z",
        "updatedAt": "2026-11-23T08:00:00.000Z",
    }


def test_a_change_names_the_fields_it_changed_and_stamps_the_time() -> None:
    item = replace(TEMPLATE, created_at=NOW, updated_at=NOW)
    update = update_item(
        item, ALICE, read_fields({"summary": "new", "name": "t"}), None, LATER, DEFAULT_LIMITS
    )
    assert (update.changed, update.moderated) == (("summary",), None)
    assert (update.item.summary, update.item.updated_at, update.item.created_at) == ("new", LATER, NOW)
    same = update_item(item, ALICE, read_fields({"summary": ""}), None, LATER, DEFAULT_LIMITS)
    assert (same.changed, same.item.updated_at) == ((), NOW)
    # A change that breaks the item is refused; one that changes nothing is not checked again.
    error = refused(update_item, item, ALICE, {"protocol": ""}, None, LATER, DEFAULT_LIMITS)
    assert error.field == "protocol"
    broken = replace(item, protocol="")
    assert update_item(broken, ALICE, {"protocol": ""}, None, LATER, DEFAULT_LIMITS).item == broken


def test_an_admins_verdict_is_stamped_and_keeps_a_reason_only_for_a_rejection() -> None:
    pending = replace(DATA, status="pending", created_at=NOW, updated_at=NOW)
    approved = update_item(pending, ADMIN, {}, ("approved", "fine"), LATER, DEFAULT_LIMITS)
    assert (approved.item.status, approved.item.status_reason, approved.item.updated_at) == (
        "approved",
        "",
        LATER,
    )
    assert (approved.changed, approved.moderated) == (("status",), "approved")
    rejected = update_item(pending, ADMIN, {"summary": "s"}, ("rejected", "why"), LATER, DEFAULT_LIMITS)
    assert (rejected.item.status, rejected.item.status_reason) == ("rejected", "why")
    assert rejected.changed == ("summary", "status")
    # An admin's own edit of a public item needs no approval; an author's edit of the job does.
    edited = update_item(
        replace(DATA, status="approved"), ADMIN, {"summary": "s"}, None, LATER, DEFAULT_LIMITS
    )
    assert edited.item.status == "approved"
    error = refused(
        update_item, replace(TEMPLATE, is_private=True), ADMIN, {}, ("rejected", "x"), LATER, DEFAULT_LIMITS
    )
    assert (error.field, error.message) == (
        "status",
        "only public items are moderated; private and group items are approved.",
    )


def test_a_label_is_trimmed_and_kept_to_its_length() -> None:
    assert check_label("tags", "  gpu  ") == "gpu"
    assert check_label("tags", "x" * 64) == "x" * 64
    error = refused(check_label, "tags", "abcd", 3)
    assert error.message == "tags 'abcd'... has 4 characters, over 3; shorten it."
    error = refused(check_label, "tags", 5)
    assert (error.field, error.message) == ("tags", "tags must be a non-empty string.")


def test_times_read_back_in_utc_whatever_the_machines_zone(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TZ", "Asia/Tokyo")
    time.tzset()
    try:
        local = NOW.astimezone(timezone(timedelta(hours=9)))
        assert replace(DATA, created_at=local).to_json()["createdAt"] == "2026-11-23T08:30:15.123Z"
    finally:
        monkeypatch.undo()
        time.tzset()


def test_a_change_that_sends_an_item_back_to_the_queue_or_out_of_it_says_why() -> None:
    rejected = replace(DATA, status="rejected", status_reason="too big")
    again = update_item(rejected, ALICE, {"data_url": "https://h/y"}, None, LATER, DEFAULT_LIMITS)
    assert (again.item.status, again.item.status_reason) == (
        "pending",
        "waiting for review again: dataUrl changed",
    )
    made_private = update_item(
        rejected, ALICE, {"is_public": False, "is_private": True}, None, LATER, DEFAULT_LIMITS
    )
    assert (made_private.item.status, made_private.item.status_reason) == ("approved", "")
    template = replace(TEMPLATE, is_private=False, is_public=True, status="rejected", status_reason="too big")
    new_job = update_item(template, ALICE, {"protocol": HELLO + "# v2\n"}, None, LATER, DEFAULT_LIMITS)
    assert (new_job.item.status, new_job.item.status_reason) == (
        "pending",
        "waiting for review again: protocol changed",
    )


def test_a_change_by_someone_else_is_refused_saying_who_may() -> None:
    with pytest.raises(NotAllowed) as found:
        update_item(TEMPLATE, Caller("bob"), {"summary": "x"}, None, LATER, DEFAULT_LIMITS)
    assert str(found.value) == "Only the author (alice) or an admin may change item i1."
    with pytest.raises(NotAllowed) as found:
        update_item(DATA, ALICE, {}, ("approved", ""), LATER, DEFAULT_LIMITS)
    assert str(found.value) == "Only an admin approves or rejects items; leave status out of your change."
