"""The account pages in Chromium: a group's members managed on the groups page, field errors
shown at their field on the user forms, and application tokens created with a name and an
expiry on the profile page; each looked at on a desktop and on a phone (390 px)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.portal.conftest import ADMIN_PASSWORD, PortalPlatform

pytestmark = [pytest.mark.timeout(300), pytest.mark.asyncio(loop_scope="module")]

DESKTOP = {"width": 1366, "height": 900}
PHONE = {"width": 390, "height": 844}
DAY_MS = 86_400_000


async def signed_in(
    browser: Any, platform: PortalPlatform, user: str, password: str, viewport: dict[str, int]
) -> Any:
    context = await browser.new_context(viewport=viewport)
    page = await context.new_page()
    await page.goto(platform.url + "/")
    await page.fill("#username", user)
    await page.fill("#password", password)
    await page.click("button[type=submit]")
    await page.wait_for_url("**/home.html")
    return page


async def make_user(platform: PortalPlatform, name: str) -> str:
    password = f"{name}-password"
    created = await platform.admin.post(
        "/api/v2/users",
        json={"username": name, "password": password, "admin": False, "virtualCluster": ["default"]},
    )
    assert created.status_code == 201, created.text
    return password


async def members(platform: PortalPlatform, group: str) -> list[str]:
    answer = await platform.admin.get(f"/api/v2/groups/{group}/userlist")
    assert answer.status_code == 200, answer.text
    return sorted(m["username"] for m in answer.json())


async def no_wider_than_the_screen(page: Any) -> None:
    width = await page.evaluate("() => document.documentElement.scrollWidth")
    assert width <= PHONE["width"], f"the page is {width} px wide on a {PHONE['width']} px screen"


async def test_an_admin_adds_a_user_to_a_group_and_removes_them_on_the_groups_page(
    platform: PortalPlatform, browser: Any, artifacts: Path
) -> None:
    for name in ("gm-one", "gm-two"):
        await make_user(platform, name)
    made = await platform.admin.post(
        "/api/v2/groups",
        json={
            "groupname": "research",
            "extension": {"acls": {"admin": False, "virtualClusters": ["default"]}},
        },
    )
    assert made.status_code == 201, made.text

    page = await signed_in(browser, platform, "admin", ADMIN_PASSWORD, DESKTOP)
    page.on("dialog", lambda dialog: dialog.accept())
    await page.goto(platform.url + "/group-view.html")
    await page.wait_for_selector("body[data-ready=true]")
    await page.click('button[data-members-of="research"]')
    await page.wait_for_selector("#member-list li.muted")
    assert "Nobody" in (await page.text_content("#member-list") or "")
    # The users not yet in the group are suggested.
    await page.wait_for_selector('#all-users option[value="gm-one"]', state="attached")

    await page.fill("#m-user", "gm-one")
    await page.click("#add-member button[type=submit]")
    await page.wait_for_selector('#member-list li[data-member="gm-one"]')
    assert await members(platform, "research") == ["gm-one"]
    await page.wait_for_function(
        """() => document.querySelector('tr[data-group="research"] td[data-members]')
            .textContent === 'gm-one'"""
    )
    assert (await page.text_content("#members-status") or "").startswith("gm-one added to research")
    assert (await page.text_content("#group-error") or "") == ""

    # Who is in already, or is nobody, is said at the field.
    for typed, said in (("gm-one", "already"), ("nobody-here", "no user nobody-here")):
        await page.fill("#m-user", typed)
        await page.click("#add-member button[type=submit]")
        await page.wait_for_selector("#m-user-error")
        assert said in (await page.text_content("#m-user-error") or "")
        assert await page.get_attribute("#m-user", "aria-invalid") == "true"
    assert await members(platform, "research") == ["gm-one"]

    await page.fill("#m-user", "gm-two")
    await page.click("#add-member button[type=submit]")
    await page.wait_for_selector('#member-list li[data-member="gm-two"]')
    assert await page.locator("#m-user-error").count() == 0, "a field error goes once the field is right"
    await page.screenshot(path=str(artifacts / "groups-members-desktop.png"), full_page=True)

    await page.click('button[aria-label="Remove gm-one from research"]')
    await page.wait_for_selector('#member-list li[data-member="gm-one"]', state="detached")
    assert await members(platform, "research") == ["gm-two"]
    stored = (await platform.admin.get("/api/v2/users/gm-one")).json()
    assert "research" not in stored["grouplist"]
    await page.context.close()

    phone = await signed_in(browser, platform, "admin", ADMIN_PASSWORD, PHONE)
    await phone.goto(platform.url + "/group-view.html")
    await phone.wait_for_selector("body[data-ready=true]")
    await phone.click('button[data-members-of="research"]')
    await phone.wait_for_selector('#member-list li[data-member="gm-two"]')
    await no_wider_than_the_screen(phone)
    await phone.screenshot(path=str(artifacts / "groups-members-phone.png"), full_page=True)
    await phone.context.close()


async def test_a_too_short_password_is_said_at_its_field_not_in_a_banner(
    platform: PortalPlatform, browser: Any, artifacts: Path
) -> None:
    # Creating a user (admin, desktop).
    page = await signed_in(browser, platform, "admin", ADMIN_PASSWORD, DESKTOP)
    await page.goto(platform.url + "/user-view.html")
    await page.wait_for_selector("body[data-ready=true]")
    await page.fill("#u-name", "shorty")
    await page.fill("#u-password", "abc")
    await page.click("#add-user button[type=submit]")
    await page.wait_for_selector("#u-password-error")
    assert "at least 6 characters" in (await page.text_content("#u-password-error") or "")
    assert await page.get_attribute("#u-password", "aria-invalid") == "true"
    assert await page.get_attribute("#u-password", "aria-describedby") == "u-password-error"
    assert (await page.text_content("#user-error") or "") == "", "no banner"
    await page.fill("#u-name", "no spaces allowed")
    await page.fill("#u-password", "long-enough")
    await page.click("#add-user button[type=submit]")
    await page.wait_for_selector("#u-name-error")
    assert "may contain only letters" in (await page.text_content("#u-name-error") or "")
    assert await page.locator("#u-password-error").count() == 0
    assert (await page.text_content("#user-error") or "") == ""
    await page.screenshot(path=str(artifacts / "user-field-error-desktop.png"), full_page=True)
    await page.context.close()
    missing = await platform.admin.get("/api/v2/users/shorty")
    assert missing.status_code == 400, "nobody was created"

    # One's own password on the profile (a phone).
    password = await make_user(platform, "fielder")
    phone = await signed_in(browser, platform, "fielder", password, PHONE)
    await phone.goto(platform.url + "/user-profile.html")
    await phone.wait_for_selector("body[data-ready=true]")
    await phone.fill("#old-password", password)
    await phone.fill("#new-password", "abc")
    await phone.fill("#new-password-again", "abc")
    await phone.click("#password-form button[type=submit]")
    await phone.wait_for_selector("#new-password-error")
    assert "at least 6 characters" in (await phone.text_content("#new-password-error") or "")
    assert (await phone.text_content("#password-status") or "") == ""
    assert (await phone.text_content("#profile-error") or "") == ""
    await no_wider_than_the_screen(phone)
    await phone.screenshot(path=str(artifacts / "profile-field-error-phone.png"), full_page=True)

    await phone.fill("#new-password", "abcdefgh")
    await phone.fill("#new-password-again", "abcdefgX")
    await phone.click("#password-form button[type=submit]")
    await phone.wait_for_selector("#new-password-again-error")
    assert "differ" in (await phone.text_content("#new-password-again-error") or "")
    assert await phone.locator("#new-password-error").count() == 0

    await phone.fill("#old-password", "not-my-password")
    await phone.fill("#new-password-again", "abcdefgh")
    await phone.click("#password-form button[type=submit]")
    await phone.wait_for_selector("#old-password-error")
    assert "not right" in (await phone.text_content("#old-password-error") or "")
    await phone.context.close()
    kept = await platform.admin.post(
        "/api/v2/authn/basic/login", json={"username": "fielder", "password": password}
    )
    assert kept.status_code == 200, "the password is unchanged"


async def test_a_token_is_created_with_a_name_and_an_expiry_and_listed_with_both(
    platform: PortalPlatform, browser: Any, artifacts: Path
) -> None:
    password = await make_user(platform, "scripter")
    for viewport, size in ((DESKTOP, "desktop"), (PHONE, "phone")):
        page = await signed_in(browser, platform, "scripter", password, viewport)
        await page.goto(platform.url + "/user-profile.html")
        await page.wait_for_selector("body[data-ready=true]")
        # 30 days unless chosen otherwise; a token needs a name.
        assert await page.input_value("#token-expiry") == str(30 * 86_400)
        await page.click("#token-form button[type=submit]")
        await page.wait_for_selector("#token-name-error")
        name = f"nightly-{size}"
        await page.fill("#token-name", name)
        await page.select_option("#token-expiry", label="7 days")
        await page.click("#token-form button[type=submit]")
        await page.wait_for_selector(f'#tokens tr[data-token-name="{name}"]')
        token = await page.text_content("#token-text") or ""
        row = await page.text_content(f'#tokens tr[data-token-name="{name}"]') or ""
        assert name in row
        assert "application" in row
        assert "never" not in row
        assert await page.locator("#token-name-error").count() == 0
        if size == "phone":
            await no_wider_than_the_screen(page)
        await page.screenshot(path=str(artifacts / f"profile-tokens-{size}.png"), full_page=True)
        await page.context.close()

        async with httpx.AsyncClient(base_url=platform.info.api_url, timeout=30) as api:
            login = await api.post(
                "/api/v2/authn/basic/login", json={"username": "scripter", "password": password}
            )
            api.headers["Authorization"] = f"Bearer {login.json()['token']}"
            details = {d["token"]: d for d in (await api.get("/api/v2/tokens")).json()["details"]}
            assert details[token]["name"] == name
            assert details[token]["expiresTime"] - details[token]["createdTime"] == 7 * DAY_MS
            jobs = await api.get("/api/v2/jobs", headers={"Authorization": f"Bearer {token}"})
            assert jobs.status_code == 200, "the token works for jobs"

    page = await signed_in(browser, platform, "scripter", password, DESKTOP)
    await page.goto(platform.url + "/user-profile.html")
    await page.wait_for_selector("body[data-ready=true]")
    await page.fill("#token-name", "forever")
    await page.select_option("#token-expiry", label="never")
    await page.click("#token-form button[type=submit]")
    await page.wait_for_selector('#tokens tr[data-token-name="forever"]')
    assert "never" in (await page.text_content('#tokens tr[data-token-name="forever"]') or "")
    await page.context.close()
