"""Job alerts addressed to the owner's registered e-mail: the `user_email` label and its source.

The engine labels job-scoped series with the address it is given for the owner (none when
there is none, and then `recipients` drops the unresolved `to`); the watch keeps that mapping
in step with KV `PAI_USER_CONTACTS` on a real nats-server.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator

import pytest
from nats.js.kv import KeyValue

from libs.alerting.config import EmailConfig, load_config
from libs.backbone.connecting import Bus
from libs.backbone.provisioning import ensure_kv
from libs.backbone.topology import USER_CONTACTS
from libs.protocol.events import JobCompleted, JobPending, JobScheduled, JobState, JobSubmitted
from services.alerter.adapters.contacts import ContactsWatch, parse_contact, usable_address
from services.alerter.adapters.email import recipients
from services.alerter.core.engine import AlertEngine
from services.alerter.core.observing import JOB_PENDING
from services.alerter.core.timing import FakeClock
from tests.support.jobs import job_model
from tests.support.waiting import eventually, polled

NOTIFY = """
rules:
  - alert: JobStatusChanged
    expr: pai_job_status_change{notify="true"} > 0
    labels: {severity: info, type: job_notification}
route:
  receiver: job-owner
  group_by: [job_id, state, attempt]
  group_wait: 0s
receivers: [{name: job-owner}]
"""
TO_OWNER = EmailConfig.model_validate({"to": "$user_email"})
ASKED = {"extras": {"jobStatusChangeNotification": {"failed": True}}}


def _fail(engine: AlertEngine, job_id: str, user: str, now: float) -> None:
    engine.observe(
        JobSubmitted(
            job_id=job_id, user=user, name=job_id, virtual_cluster="default", config=job_model(ASKED)
        ),
        now,
    )
    engine.observe(JobCompleted(job_id=job_id, attempt=0, state=JobState.FAILED, exit_code=1), now)


def test_a_failed_job_of_an_owner_with_an_address_is_addressed_to_it() -> None:
    clock = FakeClock()
    engine = AlertEngine(load_config(NOTIFY), contacts={"alice": "alice@corp.example"})
    _fail(engine, "j1", "alice", clock.now())
    [notification] = engine.step(clock.now()).notifications
    assert notification.firing[0].labels["user_email"] == "alice@corp.example"
    assert recipients(TO_OWNER, notification) == ["alice@corp.example"]


def test_an_owner_without_an_address_gets_no_label_and_no_recipient() -> None:
    clock = FakeClock()
    engine = AlertEngine(load_config(NOTIFY), contacts={"alice": "alice@corp.example"})
    _fail(engine, "j2", "bob", clock.now())
    [notification] = engine.step(clock.now()).notifications
    assert "user_email" not in notification.firing[0].labels
    assert notification.firing[0].labels["user"] == "bob"
    assert recipients(TO_OWNER, notification) == []  # "$user_email" left unresolved: dropped
    mixed = EmailConfig.model_validate({"to": "$user_email, ops@corp.example"})
    assert recipients(mixed, notification) == ["ops@corp.example"]


def test_a_changed_address_applies_to_the_next_notification() -> None:
    clock = FakeClock()
    contacts = {"alice": "old@corp.example"}
    engine = AlertEngine(load_config(NOTIFY), contacts=contacts)
    _fail(engine, "j1", "alice", clock.now())
    first = engine.step(clock.now()).notifications
    contacts["alice"] = "new@corp.example"
    _fail(engine, "j2", "alice", clock.advance(60))
    second = engine.step(clock.now()).notifications
    assert [recipients(TO_OWNER, n) for n in first + second] == [["old@corp.example"], ["new@corp.example"]]


def test_a_waiting_job_keeps_the_labels_it_began_waiting_with() -> None:
    clock = FakeClock()
    contacts = {"alice": "old@corp.example"}
    engine = AlertEngine(load_config(NOTIFY), contacts=contacts)
    engine.observe(
        JobSubmitted(job_id="j1", user="alice", name="n", virtual_cluster="default", config=job_model({})),
        clock.now(),
    )
    contacts["alice"] = "new@corp.example"
    engine.observe(JobPending(job_id="j1", reason="no free cells"), clock.advance(60))
    pending = [s for s in engine.store.samples(clock.now()) if s.name == JOB_PENDING]
    assert [s.labels.get("user_email") for s in pending] == ["old@corp.example"]
    # Once placed and waiting again (a retry), it waits under the address then in force.
    engine.observe(JobScheduled(job_id="j1", attempt=0, placements=()), clock.advance(1))
    engine.observe(JobPending(job_id="j1", reason="retry"), clock.advance(1))
    pending = [s for s in engine.store.samples(clock.now()) if s.name == JOB_PENDING]
    assert [s.labels.get("user_email") for s in pending] == ["new@corp.example"]


@pytest.mark.parametrize(
    ("text", "usable"),
    [
        ("alice@corp.example", "alice@corp.example"),
        ("  alice@corp.example\n", "alice@corp.example"),
        ("", None),
        ("alice", None),
        ("a@x.example, victim@y.example", None),
        ("a@x.example victim@y.example", None),
        ("$user@x.example", None),
        ("Alice <a@x.example>", None),
    ],
    ids=["plain", "padded", "empty", "no at", "a list", "two words", "a template", "a display name"],
)
def test_only_one_plain_address_is_usable(text: str, usable: str | None) -> None:
    assert usable_address(text) == usable


def test_an_unreadable_entry_names_no_contact() -> None:
    assert parse_contact(b"not json") is None
    assert parse_contact(b'["alice"]') is None
    assert parse_contact(b'{"username": "alice"}') is None
    assert parse_contact(b'{"username": "alice", "email": "a@x.example"}') == ("alice", "a@x.example")


def _entry(username: str, email: str) -> bytes:
    return json.dumps({"username": username, "email": email}).encode()


@pytest.fixture
async def contacts_kv(bus: Bus) -> KeyValue:
    return await ensure_kv(bus.js, USER_CONTACTS)


@pytest.fixture
async def watch(bus: Bus, contacts_kv: KeyValue) -> AsyncIterator[ContactsWatch]:
    await contacts_kv.put("alice", _entry("alice", "alice@corp.example"))
    await contacts_kv.put("gone", _entry("gone", "gone@corp.example"))
    await contacts_kv.delete("gone")
    await contacts_kv.put("=e799b0", _entry("\u7530", "tian@corp.example"))
    following = ContactsWatch(lambda: ensure_kv(bus.js, USER_CONTACTS), retry_after=0.05)
    task = asyncio.create_task(following.run())
    try:
        yield following
    finally:
        await following.close()
        await asyncio.wait_for(task, timeout=10)


async def test_the_watch_starts_from_the_current_entries(watch: ContactsWatch) -> None:
    await asyncio.wait_for(watch.ready.wait(), timeout=10)
    assert watch.emails == {"alice": "alice@corp.example", "\u7530": "tian@corp.example"}


async def test_the_watch_follows_changes_and_deletions(watch: ContactsWatch, contacts_kv: KeyValue) -> None:
    await asyncio.wait_for(watch.ready.wait(), timeout=10)
    await contacts_kv.put("alice", _entry("alice", "alice@home.example"))
    await contacts_kv.put("bob", _entry("bob", "bob@corp.example"))
    await contacts_kv.delete("=e799b0")
    expected = {"alice": "alice@home.example", "bob": "bob@corp.example"}
    await eventually(polled(lambda: dict(watch.emails)), lambda emails: emails == expected)
    # An entry that no longer holds a usable address drops the user rather than keeping the old one.
    await contacts_kv.put("bob", _entry("bob", "bob@corp.example, someone@else.example"))
    await eventually(polled(lambda: dict(watch.emails)), lambda emails: "bob" not in emails)
    assert watch.emails == {"alice": "alice@home.example"}


async def test_closing_ends_the_watch_even_before_it_opened(bus: Bus) -> None:
    following = ContactsWatch(lambda: ensure_kv(bus.js, USER_CONTACTS))
    task = asyncio.create_task(following.run())
    await following.close()
    await asyncio.wait_for(task, timeout=10)
    assert following.closed
