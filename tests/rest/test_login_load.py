"""Logins cannot stall the API or be guessed quickly: argon2 runs off REST's event loop, each account
name backs off after failed attempts, and an unknown user answers as a wrong password."""

from __future__ import annotations

import asyncio
import statistics
import time
import uuid
from collections.abc import AsyncIterator

import httpx
import pytest

from tests.rest.conftest import ADMIN_PASSWORD
from tests.rest.serving import ServerThread

pytestmark = pytest.mark.parametrize("database_url", ["sqlite"], indirect=True)
LOGIN = "/api/v2/authn/basic/login"


@pytest.fixture
async def rest(server: ServerThread) -> AsyncIterator[httpx.AsyncClient]:
    limits = httpx.Limits(max_connections=64)
    async with httpx.AsyncClient(base_url=server.url, timeout=30, limits=limits) as client:
        yield client


async def test_bad_logins_from_16_clients_leave_the_api_responsive(rest: httpx.AsyncClient) -> None:
    stop = time.monotonic() + 6
    attempts = 0

    async def guess() -> None:
        nonlocal attempts
        while time.monotonic() < stop:
            # A new name each time: no backoff spares the password check, argon2 runs every time.
            name = f"guess-{uuid.uuid4().hex[:8]}"
            answer = await rest.post(LOGIN, data={"username": name, "password": "not-it"})
            assert answer.status_code in (400, 429), answer.text
            attempts += 1

    async def measure() -> list[float]:
        took = []
        await asyncio.sleep(0.5)  # the guessers are under way (nothing to await from them)
        while time.monotonic() < stop:
            started = time.perf_counter()
            assert (await rest.get("/api/v2/info")).status_code == 200
            took.append(time.perf_counter() - started)
            await asyncio.sleep(0.05)
        return took

    guessers = [asyncio.create_task(guess()) for _ in range(16)]
    took = await measure()
    await asyncio.gather(*guessers)
    assert attempts >= 16
    assert len(took) >= 20
    assert statistics.median(took) < 0.060, f"median {statistics.median(took) * 1000:.0f} ms"


async def test_failed_logins_back_off_per_account_and_names_are_not_told_apart(
    rest: httpx.AsyncClient,
) -> None:
    wrong = await rest.post(LOGIN, data={"username": "admin", "password": "nope-1"})
    unknown = await rest.post(LOGIN, data={"username": "ghost", "password": "nope-1"})
    assert (wrong.status_code, wrong.json()) == (unknown.status_code, unknown.json())
    for _ in range(2):
        await rest.post(LOGIN, data={"username": "admin", "password": "nope-2"})
        await rest.post(LOGIN, data={"username": "ghost", "password": "nope-2"})
    # The fourth failure in a row: the next attempt must wait, even with the right password.
    await rest.post(LOGIN, data={"username": "admin", "password": "nope-3"})
    await rest.post(LOGIN, data={"username": "ghost", "password": "nope-3"})
    for name, password in (("admin", ADMIN_PASSWORD), ("ghost", "whatever")):
        held = await rest.post(LOGIN, data={"username": name, "password": password})
        assert held.status_code == 429, held.text
        assert int(held.headers["Retry-After"]) >= 1
    # Another account is not held back by these.
    other = await rest.post(LOGIN, data={"username": "carol", "password": "nope"})
    assert other.status_code == 400
    # Once the wait is over the right password works and clears the count.
    await asyncio.sleep(float(held.headers["Retry-After"]))  # the backoff's own clock: nothing to await
    ok = await rest.post(LOGIN, data={"username": "admin", "password": ADMIN_PASSWORD})
    assert ok.status_code == 200, ok.text
