"""Rate limits: OpenPAI's three limiters, each tripping at its figure, per user or per address."""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import pytest
from aiohttp.test_utils import TestClient, TestServer
from pydantic import ValidationError

from services.rest.adapters.accounts import create_user
from services.rest.adapters.auth import hash_password
from services.rest.app import build_app
from services.rest.keys import ENGINE
from services.rest.settings import RestSettings
from tests.rest.conftest import ADMIN_PASSWORD
from tests.rest.jobs import job_yaml
from tests.support.waiting import eventually

Client = TestClient[Any, Any]
YAML = {"Content-Type": "text/yaml"}
# Generous figures for the limits a test does not look at, so only the one under test trips.
ROOMY = {
    "rate_limit_api_per_min": 10_000,
    "rate_limit_list_job_per_min": 10_000,
    "rate_limit_submit_job_per_hour": 10_000,
}


@asynccontextmanager
async def serving(settings: RestSettings, **limits: Any) -> AsyncIterator[Client]:
    client: Client = TestClient(TestServer(build_app(settings.model_copy(update={**ROOMY, **limits}))))
    await client.start_server()
    try:
        yield client
    finally:
        await client.close()


async def login(api: Client, name: str, *, forwarded: str | None = None) -> dict[str, str]:
    extra = {"X-Forwarded-For": forwarded} if forwarded else {}
    if name == "admin":
        password = ADMIN_PASSWORD
    else:
        password = f"pw-{name}-123"
        await create_user(api.app[ENGINE], name, hash_password(password), admin=False)
    response = await api.post(
        "/api/v2/authn/basic/login", data={"username": name, "password": password}, headers=extra
    )
    assert response.status == 200, await response.text()
    return {"Authorization": f"Bearer {(await response.json())['token']}", **extra}


async def submit(api: Client, headers: dict[str, str], name: str) -> int:
    response = await api.post("/api/v2/jobs", data=job_yaml(name, gpu=0), headers={**headers, **YAML})
    return response.status


async def assert_refused(response: Any, *, limit: str, figure: str, setting: str, who: str) -> dict[str, Any]:
    assert response.status == 429, await response.text()
    body = await response.json()
    assert body["code"] == "TooManyRequestsError"
    assert body["message"] == "Too many requests, please try again later."
    message = body["hint"]
    for part in (limit, who, figure, setting):
        assert part in message, message
    retry = int(response.headers["Retry-After"])
    assert f"Retry in {retry} s" in message
    assert response.headers["RateLimit-Remaining"] == "0"
    assert response.headers["RateLimit-Reset"] == str(retry)
    return dict(body)


def test_the_defaults_are_openpais_and_its_variable_names_are_read(monkeypatch: pytest.MonkeyPatch) -> None:
    settings = RestSettings()
    assert (
        settings.rate_limit_api_per_min,
        settings.rate_limit_api_window_seconds,
        settings.rate_limit_list_job_per_min,
        settings.rate_limit_list_job_window_seconds,
        settings.rate_limit_submit_job_per_hour,
        settings.rate_limit_submit_job_window_seconds,
    ) == (600, 60, 60, 60, 60, 3600)
    monkeypatch.setenv("RATE_LIMIT_SUBMIT_JOB_PER_HOUR", "7")
    monkeypatch.setenv("RATE_LIMIT_LIST_JOB_PER_MIN", "8")
    monkeypatch.setenv("PAI_RATE_LIMIT_LIST_JOB_PER_MIN", "9")  # ours wins over OpenPAI's name
    settings = RestSettings()
    assert (settings.rate_limit_submit_job_per_hour, settings.rate_limit_list_job_per_min) == (7, 9)


@pytest.mark.parametrize(
    ("field", "value", "expected"),
    [
        ("rate_limit_api_per_min", -1, "greater than or equal to 0"),
        ("rate_limit_submit_job_window_seconds", 0, "greater than or equal to 1"),
        ("rate_limit_storage_uri", "memory://", "not asynchronous"),
        ("rate_limit_storage_uri", "async+nosuch://x", "cannot use rate-limit storage"),
    ],
    ids=["negative-figure", "empty-window", "sync-storage", "unknown-storage"],
)
def test_unusable_settings_are_refused_at_start(field: str, value: object, expected: str) -> None:
    with pytest.raises(ValidationError, match=expected):
        RestSettings.model_validate({field: value})


async def test_job_submissions_trip_at_the_figure_per_user(rest_settings: RestSettings) -> None:
    async with serving(rest_settings, rate_limit_submit_job_per_hour=2) as api:
        alice, bob = await login(api, "alice"), await login(api, "bob")
        assert [await submit(api, alice, f"a{i}") for i in range(2)] == [202, 202]
        response = await api.post("/api/v2/jobs", data=job_yaml("a2", gpu=0), headers={**alice, **YAML})
        await assert_refused(
            response,
            limit="job submissions",
            figure="2 per hour",
            setting="PAI_RATE_LIMIT_SUBMIT_JOB_PER_HOUR",
            who="alice",
        )
        assert response.headers["RateLimit-Policy"] == "2;w=3600"
        assert 3000 < int(response.headers["Retry-After"]) <= 3600
        # Another user is not affected, and alice may still read.
        assert await submit(api, bob, "b0") == 202
        assert (await api.get("/api/v2/jobs", headers=alice)).status == 200
        refused = await api.get("/api/v2/jobs/alice~a2", headers=alice)
        assert refused.status == 404  # the refused submission left no job behind


async def test_dry_runs_use_none_of_the_submissions_figure(rest_settings: RestSettings) -> None:
    async with serving(rest_settings, rate_limit_submit_job_per_hour=1) as api:
        alice = await login(api, "alice")
        for _ in range(3):
            checked = await api.post(
                "/api/v2/jobs?dryRun=true", data=job_yaml("checked", gpu=0), headers={**alice, **YAML}
            )
            assert checked.status == 200, await checked.text()
        assert await submit(api, alice, "checked") == 202
        assert await submit(api, alice, "second") == 429


async def test_the_job_list_trips_at_the_figure_per_user_and_says_what_remains(
    rest_settings: RestSettings,
) -> None:
    async with serving(rest_settings, rate_limit_list_job_per_min=3) as api:
        alice, bob = await login(api, "alice"), await login(api, "bob")
        remaining = []
        for _ in range(3):
            response = await api.get("/api/v2/jobs", headers=alice)
            assert response.status == 200
            remaining.append(response.headers["RateLimit-Remaining"])
        assert remaining == ["2", "1", "0"]
        response = await api.get("/rest-server/api/v2/jobs", headers=alice)  # either prefix counts
        await assert_refused(
            response,
            limit="job list requests",
            figure="3 per minute",
            setting="PAI_RATE_LIMIT_LIST_JOB_PER_MIN",
            who="alice",
        )
        assert (await api.get("/api/v2/jobs", headers=bob)).status == 200
        assert await submit(api, alice, "still-allowed") == 202  # submissions count apart


async def test_every_request_counts_per_client_address(rest_settings: RestSettings) -> None:
    # One trusted proxy in front: the hop it adds names the client.
    async with serving(rest_settings, rate_limit_api_per_min=4, rate_limit_trusted_proxies=1) as api:
        first = await login(api, "admin", forwarded="192.0.2.1")  # the login counts: 1
        for _ in range(3):
            assert (await api.get("/api/v2/jobs", headers=first)).status == 200
        response = await api.get("/api/v2/openapi.json", headers=first)
        await assert_refused(
            response,
            limit="requests from address",
            figure="4 per minute",
            setting="PAI_RATE_LIMIT_API_PER_MIN",
            who="192.0.2.1",
        )
        # A client can put anything before the proxy's hop; only the proxy's hop is believed.
        spoofed = {**first, "X-Forwarded-For": "198.51.100.7, 192.0.2.1"}
        assert (await api.get("/api/v2/jobs", headers=spoofed)).status == 429
        # Another address is not affected, even for the same user.
        second = {**first, "X-Forwarded-For": "192.0.2.2"}
        assert (await api.get("/api/v2/jobs", headers=second)).status == 200


async def test_without_trusted_proxies_forwarded_addresses_are_ignored(rest_settings: RestSettings) -> None:
    async with serving(rest_settings, rate_limit_api_per_min=2) as api:
        statuses = [
            (await api.get("/api/v2/openapi.json", headers={"X-Forwarded-For": f"192.0.2.{i}"})).status
            for i in range(3)
        ]
        assert statuses == [200, 200, 429]


async def test_a_limit_recovers_when_its_window_ends(rest_settings: RestSettings) -> None:
    async with serving(
        rest_settings, rate_limit_list_job_per_min=1, rate_limit_list_job_window_seconds=2
    ) as api:
        alice = await login(api, "alice")
        assert (await api.get("/api/v2/jobs", headers=alice)).status == 200
        refused = await api.get("/api/v2/jobs", headers=alice)
        assert refused.status == 429
        assert int(refused.headers["Retry-After"]) <= 2
        assert "1 per 2 s" in (await refused.json())["hint"]

        async def listing() -> int:
            return (await api.get("/api/v2/jobs", headers=alice)).status

        assert await eventually(listing, lambda status: status == 200, within=10, every=0.2) == 200


async def test_a_figure_of_zero_turns_that_limit_off(rest_settings: RestSettings) -> None:
    async with serving(
        rest_settings,
        rate_limit_api_per_min=0,
        rate_limit_list_job_per_min=0,
        rate_limit_submit_job_per_hour=0,
    ) as api:
        admin = await login(api, "admin")
        lists = [await api.get("/api/v2/jobs", headers=admin) for _ in range(5)]
        assert [r.status for r in lists] == [200] * 5
        assert not any("RateLimit-Limit" in r.headers for r in lists)
        assert [await submit(api, admin, f"z{i}") for i in range(3)] == [202] * 3


async def test_the_test_fixture_keeps_openpais_figures(api: Client, admin_headers: dict[str, str]) -> None:
    response = await api.get("/api/v2/jobs", headers=admin_headers)
    assert response.status == 200
    assert response.headers["RateLimit-Policy"] == "60;w=60"
    response = await api.get("/api/v2/openapi.json")
    assert response.headers["RateLimit-Policy"] == "600;w=60"


REDIS_URI = "async+redis://127.0.0.1:6379/0"


def _redis_answers() -> bool:
    import socket

    with socket.socket() as probe:
        probe.settimeout(1)
        return probe.connect_ex(("127.0.0.1", 6379)) == 0


@pytest.mark.skipif(not _redis_answers(), reason="no Redis on 127.0.0.1:6379")
async def test_replicas_sharing_redis_share_one_count(rest_settings: RestSettings) -> None:
    # Two REST instances over one database and one Redis: the limit holds across both of them.
    shared = rest_settings.model_copy(update={"rate_limit_storage_uri": REDIS_URI})
    user = f"r{uuid.uuid4().hex[:10]}"  # Redis outlives the test: a fresh user starts a fresh count
    async with serving(shared, rate_limit_list_job_per_min=3) as first:
        headers = await login(first, user)
        async with serving(shared, rate_limit_list_job_per_min=3) as second:
            answers = [
                (await api.get("/api/v2/jobs", headers=headers)).status
                for api in (first, second, first, second)
            ]
    assert answers == [200, 200, 200, 429]
