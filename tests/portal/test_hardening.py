"""The portal against what a hostile page, link or body tries, on `pai up`'s real platform.

The validator keeps REST's parser limits, sign-in sends the browser only to this site's own
paths, a token in the address signs nobody in (OpenID Connect returns through a one-time code
bound to this browser's state), and every answer, proxied or streamed, carries the security
headers.
"""

from __future__ import annotations

import os
import signal
import time
from typing import Any

import httpx
import pytest

from tests.portal.conftest import USER, USER_PASSWORD, PortalPlatform
from tests.portal.test_browser import portal_client
from tests.support.waiting import eventually

pytestmark = [pytest.mark.timeout(300), pytest.mark.asyncio(loop_scope="module")]


def alias_bomb(levels: int) -> str:
    lines = ['a0: &a0 ["x", "x", "x", "x", "x", "x", "x", "x", "x"]']
    for level in range(1, levels + 1):
        previous = f"*a{level - 1}"
        lines.append(f"a{level}: &a{level} [{', '.join([previous] * 9)}]")
    return "\n".join(lines) + "\n"


async def csrf_of(client: httpx.AsyncClient) -> str:
    token: str = (await client.get("/portal/session")).json()["csrf"]
    return token


async def test_the_validator_refuses_an_alias_bomb_at_once_with_a_small_answer(
    platform: PortalPlatform,
) -> None:
    client = await portal_client(platform, USER, USER_PASSWORD)
    try:
        headers = {"X-CSRF-Token": await csrf_of(client), "Content-Type": "text/yaml"}
        started = time.monotonic()
        answer = await client.post("/portal/validate", content=alias_bomb(7), headers=headers)
        took = time.monotonic() - started
        assert answer.status_code == 400, answer.text[:300]
        assert took < 1.0
        assert len(answer.content) < 100_000
        assert answer.json()["valid"] is False
        # Bodies past REST's limit are refused as REST refuses them.
        big = await client.post("/portal/validate", content="x" * (1024 * 1024 + 1), headers=headers)
        assert big.status_code == 413
        deep = await client.post(
            "/portal/render",
            content="[" * 100_000 + "]" * 100_000,
            headers={**headers, "Content-Type": "application/json"},
        )
        assert deep.status_code == 400
        fine = await client.post("/portal/validate", content="name: x\n", headers=headers)
        assert fine.status_code == 200
    finally:
        await client.aclose()


@pytest.mark.parametrize(
    "target",
    ["/%09/evil.example", "/%0a/evil.example", "//evil.example", "/\\evil.example", "https://evil.example/"],
)
async def test_after_sign_in_the_browser_goes_to_no_other_host(platform: PortalPlatform, target: str) -> None:
    client = await portal_client(platform, USER, USER_PASSWORD)
    try:
        answer = await client.get(f"/?next={target}")
        assert answer.status_code == 302
        location = answer.headers["location"]
        resolved = httpx.URL(platform.url).join(location)
        assert resolved.host == httpx.URL(platform.url).host, location
        assert location == "/home.html"
        assert (await client.get("/?next=/job-list.html%3Fstate%3DRUNNING")).headers[
            "location"
        ] == "/job-list.html?state=RUNNING"
    finally:
        await client.aclose()


async def test_a_token_in_the_address_signs_nobody_in(platform: PortalPlatform, browser: Any) -> None:
    login = await platform.admin.post(
        "/api/v2/authn/basic/login", json={"username": USER, "password": USER_PASSWORD}
    )
    token = login.json()["token"]
    context = await browser.new_context()
    try:
        page = await context.new_page()
        await page.goto(f"{platform.url}/?token={token}&user={USER}&admin=false")
        session = await page.request.get(platform.url + "/portal/session")
        assert session.status == 401
        await page.goto(platform.url + "/home.html")
        assert "/index.html" in page.url, "not signed in: the sign-in page"
        cookies = await context.cookies()
        assert not [c for c in cookies if c["name"] == "pai_session"]
        # A return with a code but without this browser's state is refused as well.
        await page.goto(f"{platform.url}/?code=stolen&state=someone-elses")
        assert (await page.request.get(platform.url + "/portal/session")).status == 401
    finally:
        await context.close()


async def test_an_openid_sign_in_starts_with_a_state_of_this_browser(platform: PortalPlatform) -> None:
    async with httpx.AsyncClient(base_url=platform.url, timeout=30) as client:
        start = await client.get("/portal/oidc/login")
        assert start.status_code == 302
        target = httpx.URL(start.headers["location"])
        assert target.path == "/api/v2/authn/oidc/login"
        state = target.params["portalState"]
        assert client.cookies["pai_portal_oidc"] == state
        assert "HttpOnly" in start.headers["set-cookie"]
        # The right state with a code REST never issued: refused, nobody signed in.
        back = await client.get(f"/?code=made-up&state={state}")
        assert back.status_code == 401
        assert (await client.get("/portal/session")).status_code == 401


async def test_every_answer_carries_the_security_headers(platform: PortalPlatform) -> None:
    client = await portal_client(platform, USER, USER_PASSWORD)
    try:
        answers = [
            await client.get("/home.html"),
            await client.get("/api/v2/info"),
            await client.get("/rest-server/api/v2/users/me"),
            await client.get("/api/v2/no-such-route"),
            await client.get("/marketplace/api/items"),
            await client.get("/no-such-page"),
        ]
        async with client.stream("GET", "/portal/events") as live:
            answers.append(live)
        for answer in answers:
            where = f"{answer.request.url.path} {answer.status_code}"
            assert answer.headers.get("x-content-type-options") == "nosniff", where
            assert answer.headers.get("x-frame-options") == "DENY", where
            assert "frame-ancestors 'none'" in answer.headers.get("content-security-policy", ""), where
    finally:
        await client.aclose()


async def test_the_marketplace_killed_answers_again_within_seconds(platform: PortalPlatform) -> None:
    assert platform.embedded is not None
    assert platform.embedded.supervisor is not None
    market = next(c for c in platform.embedded.supervisor.children if c.name == "marketplace")
    api = platform.admin
    assert (await api.get("/marketplace/api/items")).status_code == 200
    old = market.pid
    assert old is not None
    os.kill(old, signal.SIGKILL)
    killed = time.monotonic()

    async def answer() -> int:
        try:
            return (await api.get("/marketplace/api/items", timeout=5)).status_code
        except httpx.TransportError:
            return 0

    # Polling the API: the supervisor's restart is another process's doing, with no event here.
    await eventually(answer, lambda status: status == 200, within=10, every=0.1)
    assert market.pid not in (None, old)
    assert time.monotonic() - killed < 10
