"""The job pages in Chromium, at the size where people use them: the submit page's clone and
Check, the job list on a phone, the job page's log, failure text, warnings and terminal."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import pytest

from tests.portal.conftest import ADMIN_PASSWORD, USER, USER_PASSWORD, PortalPlatform
from tests.portal.test_browser import signed_in, submit_as

pytestmark = [pytest.mark.timeout(300), pytest.mark.asyncio(loop_scope="module")]

LAPTOP = {"width": 1366, "height": 768}
PHONE = {"width": 390, "height": 844}


async def box_of(locator: Any) -> dict[str, float]:
    box = await locator.bounding_box()
    assert box is not None, f"{locator} is not shown"
    return dict(box)


async def stop_job(platform: PortalPlatform, user: str, name: str) -> None:
    answer = await platform.admin.put(f"/api/v2/jobs/{user}~{name}/executionType", json={"value": "STOP"})
    assert answer.status_code in (200, 202), answer.text


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


async def test_on_a_phone_the_job_list_shows_status_and_actions_and_filters_to_my_jobs(
    platform: PortalPlatform, browser: Any, artifacts: Path
) -> None:
    # Jobs that have not ended: a row with both Clone and Stop, the widest.
    await submit_as(platform, USER, USER_PASSWORD, "phone-mine", command="sleep 300")
    await submit_as(platform, "admin", ADMIN_PASSWORD, "phone-admins", command="sleep 300")
    page = await signed_in(browser, platform, USER, USER_PASSWORD, PHONE)
    await page.goto(platform.url + "/job-list.html")
    await page.wait_for_selector(f"#rows tr[data-job='{USER}~phone-mine']")
    await page.wait_for_selector("#rows tr[data-job='admin~phone-admins']")
    width = PHONE["width"]
    # Nothing is wider than the screen, the table included: no sideways scrolling to reach a column.
    assert await page.evaluate("() => document.documentElement.scrollWidth") <= width
    wrap = await page.evaluate(
        "() => { const w = document.querySelector('.table-wrap'); return [w.scrollWidth, w.clientWidth]; }"
    )
    assert wrap[0] <= wrap[1], f"the table scrolls sideways: {wrap}"
    row = page.locator(f"#rows tr[data-job='{USER}~phone-mine']")
    await row.get_by_role("button", name="Stop phone-mine").wait_for()
    for part in (
        row.locator("td a", has_text="phone-mine"),
        row.locator(".state"),
        row.get_by_role("link", name="Clone phone-mine"),
        row.get_by_role("button", name="Stop phone-mine"),
    ):
        box = await box_of(part)
        assert 0 <= box["x"] <= box["x"] + box["width"] <= width, box
    for control in ("#keyword", "#mine", "#filters button[type=submit]"):
        box = await box_of(page.locator(control))
        assert box["x"] + box["width"] <= width, (control, box)
    # The filters leave the first screen to the jobs, and a row's time does not wrap to four lines.
    filters = await box_of(page.locator("#filters"))
    assert filters["height"] < PHONE["height"] * 0.3, filters
    row_box = await box_of(row)
    assert row_box["height"] < 80, row_box
    await page.screenshot(path=str(artifacts / "job-list-phone.png"), full_page=True)
    # "My jobs": the signed-in user's jobs only, and the address says so.
    await page.check("#mine")
    await page.wait_for_url(f"**/job-list.html?username={USER}*")
    await page.wait_for_selector("#rows tr[data-job='admin~phone-admins']", state="detached")
    jobs = await page.eval_on_selector_all("#rows tr[data-job]", "rows => rows.map((r) => r.dataset.job)")
    assert jobs, "the user's own jobs are listed"
    assert all(job.startswith(f"{USER}~") for job in jobs), jobs
    await page.reload()
    await page.wait_for_selector(f"#rows tr[data-job='{USER}~phone-mine']")
    assert await page.is_checked("#mine"), "the filter is kept in the address"
    await page.uncheck("#mine")
    await page.wait_for_selector("#rows tr[data-job='admin~phone-admins']")
    await stop_job(platform, USER, "phone-mine")
    await stop_job(platform, "admin", "phone-admins")
    await page.context.close()


async def test_a_log_opened_as_its_task_starts_shows_each_line_once(
    platform: PortalPlatform, browser: Any, artifacts: Path
) -> None:
    page = await signed_in(browser, platform, USER, USER_PASSWORD, LAPTOP)

    # A slow network: each read of the log takes a second, so the page's reads overlap whenever
    # it asks again before an answer came (an update of the job, its timer).
    async def slowly(route: Any) -> None:
        await asyncio.sleep(1)
        await route.continue_()

    await page.route("**/logs/all?*", slowly)
    command = "echo first-line; sleep 2; echo second-line; sleep 2; echo third-line; sleep 300"
    await submit_as(platform, USER, USER_PASSWORD, "log-once", command=command)
    await page.goto(platform.url + f"/job-detail.html?username={USER}&jobName=log-once")
    await page.wait_for_selector("body[data-ready=true]")
    await page.wait_for_function(
        "() => document.querySelector('#log').textContent.includes('third-line')", timeout=60_000
    )
    log = await page.text_content("#log") or ""
    assert [log.count(line) for line in ("first-line", "second-line", "third-line")] == [1, 1, 1], log
    await page.screenshot(path=str(artifacts / "job-log-once.png"), full_page=True)
    await stop_job(platform, USER, "log-once")
    await page.context.close()


async def failed_job_page(platform: PortalPlatform, browser: Any, name: str, retries: int) -> Any:
    await submit_as(platform, USER, USER_PASSWORD, name, command="exit 3", job_retries=retries)
    page = await signed_in(browser, platform, USER, USER_PASSWORD, LAPTOP)
    await page.goto(platform.url + f"/job-detail.html?username={USER}&jobName={name}")
    await page.wait_for_selector("body[data-state=FAILED]", timeout=60_000)
    await page.wait_for_selector("#failure:not(.hidden)")
    return page


async def test_a_failure_says_what_the_jobs_retry_budget_really_did(
    platform: PortalPlatform, browser: Any, artifacts: Path
) -> None:
    page = await failed_job_page(platform, browser, "no-budget", 0)
    await page.wait_for_function(
        "() => document.querySelector('#failure').textContent.includes('jobRetryCount')"
    )
    said = await page.text_content("#failure") or ""
    assert "retried within its retry budget" not in said, said
    assert "The job is not retried: its jobRetryCount is 0" in said, said
    await page.screenshot(path=str(artifacts / "job-failed-no-budget.png"), full_page=True)
    await page.context.close()
    page = await failed_job_page(platform, browser, "spent-budget", 1)
    await page.wait_for_function(
        "() => document.querySelector('#failure').textContent.includes('jobRetryCount')"
    )
    said = await page.text_content("#failure") or ""
    assert "The job was retried 1 time, its whole retry budget (jobRetryCount 1)" in said, said
    await page.context.close()


async def test_check_and_the_job_page_warn_that_task_retries_need_gang_allocation_off(
    platform: PortalPlatform, browser: Any, artifacts: Path
) -> None:
    page = await signed_in(browser, platform, USER, USER_PASSWORD, LAPTOP)
    await page.goto(platform.url + "/submit.html")
    await page.wait_for_selector("body[data-ready=true]")
    await page.fill("#f-name", "gang-warned")
    await page.fill("#r-main-commands", "sleep 300")
    await page.fill("#r-main-taskRetryCount", "1")
    await page.click("#check")
    await page.wait_for_function(
        "() => document.querySelector('#submit-status').textContent.startsWith('The platform would accept')"
    )
    assert "1 warning" in (await page.text_content("#submit-status") or "")
    warned = await page.text_content("#problems li.warn") or ""
    assert "taskRoles.main.taskRetryCount" in warned
    assert "extras.gangAllocation: false" in warned, warned
    at_field = await page.text_content(".field:has(#r-main-taskRetryCount) .warning") or ""
    assert "extras.gangAllocation: false" in at_field
    await page.screenshot(path=str(artifacts / "submit-warning.png"), full_page=True)
    await page.click("#submit")
    await page.wait_for_url(f"**/job-detail.html?username={USER}&jobName=gang-warned")
    await page.wait_for_selector("#advice:not(.hidden)")
    said = await page.text_content("#advice") or ""
    assert "taskRoles.main.taskRetryCount" in said
    assert "extras.gangAllocation: false" in said, said
    await page.screenshot(path=str(artifacts / "job-detail-warning.png"), full_page=True)
    await stop_job(platform, USER, "gang-warned")
    await page.context.close()


async def test_task_roles_are_named_in_the_form_and_submitted_by_those_names(
    platform: PortalPlatform, browser: Any, artifacts: Path
) -> None:
    page = await signed_in(browser, platform, USER, USER_PASSWORD, LAPTOP)
    await page.goto(platform.url + "/submit.html")
    await page.wait_for_selector("body[data-ready=true]")
    await page.fill("#f-name", "named-roles")
    await page.click("#add-role")
    added = page.locator("[data-role-name=role2]")
    await added.wait_for()
    # A name the protocol refuses is said at the field and changes nothing.
    await added.fill("2nd")
    await added.press("Tab")
    problem = page.locator(".field.invalid:has([data-role-name=role2]) .problem")
    assert "starts with a letter" in (await problem.text_content() or "")
    assert "2nd" not in await page.input_value("#yaml")
    await added.fill("evaluator")
    await added.press("Tab")
    await page.wait_for_function(
        "() => { const y = document.querySelector('#yaml').value;"
        " return y.includes('  evaluator:') && !y.includes('role2'); }"
    )
    main = page.locator("[data-role-name=main]")
    await main.fill("trainer")
    await main.press("Enter")
    await page.wait_for_function("() => document.querySelector('#yaml').value.includes('  trainer:')")
    legends = await page.eval_on_selector_all(".role-box legend", "ls => ls.map((l) => l.textContent)")
    assert legends == ["Task role trainer", "Task role evaluator"], legends
    # The renamed roles' fields edit their own sections.
    await page.fill("#r-evaluator-commands", "echo evaluating")
    await page.screenshot(path=str(artifacts / "submit-named-roles.png"), full_page=True)
    await page.click("#submit")
    await page.wait_for_url(f"**/job-detail.html?username={USER}&jobName=named-roles")
    config = await config_of(platform, USER, "named-roles")
    assert "\n  trainer:\n" in config
    assert "\n  evaluator:\n" in config
    assert "echo evaluating" in config
    assert "main:" not in config
    assert "role2" not in config
    await stop_job(platform, USER, "named-roles")
    await page.context.close()


async def test_a_tasks_log_is_searched_and_downloaded_whole_from_the_job_page(
    platform: PortalPlatform, browser: Any, artifacts: Path
) -> None:
    command = "for i in 1 2 3 4 5; do echo step-$i; done; echo needle-one; echo NEEDLE-two; sleep 300"
    await submit_as(platform, USER, USER_PASSWORD, "log-search", command=command)
    page = await signed_in(browser, platform, USER, USER_PASSWORD, LAPTOP)
    await page.goto(platform.url + f"/job-detail.html?username={USER}&jobName=log-search")
    await page.wait_for_function(
        "() => document.querySelector('#log').textContent.includes('NEEDLE-two')", timeout=60_000
    )
    whole = await page.text_content("#log") or ""
    await page.fill("#log-search", "needle")
    assert await page.text_content("#log") == "needle-one\nNEEDLE-two\n"
    assert "2 lines" in (await page.text_content("#log-found") or "")
    await page.screenshot(path=str(artifacts / "job-log-search.png"), full_page=True)
    await page.fill("#log-search", "")
    assert await page.text_content("#log") == whole
    # The download is the task's whole log, as the API's log route has it.
    async with page.expect_download() as downloading:
        await page.click("#log-download")
    download = await downloading.value
    assert download.suggested_filename == "log-search-main-0-all.log"
    saved = artifacts / "log-search-main-0-all.log"
    await download.save_as(str(saved))
    detail = (await platform.admin.get(f"/api/v2/jobs/{USER}~log-search")).json()
    tried = detail["taskRoles"]["main"]["taskStatuses"][0]["attemptId"]
    route = f"/api/v2/jobs/{USER}~log-search/attempts/0/taskRoles/main/taskIndex/0/attempts/{tried}/logs/all"
    api_log = (await platform.admin.get(route, params={"offset": 0, "limit": 1048576})).json()["content"]
    assert saved.read_text() == api_log
    assert "step-1\n" in api_log
    assert "NEEDLE-two\n" in api_log
    await stop_job(platform, USER, "log-search")
    await page.context.close()


async def test_a_terminal_on_the_job_page_runs_a_shell_in_the_running_task(
    platform: PortalPlatform, browser: Any, artifacts: Path
) -> None:
    await submit_as(platform, USER, USER_PASSWORD, "term-job", command="sleep 300")
    page = await signed_in(browser, platform, USER, USER_PASSWORD, LAPTOP)
    await page.goto(platform.url + f"/job-detail.html?username={USER}&jobName=term-job")
    await page.wait_for_selector("#shell:not(.hidden) #shell-open:not([disabled])", timeout=60_000)
    await page.click("#shell-open")
    await page.wait_for_selector("#terminal[data-terminal=open]")
    rows = (
        "() => [...document.querySelectorAll('#terminal .xterm-rows > div')].map((r) => r.textContent.trim())"
    )
    # The shell's prompt, then a command typed into the terminal, and its answer below it.
    await page.wait_for_function(f"() => ({rows})().some((row) => row.endsWith('$'))")
    await page.click("#terminal .xterm")
    await page.keyboard.type("echo $PAI_JOB_NAME")
    await page.keyboard.press("Enter")
    # OpenPAI's PAI_JOB_NAME is USER~NAME.
    await page.wait_for_function(f"() => ({rows})().includes('{USER}~term-job')")
    await page.screenshot(path=str(artifacts / "job-terminal.png"), full_page=True)
    await page.click("#shell-close")
    await page.wait_for_selector("#terminal .xterm", state="detached")
    await stop_job(platform, USER, "term-job")
    await page.context.close()
