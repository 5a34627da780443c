"""Users' addresses from the REST API to the alerter's mail, over KV `PAI_USER_CONTACTS`.

A user registered with an e-mail through the API is mailed at it when a job of theirs that
asked to be told fails; the address changed through the API is used for the next mail; a
deleted user is mailed nothing. The copy in KV is repaired at the next start of the service
when a crash left it behind the users table.
"""

from __future__ import annotations

import json
from email import message_from_bytes
from typing import Any
from urllib.parse import parse_qs, urlsplit

import pytest
from aiohttp.test_utils import TestClient, TestServer
from nats.js.errors import KeyNotFoundError
from nats.js.kv import KeyValue

from libs.backbone.connecting import Bus
from libs.backbone.topology import USER_CONTACTS, publish_event
from libs.protocol.events import JobCompleted, JobState
from services.alerter.core.timing import FakeClock
from services.rest.adapters.contacts import contact_key, contact_value
from services.rest.app import build_app
from services.rest.settings import RestSettings
from tests.alerter.support import running_alerter, smtp_server
from tests.rest.fake_idp import CLIENT_ID, CLIENT_SECRET, FakeIdp
from tests.support.waiting import eventually, polled

Client = TestClient[Any, Any]
YAML = {"Content-Type": "text/yaml"}

NOTIFY_OWNER = """
rules:
  - alert: JobStatusChanged
    expr: pai_job_status_change{notify="true"} > 0
    labels: {severity: info, type: job_notification}
    annotations: {summary: "job $job_name of $user is $state"}
route:
  receiver: job-owner
  group_by: [job_id, state, attempt]
  group_wait: 0s
receivers:
  - name: job-owner
    email_configs:
      - to: "$user_email"
        smarthost: "127.0.0.1:SMTP_PORT"
        subject: "[pai] job $job_name $state"
"""


def told_job(name: str) -> str:
    return f"""protocolVersion: 2
name: {name}
type: job
prerequisites:
  - {{name: image, type: dockerimage, uri: python:3.11}}
taskRoles:
  worker:
    instances: 1
    dockerImage: image
    resourcePerInstance: {{cpu: 1, memoryMB: 512, gpu: 0}}
    commands: [echo hello]
extras:
  jobStatusChangeNotification: {{failed: true}}
"""


async def _kv(bus: Bus) -> KeyValue:
    return await bus.js.key_value(USER_CONTACTS.bucket)


async def stored(bus: Bus, username: str) -> dict[str, Any] | None:
    """The user's entry in the bucket as JSON; None when there is none."""
    try:
        entry = await (await _kv(bus)).get(contact_key(username))
    except KeyNotFoundError:
        return None
    found: dict[str, Any] | None = json.loads(entry.value) if entry.value else None
    return found


async def _login(api: Client, username: str, password: str) -> dict[str, str]:
    response = await api.post("/api/v2/authn/basic/login", data={"username": username, "password": password})
    assert response.status == 200, await response.text()
    return {"Authorization": f"Bearer {(await response.json())['token']}"}


async def _submit(api: Client, headers: dict[str, str], name: str) -> str:
    response = await api.post("/api/v2/jobs", data=told_job(name), headers={**headers, **YAML})
    assert response.status == 202, await response.text()
    job_id: str = (await response.json())["jobId"]
    return job_id


async def test_the_owner_is_mailed_at_the_address_registered_through_the_api(
    api: Client, admin_headers: dict[str, str], bus: Bus
) -> None:
    clock = FakeClock()
    async with (
        smtp_server() as (mailbox, port),
        running_alerter(bus, NOTIFY_OWNER.replace("SMTP_PORT", str(port)), clock) as alerter,
    ):

        async def fail(job_id: str) -> list[str]:
            """Complete the job FAILED and evaluate; the owners' addresses it fired for."""
            await publish_event(
                bus.js, JobCompleted(job_id=job_id, attempt=0, state=JobState.FAILED, exit_code=1)
            )
            # Seen completed (after its submission: one stream keeps their order).
            jobs = alerter.engine.observer.jobs
            await eventually(polled(lambda: job_id in jobs and jobs[job_id].forget_at is not None), bool)
            fired = (await alerter.tick()).fired
            assert [a.labels["job_id"] for a in fired] == [job_id]
            return [a.labels.get("user_email", "") for a in fired]

        user = {"username": "bob", "password": "bob-password", "email": "bob@corp.example"}
        created = await api.post("/api/v2/users", json=user, headers=admin_headers)
        assert created.status == 201, await created.text()
        bob = await _login(api, "bob", "bob-password")
        await eventually(polled(lambda: alerter.contacts.emails.get("bob")), lambda e: e is not None)
        first = await _submit(api, bob, "first")
        assert await fail(first) == ["bob@corp.example"]

        # Bob changes his address himself: the next mail goes there.
        patch = {"data": {"email": "bob@home.example"}, "patch": True}
        changed = await api.put("/api/v2/users/me", json=patch, headers=bob)
        assert changed.status == 201, await changed.text()
        await eventually(
            polled(lambda: alerter.contacts.emails.get("bob")), lambda e: e == "bob@home.example"
        )
        second = await _submit(api, bob, "second")
        assert await fail(second) == ["bob@home.example"]

        # Deleted, with a job still to end: the alert fires, no mail is sent.
        third = await _submit(api, bob, "third")
        gone = await api.delete("/api/v2/users/bob", headers=admin_headers)
        assert gone.status == 200, await gone.text()
        await eventually(polled(lambda: "bob" in alerter.contacts.emails), lambda known: not known)
        assert await stored(bus, "bob") is None
        assert await fail(third) == [""]
    assert [rcpt for rcpt, _ in mailbox.messages] == [["bob@corp.example"], ["bob@home.example"]]
    subjects = [message_from_bytes(content)["Subject"] for _, content in mailbox.messages]
    assert subjects == ["[pai] job first FAILED", "[pai] job second FAILED"]


async def test_every_write_of_a_user_is_copied_and_a_cleared_address_removes_the_entry(
    api: Client, admin_headers: dict[str, str], bus: Bus
) -> None:
    user = {"username": "carol.m", "password": "carol-password", "email": " carol@corp.example "}
    assert (await api.post("/api/v2/users", json=user, headers=admin_headers)).status == 201
    assert await stored(bus, "carol.m") == {"username": "carol.m", "email": "carol@corp.example"}
    update = {"data": {"username": "carol.m", "email": "carol@lab.example"}, "patch": True}
    assert (await api.put("/api/v2/users", json=update, headers=admin_headers)).status == 201
    assert await stored(bus, "carol.m") == {"username": "carol.m", "email": "carol@lab.example"}
    # A change of something else leaves the entry as it is.
    before = (await (await _kv(bus)).get("carol.m")).revision
    rights = {"data": {"username": "carol.m", "admin": False}, "patch": True}
    assert (await api.put("/api/v2/users", json=rights, headers=admin_headers)).status == 201
    assert (await (await _kv(bus)).get("carol.m")).revision == before
    cleared = {"data": {"username": "carol.m", "email": ""}, "patch": True}
    assert (await api.put("/api/v2/users", json=cleared, headers=admin_headers)).status == 201
    assert await stored(bus, "carol.m") is None
    # A name KV cannot hold as a key is stored under its hex form.
    other = {"username": "\u00e9lodie", "password": "elodie-password", "email": "e@corp.example"}
    assert (await api.post("/api/v2/users", json=other, headers=admin_headers)).status == 201
    assert contact_key("\u00e9lodie") == "=c3a96c6f646965"
    assert await stored(bus, "\u00e9lodie") == {"username": "\u00e9lodie", "email": "e@corp.example"}


@pytest.mark.parametrize(
    ("username", "key"),
    [
        ("alice", "alice"),
        ("john.doe", "john.doe"),
        ("a_b-c", "a_b-c"),
        (".hidden", "=2e68696464656e"),
        ("trailing.", "=747261696c696e672e"),
        ("two..dots", "=74776f2e2e646f7473"),
        ("\u7530", "=e794b0"),
    ],
    ids=["plain", "dotted", "underscore and dash", "leading dot", "trailing dot", "double dot", "non-ascii"],
)
def test_a_name_is_its_own_key_only_when_kv_allows_it(username: str, key: str) -> None:
    assert contact_key(username) == key


async def test_the_start_up_sync_repairs_what_a_crash_left_behind(
    rest_settings: RestSettings, bus: Bus
) -> None:
    async def start() -> Client:
        client: Client = TestClient(TestServer(build_app(rest_settings)))
        await client.start_server()
        return client

    api = await start()
    try:
        headers = await _login(api, "admin", rest_settings.admin_password or "")
        for name in ("dave", "erin"):
            user = {"username": name, "password": f"{name}-password", "email": f"{name}@corp.example"}
            assert (await api.post("/api/v2/users", json=user, headers=headers)).status == 201
        assert await stored(bus, "dave") is not None  # copied before the answer
    finally:
        await api.close()
    # What a crash between the SQL write and its copy leaves: an entry missing, one stale, one
    # for a user who no longer exists.
    kv = await _kv(bus)
    await kv.delete(contact_key("dave"))
    await kv.put(contact_key("erin"), contact_value("erin", "erin@old.example") or b"")
    await kv.put(contact_key("frank"), contact_value("frank", "frank@corp.example") or b"")
    api = await start()
    try:
        await eventually(
            lambda: _all(bus, "dave", "erin", "frank"),
            lambda found: found == [("dave", "dave@corp.example"), ("erin", "erin@corp.example"), None],
        )
    finally:
        await api.close()


async def _all(bus: Bus, *names: str) -> list[tuple[str, str] | None]:
    found: list[tuple[str, str] | None] = []
    for name in names:
        entry = await stored(bus, name)
        found.append(None if entry is None else (entry["username"], entry["email"]))
    return found


class TestOidcSignIn:
    @pytest.fixture
    def rest_settings(self, rest_settings: RestSettings, idp: FakeIdp) -> RestSettings:
        return rest_settings.model_copy(
            update={
                "oidc_issuer": idp.issuer,
                "oidc_client_id": CLIENT_ID,
                "oidc_client_secret": CLIENT_SECRET,
                "oidc_portal_url": "http://portal.example/",
            }
        )

    async def test_a_user_created_at_first_sign_in_has_the_providers_address_copied(
        self, api: Client, idp: FakeIdp, bus: Bus
    ) -> None:
        login = await api.get("/api/v2/authn/oidc/login", allow_redirects=False)
        approved = await api.session.get(login.headers["Location"], allow_redirects=False)
        done = await api.session.get(approved.headers["Location"], allow_redirects=False)
        assert done.status == 302, await done.text()
        # The portal is handed a one-time code (never the token or the user in the address).
        assert list(parse_qs(urlsplit(done.headers["Location"]).query)) == ["code"]
        assert await stored(bus, "dana") == {"username": "dana", "email": idp.email}
