"""OpenID Connect through the portal in Chromium, on a real platform and a fake provider: the
browser comes back with a one-time code bound to the state the portal gave it, never a token."""

from __future__ import annotations

from typing import Any

import httpx
import pytest

from pai.embedded.platform import EmbeddedPlatform, free_port
from tests.portal.conftest import ADMIN_PASSWORD
from tests.rest.fake_idp import CLIENT_ID, CLIENT_SECRET, FakeIdp

pytestmark = [pytest.mark.timeout(300), pytest.mark.asyncio(loop_scope="module")]


async def test_signing_in_with_openid_connect_passes_no_token_through_the_address(
    browser: Any, tmp_path_factory: pytest.TempPathFactory
) -> None:
    idp = await FakeIdp().start()
    embedded = EmbeddedPlatform(
        tmp_path_factory.mktemp("oidc-platform") / "data",
        api_port=free_port(),
        admin_password=ADMIN_PASSWORD,
        extra_env={
            "PAI_OIDC_ISSUER": idp.issuer,
            "PAI_OIDC_CLIENT_ID": CLIENT_ID,
            "PAI_OIDC_CLIENT_SECRET": CLIENT_SECRET,
        },
    )
    try:
        info = await embedded.start()
        portal = info.portal_url.rstrip("/")
        context = await browser.new_context()
        addresses: list[str] = []
        page = await context.new_page()
        page.on("request", lambda request: addresses.append(request.url))
        await page.goto(portal + "/")
        await page.click("text=Sign in with OpenID Connect")
        await page.wait_for_url("**/home.html")
        session = await page.request.get(portal + "/portal/session")
        assert session.status == 200
        assert (await session.json())["user"] == "dana"
        returns = [url for url in addresses if "code=" in url and url.startswith(portal + "/?")]
        assert returns, addresses
        assert not [url for url in addresses if "token=" in url]
        # The same return followed again (a shared link, the history) signs nobody in.
        other = await browser.new_context()
        stranger = await other.new_page()
        await stranger.goto(returns[0])
        assert (await stranger.request.get(portal + "/portal/session")).status == 401
        await other.close()
        await context.close()
        # Login CSRF: someone starts a sign-in of their own, keeps its fresh return link and has
        # another browser follow it. The code is unused and bound to the state it names, but that
        # browser holds no such state: nobody is signed in there.
        async with httpx.AsyncClient(base_url=portal) as attacker:
            step = await attacker.get("/portal/oidc/login")
            while not httpx.URL(portal).join(step.headers["location"]).params.get("code") or (
                httpx.URL(portal).join(step.headers["location"]).path != "/"
            ):
                step = await attacker.get(httpx.URL(str(step.url)).join(step.headers["location"]))
                assert step.status_code == 302, step.text
            fresh = str(httpx.URL(portal).join(step.headers["location"]))
        assert fresh.startswith(portal + "/?code=")
        victim = await browser.new_context()
        following = await victim.new_page()
        await following.goto(fresh)
        assert (await following.request.get(portal + "/portal/session")).status == 401
        await victim.close()
        async with httpx.AsyncClient(base_url=portal) as client:
            assert (await client.get(returns[0])).status_code in (400, 401)
    finally:
        await embedded.stop()
        await idp.close()
