"""The portal in Chromium on `pai up`'s real platform: sign in, import, check, submit, follow."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from tests.portal.conftest import ADMIN_PASSWORD, ROOT, USER, USER_PASSWORD, PortalPlatform

pytestmark = [pytest.mark.timeout(300), pytest.mark.asyncio(loop_scope="module")]

ANCHOR_JOB = (
    ROOT.parent / "shared" / "anchors" / "openpai" / "jobs" / "pai" / "docs" / "manual" / "cluster-user"
)
REAL_OPENPAI_JOB = ANCHOR_JOB / "examples" / "hello-world-job.yaml"


async def signed_in(browser: Any, platform: PortalPlatform, user: str, password: str) -> Any:
    context = await browser.new_context()
    page = await context.new_page()
    await page.goto(platform.url + "/")
    await page.fill("#username", user)
    await page.fill("#password", password)
    await page.click("button[type=submit]")
    await page.wait_for_url("**/home.html")
    return page


async def count_navigations(page: Any) -> list[str]:
    navigations: list[str] = []
    page.on(
        "framenavigated", lambda frame: navigations.append(frame.url) if frame == page.main_frame else None
    )
    return navigations


async def test_import_a_real_openpai_job_submit_and_watch_it_succeed_without_reload(
    platform: PortalPlatform, browser: Any, artifacts: Path, tmp_path: Path
) -> None:
    if not REAL_OPENPAI_JOB.exists():
        pytest.skip(f"OpenPAI's example jobs are not beside the repository ({REAL_OPENPAI_JOB} is missing)")
    page = await signed_in(browser, platform, "admin", ADMIN_PASSWORD)
    await page.goto(platform.url + "/submit.html")
    await page.wait_for_selector("body[data-ready=true]")
    await page.set_input_files("#import-file", str(REAL_OPENPAI_JOB))
    await page.wait_for_function("() => document.querySelector('#f-name').value === 'hello-world-job'")
    # The form shows what the file says ...
    assert await page.input_value("#r-taskrole-resourcePerInstance_gpu") == "1"
    assert "git clone" in await page.input_value("#r-taskrole-commands")
    # ... and edits in the form reach the YAML: this machine has no GPU and no internet.
    await page.fill("#f-name", "portal-hello")
    await page.fill("#r-taskrole-resourcePerInstance_gpu", "0")
    await page.fill("#r-taskrole-resourcePerInstance_memoryMB", "256")
    await page.fill("#r-taskrole-commands", "echo hello from the portal\necho second line")
    await page.wait_for_function(
        "() => document.querySelector('#yaml').value.includes('hello from the portal')"
    )
    yaml_text = await page.input_value("#yaml")
    assert "name: portal-hello" in yaml_text
    assert "gpu: 0" in yaml_text
    assert "plugin: ssh" in yaml_text, "what the form does not show is kept"
    await page.screenshot(path=str(artifacts / "submit.png"), full_page=True)

    await page.click("#submit")
    await page.wait_for_url("**/job-detail.html?username=admin&jobName=portal-hello")
    navigations = await count_navigations(page)
    await page.wait_for_selector("body[data-state=SUCCEEDED]", timeout=90_000)
    await page.wait_for_function(
        "() => document.querySelector('#log').textContent.includes('hello from the portal')", timeout=30_000
    )
    assert navigations == [], f"the page was reloaded: {navigations}"
    assert await page.text_content("#summary") is not None
    assert "SUCCEEDED" in (await page.text_content("#job-title") or "")
    await page.screenshot(path=str(artifacts / "job-detail.png"), full_page=True)
    await page.context.close()


async def test_a_wrong_field_is_shown_at_the_field_and_line_before_submitting(
    platform: PortalPlatform, browser: Any, artifacts: Path
) -> None:
    page = await signed_in(browser, platform, USER, USER_PASSWORD)
    await page.goto(platform.url + "/submit.html")
    await page.wait_for_selector("body[data-ready=true]")
    await page.fill("#r-main-resourcePerInstance_cpu", "-3")
    await page.wait_for_selector(".field.invalid #r-main-resourcePerInstance_cpu")
    problem = await page.text_content(".field.invalid .problem")
    assert problem
    assert "cpu" in (await page.text_content("#problems") or "").lower()
    assert await page.locator("#gutter .bad-line").count() == 1
    bad_line = int((await page.text_content("#gutter .bad-line") or "0").strip())
    assert "cpu: -3" in (await page.input_value("#yaml")).splitlines()[bad_line - 1]
    await page.click("#submit")
    await page.wait_for_function(
        "() => document.querySelector('#submit-status').textContent.startsWith('Not submitted')"
    )
    assert page.url.endswith("/submit.html"), "nothing was submitted"
    listed = await platform.admin.get("/api/v2/jobs", params={"username": USER})
    assert listed.json() == []
    await page.screenshot(path=str(artifacts / "submit-invalid.png"), full_page=True)
    await page.context.close()
