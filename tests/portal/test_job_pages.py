"""The job pages in Chromium, at the size where people use them: the submit page's clone and
Check, the job list on a phone, the job page's log, failure text, warnings and terminal."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from tests.portal.conftest import USER, USER_PASSWORD, PortalPlatform
from tests.portal.test_browser import signed_in, submit_as

pytestmark = [pytest.mark.timeout(300), pytest.mark.asyncio(loop_scope="module")]

LAPTOP = {"width": 1366, "height": 768}
PHONE = {"width": 390, "height": 844}


async def config_of(platform: PortalPlatform, user: str, name: str) -> str:
    answer = await platform.admin.get(f"/api/v2/jobs/{user}~{name}/config")
    assert answer.status_code == 200, answer.text
    return answer.text


async def test_a_clones_edits_submitted_at_once_all_reach_the_job(
    platform: PortalPlatform, browser: Any, artifacts: Path
) -> None:
    await submit_as(platform, USER, USER_PASSWORD, "clone-source", command="sleep 300")
    page = await signed_in(browser, platform, USER, USER_PASSWORD, LAPTOP)
    await page.goto(platform.url + f"/submit.html?clone={USER}~clone-source")
    await page.wait_for_selector("body[data-ready=true]")
    assert "sleep 300" in await page.input_value("#r-main-commands")
    # Edits in three fields, and Submit at once, before the form's pause has passed.
    await page.fill("#f-name", "clone-edited")
    await page.fill("#r-main-commands", "echo edited in the clone")
    await page.fill("#r-main-resourcePerInstance_memoryMB", "512")
    await page.click("#submit")
    await page.wait_for_url(f"**/job-detail.html?username={USER}&jobName=clone-edited")
    config = await config_of(platform, USER, "clone-edited")
    assert "echo edited in the clone" in config
    assert "sleep 300" not in config
    assert "memoryMB: 512" in config
    await page.screenshot(path=str(artifacts / "clone-submitted.png"), full_page=True)
    await page.context.close()
