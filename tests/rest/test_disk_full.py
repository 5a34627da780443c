"""A write refused for want of space is a 507 naming what is full, never a 500.

The database's refusal is SQLite's own (``max_page_count`` makes it full without a small
filesystem); the bus's refusals are JetStream's answers as nats-py raises them, and the silence
of a stream whose disk is full (tests/e2e/test_disk_full.py fills a real filesystem).
"""

from __future__ import annotations

import time
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import nats.errors
import nats.js.errors
import pytest
from aiohttp.test_utils import TestClient, TestServer
from sqlalchemy import select
from sqlalchemy.exc import SQLAlchemyError

from libs.backbone.errors import TemporaryError
from libs.backbone.natsserver import EmbeddedNats
from libs.protocol.subjects import JOBS_STREAM
from services.rest.adapters import bus as rest_bus_module
from services.rest.adapters import jobs_store
from services.rest.adapters.tables import jobs
from services.rest.adapters.unpublished import GRACE_SECONDS, repair_once
from services.rest.app import build_app
from services.rest.keys import BUS, ENGINE, JOB_INSERTER
from services.rest.routes import availability
from services.rest.settings import RestSettings
from tests.rest.conftest import ADMIN_PASSWORD
from tests.rest.jobs import job_yaml

pytestmark = pytest.mark.timeout(60)
YAML = {"Content-Type": "text/yaml"}
UNLIMITED_PAGES = 1073741823


@pytest.fixture
async def api(tmp_path: Path, nats_server: EmbeddedNats) -> AsyncIterator[TestClient[Any, Any]]:
    settings = RestSettings(
        nats_url=nats_server.url,
        data_dir=tmp_path / "data",
        database_url=f"sqlite+aiosqlite:///{tmp_path / 'rest.db'}",
        admin_password=ADMIN_PASSWORD,
        log_format="console",
        nats_store_dir=nats_server.store_dir,
    )
    client: TestClient[Any, Any] = TestClient(TestServer(build_app(settings)))
    await client.start_server()
    try:
        login = await client.post(
            "/api/v2/authn/basic/login", data={"username": "admin", "password": ADMIN_PASSWORD}
        )
        client.session.headers["Authorization"] = f"Bearer {(await login.json())['token']}"
        yield client
    finally:
        await client.close()


async def set_max_pages(api: TestClient[Any, Any], pages: int | None) -> None:
    """The writer's database may grow no further than ``pages`` (None: as far as it has now)."""
    async with api.app[ENGINE].connect() as conn:  # the writer's one connection (libs/backbone/sql.py)
        if pages is None:
            pages = (await conn.exec_driver_sql("PRAGMA page_count")).scalar_one()
        await conn.exec_driver_sql(f"PRAGMA max_page_count = {pages}")


async def listed(api: TestClient[Any, Any]) -> list[str]:
    return [job["name"] for job in await (await api.get("/api/v2/jobs")).json()]


async def test_a_submission_the_database_has_no_room_for_is_refused_with_507_naming_the_database(
    api: TestClient[Any, Any],
) -> None:
    await set_max_pages(api, None)
    answers = []
    for index in range(200):
        response = await api.post("/api/v2/jobs", data=job_yaml(f"job{index}"), headers=YAML)
        answers.append(response.status)
        if response.status != 202:
            break
    assert answers[-1] == 507, answers
    assert set(answers[:-1]) <= {202}, answers
    body = await response.json()
    assert body["code"] == "InsufficientStorageError"
    assert body["message"] == (
        "Submitting the job was not done: the database has no space left on device "
        "(database or disk is full); nothing was changed."
    )
    assert "Free space" in body["hint"]
    refused = f"job{len(answers) - 1}"
    assert refused not in await listed(api)

    # Other writes meet the same full database in the error boundary: 507 too, not a 500.
    for index in range(200):
        user = await api.post("/api/v2/users", json={"username": f"user{index}", "password": "user-secret-1"})
        if user.status != 201:
            break
    assert user.status == 507, await user.text()
    assert (await user.json())["message"] == (
        "POST /api/v2/users was not done: "
        "the database has no space left on device (database or disk is full)."
    )

    await set_max_pages(api, UNLIMITED_PAGES)  # space freed
    again = await api.post("/api/v2/jobs", data=job_yaml(refused), headers=YAML)
    assert again.status == 202, await again.text()


def jetstream_refusal(code: int, err_code: int, description: str) -> Exception:
    """JetStream's refusal of a publish as nats-py raises it (APIError.from_error's classes)."""
    kind = nats.js.errors.ServiceUnavailableError if code == 503 else nats.js.errors.ServerError
    return kind(code=code, err_code=err_code, description=description)


def unconfirmed() -> Exception:
    """What nats-py says of a stream that does not answer (its disk full): a timeout."""
    try:
        raise nats.errors.TimeoutError
    except nats.errors.TimeoutError as timeout:
        try:
            raise TemporaryError(
                "publish to pai.job.x.job.submitted not confirmed (TimeoutError)"
            ) from timeout
        except TemporaryError as error:
            return error


@pytest.mark.parametrize(
    ("refusal", "store_full", "said"),
    [
        pytest.param(
            lambda: jetstream_refusal(500, 10047, "insufficient storage resources available"),
            False,
            "insufficient storage resources available (JetStream error 10047)",
            id="jetstream-insufficient-storage",
        ),
        pytest.param(
            lambda: jetstream_refusal(503, 10023, "insufficient resources"),
            False,
            "insufficient resources (JetStream error 10023)",
            id="jetstream-insufficient-resources",
        ),
        pytest.param(
            lambda: jetstream_refusal(503, 10077, "write msgs/1.blk: no space left on device"),
            False,
            "write msgs/1.blk: no space left on device (JetStream error 10077)",
            id="a-stream-store-failure-for-want-of-space",
        ),
        pytest.param(unconfirmed, True, "its store's filesystem is full", id="unanswered-with-its-disk-full"),
    ],
)
async def test_a_submission_the_bus_has_no_room_for_is_refused_with_507_naming_the_bus(
    api: TestClient[Any, Any],
    monkeypatch: pytest.MonkeyPatch,
    refusal: Any,
    store_full: bool,
    said: str,
) -> None:
    async def refuse(*_args: Any, **_kwargs: Any) -> None:
        raise refusal()

    monkeypatch.setattr(rest_bus_module, "publish_event", refuse)
    monkeypatch.setattr(availability, "filesystem_full", lambda path: store_full and path.name == "nats")
    response = await api.post("/api/v2/jobs", data=job_yaml("refused"), headers=YAML)
    body = await response.json()
    assert response.status == 507, body
    assert body["code"] == "InsufficientStorageError"
    assert body["message"].startswith(
        f"Submitting the job was not done: the message bus has no space left on device ({said}"
    )
    assert body["message"].endswith("; nothing was changed.")
    assert "Retry-After" not in response.headers
    assert "refused" not in await listed(api)


async def test_an_unconfirmed_publish_with_room_on_the_bus_disk_is_still_a_503(
    api: TestClient[Any, Any], monkeypatch: pytest.MonkeyPatch
) -> None:
    async def refuse(*_args: Any, **_kwargs: Any) -> None:
        raise unconfirmed()

    monkeypatch.setattr(rest_bus_module, "publish_event", refuse)
    response = await api.post("/api/v2/jobs", data=job_yaml("unconfirmed"), headers=YAML)
    body = await response.json()
    assert response.status == 503, body
    assert "the message bus did not confirm it" in body["message"]
    assert response.headers["Retry-After"] == "2"


async def test_a_refused_submissions_row_the_full_database_kept_is_deleted_later_and_never_published(
    api: TestClient[Any, Any], monkeypatch: pytest.MonkeyPatch
) -> None:
    async def refuse(*_args: Any, **_kwargs: Any) -> None:
        raise jetstream_refusal(500, 10047, "insufficient storage resources available")

    delete_job = jobs_store.delete_job

    async def full_once(*_args: Any, **_kwargs: Any) -> None:
        monkeypatch.setattr(jobs_store, "delete_job", delete_job)
        raise SQLAlchemyError("database or disk is full")

    monkeypatch.setattr(rest_bus_module, "publish_event", refuse)
    monkeypatch.setattr(jobs_store, "delete_job", full_once)
    response = await api.post("/api/v2/jobs", data=job_yaml("kept"), headers=YAML)
    assert response.status == 507, await response.text()
    inserter = api.app[JOB_INSERTER]
    [job_id] = inserter.withdrawn
    monkeypatch.undo()

    # The repair loop finds it old enough to publish; it deletes it instead.
    engine = api.app[ENGINE]
    async with engine.begin() as conn:
        old = int((time.time() - GRACE_SECONDS - 5) * 1000)
        await conn.execute(jobs.update().where(jobs.c.id == job_id).values(submission_time=old))
    js = api.app[BUS].bus.js
    before = (await js.stream_info(JOBS_STREAM)).state.messages
    assert await repair_once(engine, api.app[BUS], set(), inserter.withdrawn) == 0
    assert inserter.withdrawn == set()
    async with engine.connect() as conn:
        assert (await conn.execute(select(jobs.c.id).where(jobs.c.id == job_id))).first() is None
    assert (await js.stream_info(JOBS_STREAM)).state.messages == before
