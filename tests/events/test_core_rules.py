"""The gateway's pure rules as a subscriber meets them: each refused filter or cursor with its
field and whole message, the streams a subscription follows, who receives a marketplace event,
and what the directory learns (and ignores) from the events it routes."""

from __future__ import annotations

import pytest

from services.events.core import sse
from services.events.core.cursors import parse_cursor
from services.events.core.directory import JobDirectory, Located, locate
from services.events.core.filters import (
    EVENT_TYPES,
    Caller,
    EventFilter,
    FilterError,
    ItemInfo,
    JobInfo,
    parse_filter,
    parse_types,
    refused_filter,
    wanted,
)

ALICE, BOB, ADMIN = Caller("alice"), Caller("bob"), Caller("admin", admin=True)
ALICES_JOB = JobInfo("alice", "train", "default")
THREE = ("jobs", "nodes", "alerts")


def refusal(query: dict[str, object]) -> tuple[str, str]:
    with pytest.raises(FilterError) as caught:
        parse_filter(query)
    assert str(caught.value) == caught.value.message
    return caught.value.field, caught.value.message


# Filters -------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("query", "field", "message"),
    [
        ({"vc": 3}, "vc", "vc must be a string."),
        ({"username": ["alice"]}, "username", "username must be a string."),
        ({"vc": "a\rb"}, "vc", "vc must be printable text."),
        ({"job": "alice~t\x00"}, "job", "job must be printable text."),
        ({"job": "alice"}, "job", "job must be USER~NAME (e.g. alice~train-1), got 'alice'."),
        ({"job": "alice~"}, "job", "job must be USER~NAME (e.g. alice~train-1), got 'alice~'."),
        ({"types": 7}, "types", "types must be a comma-separated list of event types."),
        ({"types": ["job.completed", 7]}, "types", "types must be a comma-separated list of event types."),
        (
            {"types": "job.done,task.gone"},
            "types",
            "types: unknown event type 'job.done', 'task.gone'; the catalog's types are "
            f"{', '.join(sorted(EVENT_TYPES))}.",
        ),
        (
            {"types": "marketplace.item.created,marketplace.item.approved", "username": "alice"},
            "types",
            "types: 'marketplace.item.approved', 'marketplace.item.created' are about marketplace "
            "items, not jobs: they cannot be combined with job, username or vc (open a separate "
            "subscription for them).",
        ),
    ],
    ids=[
        "vc-not-text",
        "username-a-list",
        "carriage-return",
        "nul",
        "job-without-tilde",
        "job-without-name",
        "types-a-number",
        "types-list-with-a-number",
        "unknown-types",
        "marketplace-with-a-job-filter",
    ],
)
def test_a_refused_filter_names_its_field_and_the_fix(
    query: dict[str, object], field: str, message: str
) -> None:
    assert refusal(query) == (field, message)


def test_empty_filters_match_everything_and_types_come_as_text_or_a_list() -> None:
    assert parse_filter({"job": "", "username": None, "vc": "", "types": ""}) == EventFilter()
    assert parse_types(" job.completed , ,task.started ") == frozenset({"job.completed", "task.started"})
    assert parse_types([" job.completed", "task.started "]) == frozenset({"job.completed", "task.started"})
    assert parse_types([]) == frozenset()
    assert parse_filter({"job": "alice~a~b"}).job == ("alice", "a~b")


@pytest.mark.parametrize(
    ("query", "streams"),
    [
        ({}, ("jobs", "nodes", "alerts")),
        ({"username": "alice"}, ("jobs",)),
        ({"vc": "gpu"}, ("jobs",)),
        ({"types": "node.reported,alert.fired"}, ("nodes", "alerts")),
        ({"types": "node.reported,alert.fired", "username": "alice"}, ("alerts",)),
        ({"types": "node.reported", "vc": "gpu"}, ("jobs",)),
        ({"types": "marketplace.item.created"}, ("marketplace",)),
        ({"types": "marketplace.item.created,task.started,node.lost"}, ("jobs", "nodes", "marketplace")),
    ],
    ids=[
        "everything",
        "a-user-s-jobs",
        "a-vc-s-jobs",
        "nodes-and-alerts",
        "about-jobs-never-nodes",
        "nothing-left-follows-jobs",
        "marketplace",
        "three-kinds-in-order",
    ],
)
def test_a_subscription_follows_the_streams_its_filters_can_match(
    query: dict[str, str], streams: tuple[str, ...]
) -> None:
    assert parse_filter(query).streams() == streams


@pytest.mark.parametrize(
    ("caller", "item", "seen"),
    [
        (BOB, ItemInfo("alice", public=True), True),
        (BOB, ItemInfo("alice"), False),
        (ALICE, ItemInfo("alice"), True),
        (ADMIN, ItemInfo("alice"), True),
        (BOB, None, False),
        (ADMIN, None, True),
    ],
    ids=[
        "public-to-all",
        "private-hidden",
        "author-sees-own",
        "admin-sees-all",
        "unknown-item",
        "admin-unknown",
    ],
)
def test_a_marketplace_event_goes_to_those_who_may_see_its_item(
    caller: Caller, item: ItemInfo | None, seen: bool
) -> None:
    assert wanted(caller, EventFilter(), "marketplace.item.updated", None, item) is seen


def test_a_marketplace_event_passes_only_the_types_asked_for() -> None:
    public = ItemInfo("alice", public=True)
    asked = parse_filter({"types": "marketplace.item.approved"})
    assert wanted(BOB, asked, "marketplace.item.approved", None, public) is True
    assert wanted(BOB, asked, "marketplace.item.created", None, public) is False
    # The item's author decides, not a job: a job owned by the caller does not open it.
    assert (
        wanted(BOB, EventFilter(), "marketplace.item.created", JobInfo("bob", "t", "v"), ItemInfo("alice"))
        is False
    )


def test_a_job_event_is_judged_by_its_own_kind() -> None:
    assert wanted(ALICE, EventFilter(), "job.completed", ALICES_JOB) is True
    assert wanted(ALICE, EventFilter(), "node.reported", ALICES_JOB) is False
    assert wanted(ALICE, parse_filter({"types": "task.started"}), "task.started", ALICES_JOB) is True


@pytest.mark.parametrize(
    ("caller", "query", "reason"),
    [
        (
            ALICE,
            {"job": "bob~train"},
            "job names bob's jobs: you receive the events of your own jobs only (alice's; an admin "
            "receives everyone's).",
        ),
        (
            ALICE,
            {"username": "bob"},
            "username names bob's jobs: you receive the events of your own jobs only (alice's; an "
            "admin receives everyone's).",
        ),
        (
            ALICE,
            {"job": "alice~train", "username": "bob"},
            "username names bob's jobs: you receive the events of your own jobs only (alice's; an "
            "admin receives everyone's).",
        ),
        (ALICE, {"job": "alice~train", "username": "alice"}, None),
        (ALICE, {"vc": "gpu"}, None),
        (ADMIN, {"job": "bob~train", "username": "bob"}, None),
    ],
    ids=["another-s-job", "another-user", "own-job-another-user", "own", "a-vc", "admin"],
)
def test_a_filter_naming_another_user_s_jobs_is_refused_with_the_reason(
    caller: Caller, query: dict[str, str], reason: str | None
) -> None:
    assert refused_filter(caller, parse_filter(query)) == reason


def test_a_filter_reads_back_as_the_query_it_was_parsed_from() -> None:
    query = {"job": "alice~train", "username": "alice", "vc": "gpu", "types": "task.started,job.completed"}
    assert parse_filter(query).to_query() == {
        "job": "alice~train",
        "username": "alice",
        "vc": "gpu",
        "types": "job.completed,task.started",
    }
    assert EventFilter().to_query() == {}


# Cursors -------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "streams", "message"),
    [
        ("x", ("jobs",), "since must be an integer (an event's id), got 'x'."),
        ("1-2", ("jobs",), "since must be an integer (an event's id), got '1-2'."),
        ("1-2", THREE, "since must be an integer or 3 integers joined by '-' (an event's id), got '1-2'."),
        (
            "5",
            THREE,
            "since '5' is one number, but this subscription follows 3 streams (jobs, nodes, alerts): "
            "resume from an event's id, 3 numbers joined by '-' (N-N-N, e.g. 120-4-7), or 0 for the "
            "beginning.",
        ),
        (
            "5",
            ("jobs", "alerts"),
            "since '5' is one number, but this subscription follows 2 streams (jobs, alerts): "
            "resume from an event's id, 2 numbers joined by '-' (N-N, e.g. 120-4), or 0 for the "
            "beginning.",
        ),
    ],
    ids=["not-a-number", "two-for-one-stream", "two-for-three", "one-for-three", "one-for-two"],
)
def test_a_refused_cursor_says_what_a_resume_id_looks_like(
    text: str, streams: tuple[str, ...], message: str
) -> None:
    with pytest.raises(FilterError) as caught:
        parse_cursor(text, streams, "since")
    assert (caught.value.field, caught.value.message) == ("since", message)


def test_a_cursor_of_one_stream_is_a_plain_number_and_unfollowed_streams_read_zero() -> None:
    cursor = parse_cursor(" 42 ", ("jobs",), "Last-Event-ID")
    assert cursor.text() == "42"
    assert (cursor.get("jobs"), cursor.get("nodes")) == (42, 0)
    several = parse_cursor("7-0-3", THREE, "since")
    assert [several.get(s) for s in THREE] == [7, 0, 3]
    assert several.advanced("alerts", 8).advanced("jobs", 9).text() == "9-0-8"


# The directory -------------------------------------------------------------------------------


def test_events_name_their_type_and_job_and_node_events_belong_to_no_job() -> None:
    directory = JobDirectory()
    assert locate({}, directory) == Located("", None)
    assert locate({"type": "node.reported", "job_id": "j1"}, directory) == Located("node.reported", None)
    assert locate({"type": "task.started", "job_id": 7}, directory) == Located("task.started", None)
    assert locate({"type": "task.started", "job_id": "j9"}, directory) == Located("task.started", "j9")
    assert len(directory) == 0
    assert directory.job(None) is None
    assert directory.job("j9") is None


def test_only_a_job_s_submission_teaches_its_owner() -> None:
    directory = JobDirectory()
    submitted: dict[str, object] = {
        "type": "job.submitted",
        "job_id": "j1",
        "user": "alice",
        "name": "t",
        "virtual_cluster": "vc",
    }
    locate(submitted, directory)
    locate({"type": "task.started", "job_id": "j1", "user": "bob"}, directory)
    locate({"type": "job.completed", "job_id": "j2"}, directory)
    locate({**submitted, "job_id": None}, directory)
    assert len(directory) == 1
    assert directory.job("j1") == JobInfo("alice", "t", "vc")
    assert directory.job_id("alice", "t") == "j1"
    assert directory.job_id("bob", "t") is None


def test_an_alert_not_about_a_known_job_belongs_to_none() -> None:
    directory = JobDirectory()
    assert locate({"type": "alert.resolved", "alert_id": "a1"}, directory) == Located("alert.resolved", None)
    locate({"type": "alert.fired", "alert_id": "a2", "job_id": "j1"}, directory)
    assert locate({"type": "alert.resolved", "alert_id": "a1"}, directory).job_id is None
    assert locate({"type": "alert.resolved", "alert_id": "a2"}, directory).job_id == "j1"


def item_event(directory: JobDirectory, event: str, sequence: int = 0, **data: object) -> Located:
    return locate({"type": f"marketplace.item.{event}", "item_id": "i1", **data}, directory, sequence)


def test_a_marketplace_event_is_located_by_its_item() -> None:
    directory = JobDirectory()
    assert item_event(directory, "created", author="alice") == Located("marketplace.item.created", None, "i1")
    for missing in (None, "", 5):
        found = locate({"type": "marketplace.item.created", "item_id": missing, "author": "bob"}, directory)
        assert found == Located("marketplace.item.created", None)
    assert directory.item("i1") == ItemInfo("alice", public=False)
    for unknown in ("i2", None, ""):
        assert directory.item(unknown) is None


def test_an_item_is_public_when_created_public_and_approved() -> None:
    directory = JobDirectory()
    item_event(directory, "created", 1, author="alice", visibility="public", status="approved")
    assert directory.item("i1") == ItemInfo("alice", public=True)
    for visibility, status in (
        ("public", "pending"),
        ("group", "approved"),
        ("", "approved"),
        ("public", ""),
    ):
        other = JobDirectory()
        item_event(other, "created", 1, author="alice", visibility=visibility, status=status)
        assert other.item("i1") == ItemInfo("alice", public=False), (visibility, status)


def test_an_item_s_status_follows_its_latest_event() -> None:
    directory = JobDirectory()
    item_event(directory, "created", 1, author="alice", visibility="public", status="pending")
    assert directory.item("i1") == ItemInfo("alice", public=False)
    item_event(directory, "approved", 2)
    assert directory.item("i1") == ItemInfo("alice", public=True)
    item_event(directory, "updated", 3, status="pending", changed=["description"])
    assert directory.item("i1") == ItemInfo("alice", public=False)
    item_event(directory, "updated", 4, status="approved", changed=["description"])
    assert directory.item("i1") == ItemInfo("alice", public=True)
    item_event(directory, "rejected", 5)
    assert directory.item("i1") == ItemInfo("alice", public=False)
    item_event(directory, "approved", 6, author="carol")
    assert directory.item("i1") == ItemInfo("carol", public=True)
    item_event(directory, "starred", 7)
    assert directory.item("i1") == ItemInfo("carol", public=True)  # a star changes nothing
    item_event(directory, "updated", 8)
    assert directory.item("i1") == ItemInfo("carol", public=False)  # an update naming no status


@pytest.mark.parametrize("field", ["isPrivate", "isPublic", "groupList"])
def test_a_change_of_audience_makes_an_item_not_public_until_created_again(field: str) -> None:
    directory = JobDirectory()
    item_event(directory, "created", 1, author="alice", visibility="public", status="approved")
    item_event(directory, "updated", 2, status="approved", changed=["name", field])
    assert directory.item("i1") == ItemInfo("alice", public=False)
    item_event(directory, "approved", 3)
    assert directory.item("i1") == ItemInfo("alice", public=False)


def test_a_changed_list_that_is_not_a_list_keeps_the_audience() -> None:
    directory = JobDirectory()
    item_event(directory, "created", 1, author="alice", visibility="public", status="approved")
    item_event(directory, "updated", 2, status="approved", changed="groupList")
    assert directory.item("i1") == ItemInfo("alice", public=True)


def test_a_replayed_older_event_changes_nothing_but_an_unknown_sequence_applies() -> None:
    directory = JobDirectory()
    item_event(directory, "created", 5, author="alice", visibility="public", status="approved")
    item_event(directory, "rejected", 4)
    item_event(directory, "rejected", 5)
    assert directory.item("i1") == ItemInfo("alice", public=True)
    item_event(directory, "rejected", 0)
    assert directory.item("i1") == ItemInfo("alice", public=False)
    item_event(directory, "approved", 5)  # still older than what is known (5), though applied at 0
    assert directory.item("i1") == ItemInfo("alice", public=False)
    item_event(directory, "approved", 6)
    assert directory.item("i1") == ItemInfo("alice", public=True)


def test_an_item_first_known_from_a_later_event_has_its_author_and_no_audience() -> None:
    directory = JobDirectory()
    item_event(directory, "approved", 3, author="bob")
    assert directory.item("i1") == ItemInfo("bob", public=False)
    item_event(directory, "approved", 2, author="carol")  # older: ignored
    assert directory.item("i1") == ItemInfo("bob", public=False)
    unnamed = JobDirectory()
    item_event(unnamed, "approved", 1)
    assert unnamed.item("i1") == ItemInfo("", public=False)


def test_an_sse_message_drops_carriage_returns() -> None:
    assert sse.message("1-2", "x", b"a\r\nb\r") == b"id: 1-2\nevent: x\ndata: a\ndata: b\n\n"


def test_an_item_first_seen_at_an_unknown_sequence_takes_the_next_numbered_event() -> None:
    directory = JobDirectory()
    item_event(directory, "created", 0, author="alice", visibility="public", status="pending")
    item_event(directory, "approved", 1)
    assert directory.item("i1") == ItemInfo("alice", public=True)


def test_a_username_filter_passes_only_that_user_s_jobs_and_text_may_hold_any_letter() -> None:
    assert wanted(ADMIN, parse_filter({"username": "bob"}), "job.completed", ALICES_JOB) is False
    assert wanted(ADMIN, parse_filter({"username": "alice"}), "job.completed", ALICES_JOB) is True
    assert parse_filter({"vc": "XL"}).vc == "XL"
