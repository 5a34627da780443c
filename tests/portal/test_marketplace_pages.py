"""The marketplace in Chromium: browse, read, star, use a template, save one, review."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.portal.conftest import ADMIN_PASSWORD, AXE, USER, USER_PASSWORD, PortalPlatform
from tests.portal.test_browser import signed_in
from tests.support.waiting import eventually

pytestmark = [pytest.mark.timeout(300), pytest.mark.asyncio(loop_scope="module")]

HOSTILE = """# Read me

Some **bold** and *soft* words, `inline code` and a [safe link](https://example.org/docs).

<script>window.__pwned = "script"</script>
<img src=x onerror="window.__pwned = 'img'">
[a trap](javascript:window.__pwned='link')

| field | meaning |
| --- | --- |
| `a` | first |

```yaml
name: <b>not bold</b>
```
"""


async def items(platform: PortalPlatform, **params: str) -> list[dict[str, Any]]:
    answer = await platform.admin.get("/marketplace/api/items", params=params)
    assert answer.status_code == 200, answer.text
    return list(answer.json())


async def by_name(platform: PortalPlatform, name: str) -> dict[str, Any] | None:
    found = [i for i in await items(platform, keyword=name) if i["name"] == name]
    return found[0] if found else None


async def seeded(platform: PortalPlatform, name: str) -> dict[str, Any]:
    item = await eventually(lambda: by_name(platform, name), lambda found: found is not None, within=30)
    assert item is not None
    return item


async def test_open_a_template_press_use_submit_and_land_on_the_jobs_page(
    platform: PortalPlatform, browser: Any, artifacts: Path
) -> None:
    hello = await seeded(platform, "Hello world")
    uses = hello["useNumber"]
    page = await signed_in(browser, platform, USER, USER_PASSWORD)
    await page.goto(platform.url + "/marketplace.html")
    await page.wait_for_selector("body[data-ready=true]")
    assert await page.locator(".market-card").count() >= 12, "the starters are listed"
    await page.screenshot(path=str(artifacts / "marketplace.png"), full_page=True)
    # Search narrows the list; the card leads to the item's page.
    await page.fill("#keyword", "Hello world")
    await page.click("#filters button[type=submit]")
    await page.wait_for_function("() => document.querySelectorAll('.market-card').length === 1")
    await page.click(".market-card[data-name='Hello world'] h2 a")
    await page.wait_for_url("**/marketplace-item.html?id=*")
    await page.wait_for_selector("body[data-ready=true]")
    assert await page.text_content("#item-title h2") == "Hello world"
    assert await page.text_content("#visible-to") == "everyone"
    assert await page.text_content("#uses") == str(uses)
    assert await page.locator("#description h3").count() >= 1, "the README is rendered"
    assert await page.locator("#description table").count() == 1
    assert "protocolVersion: 2" in (await page.text_content("#protocol") or "")
    await page.screenshot(path=str(artifacts / "marketplace-item.png"), full_page=True)

    await page.click("#use")
    await page.wait_for_url("**/submit.html?market=*")
    await page.wait_for_selector("body[data-ready=true]")
    await page.wait_for_function(
        "() => /name: hello-world-[0-9a-z]+/.test(document.querySelector('#yaml').value)"
        " && document.querySelector('#f-name').value.startsWith('hello-world-')"
    )
    assert f"submitFrom: {hello['id']}" in await page.input_value("#yaml")
    job_name = await page.input_value("#f-name")
    await page.click("#submit")
    await page.wait_for_url(f"**/job-detail.html?username={USER}&jobName={job_name}")
    await page.wait_for_selector("body[data-state=SUCCEEDED]", timeout=90_000)
    await page.screenshot(path=str(artifacts / "marketplace-used-job.png"), full_page=True)
    counted = await eventually(
        lambda: by_name(platform, "Hello world"), lambda i: i is not None and i["useNumber"] > uses, within=30
    )
    assert counted is not None
    assert counted["useNumber"] == uses + 1
    await page.context.close()


async def test_a_description_is_rendered_without_running_or_injecting_html(
    platform: PortalPlatform, browser: Any
) -> None:
    created = await platform.admin.post(
        "/marketplace/api/items",
        json={
            "name": "hostile-readme",
            "type": "data",
            "summary": "a data set with a tricky README",
            "description": HOSTILE,
            "dataType": "url",
            "dataUrl": "https://example.org/data.csv",
            "isPublic": True,
            "isPrivate": False,
        },
    )
    assert created.status_code == 201, created.text
    item = created.json()
    page = await signed_in(browser, platform, USER, USER_PASSWORD)
    await page.goto(platform.url + f"/marketplace-item.html?id={item['id']}")
    await page.wait_for_selector("body[data-ready=true]")
    description = page.locator("#description")
    assert await description.locator("strong").text_content() == "bold"
    assert await description.locator("em").first.text_content() == "soft"
    assert await description.locator("a[href='https://example.org/docs']").count() == 1
    assert await description.locator("script, img, iframe, b").count() == 0
    assert await description.locator("a[href^='javascript']").count() == 0
    text = await description.text_content() or ""
    assert "<script>" in text, "raw HTML is shown as text"
    assert "<b>not bold</b>" in text
    assert await page.evaluate("() => window.__pwned") is None
    assert await description.locator("table td code").text_content() == "a"
    assert await page.locator("#yaml-panel.hidden").count() == 1, "a data item has no job YAML"
    await page.context.close()


async def test_star_and_unstar_an_item(platform: PortalPlatform, browser: Any) -> None:
    item = await seeded(platform, "PyTorch DDP")
    page = await signed_in(browser, platform, USER, USER_PASSWORD)
    await page.goto(platform.url + f"/marketplace-item.html?id={item['id']}")
    await page.wait_for_selector("body[data-ready=true]")
    assert await page.get_attribute("#star", "aria-pressed") == "false"
    await page.click("#star")
    await page.wait_for_selector("#star[aria-pressed=true]")
    assert await page.text_content("#stars") == str(item["starNumber"] + 1)
    await page.click("#star")
    await page.wait_for_selector("#star[aria-pressed=false]")
    assert await page.text_content("#stars") == str(item["starNumber"])
    await page.context.close()


async def test_save_as_template_then_an_admin_reviews_it(
    platform: PortalPlatform, browser: Any, artifacts: Path
) -> None:
    page = await signed_in(browser, platform, USER, USER_PASSWORD)
    await page.goto(platform.url + "/submit.html")
    await page.wait_for_selector("body[data-ready=true]")
    await page.click("#save-as-template")
    await page.fill("#t-name", "alices-template")
    await page.select_option("#t-visibility", "public")
    await page.fill("#t-summary", "what alice runs every morning")
    await page.fill("#t-tags", "mine, daily")
    await page.screenshot(path=str(artifacts / "marketplace-save-as-template.png"), full_page=True)
    await page.click("#save-template-submit")
    await page.wait_for_selector("#saved-link")
    assert "approval" in (await page.text_content("#save-status") or "")
    mine = await by_name(platform, "alices-template")
    assert mine is not None
    assert mine["status"] == "pending"
    assert mine["author"] == USER
    assert sorted(mine["tags"]) == ["daily", "mine"]

    admin = await signed_in(browser, platform, "admin", ADMIN_PASSWORD)
    await admin.goto(platform.url + "/marketplace-review.html")
    await admin.wait_for_selector("body[data-ready=true]")
    row = admin.locator(f"tr[data-item='{mine['id']}']")
    await admin.screenshot(path=str(artifacts / "marketplace-review.png"), full_page=True)
    await row.locator("button[data-reject]").click()
    await row.get_by_text("Give a reason to reject.").wait_for()
    await row.locator("button[data-approve]").click()
    await admin.wait_for_selector(f"tr[data-item='{mine['id']}']", state="detached")
    approved = await by_name(platform, "alices-template")
    assert approved is not None
    assert approved["status"] == "approved"
    await admin.context.close()

    # A job's page saves its job too.
    await page.goto(platform.url + "/submit.html")
    await page.wait_for_selector("body[data-ready=true]")
    await page.fill("#f-name", "to-be-saved")
    await page.wait_for_function("() => document.querySelector('#yaml').value.includes('name: to-be-saved')")
    await page.click("#submit")
    await page.wait_for_url("**/job-detail.html?*jobName=to-be-saved")
    await page.wait_for_selector("body[data-ready=true]")
    await page.click("#save-as-template")
    assert await page.input_value("#t-name") == "to-be-saved"
    await page.click("#save-template-submit")
    await page.wait_for_selector("#saved-link")
    saved = await by_name(platform, "to-be-saved")
    assert saved is not None
    assert saved["isPrivate"] is True
    assert "name: to-be-saved" in saved["protocol"]
    await page.context.close()


async def test_the_marketplace_api_passes_through_the_portal_only_with_a_session(
    platform: PortalPlatform,
) -> None:
    async with httpx.AsyncClient(base_url=platform.url, timeout=30) as anonymous:
        refused = await anonymous.get("/marketplace/api/items")
        assert refused.status_code == 401


async def test_no_serious_accessibility_violation_on_the_item_page(
    platform: PortalPlatform, browser: Any, artifacts: Path
) -> None:
    if not AXE.exists():
        pytest.skip(f"axe-core is not installed ({AXE}); `make setup` runs npm ci in services/portal")
    axe = AXE.read_text()
    hello = await seeded(platform, "Hello world")
    page = await signed_in(browser, platform, "admin", ADMIN_PASSWORD)
    found: dict[str, list[str]] = {}
    for path in (f"/marketplace-item.html?id={hello['id']}", "/marketplace.html", "/marketplace-review.html"):
        await page.goto(platform.url + path)
        await page.wait_for_selector("body[data-ready=true]", timeout=15_000)
        await page.evaluate(axe)  # through the debugger protocol: the page's CSP does not apply
        result = await page.evaluate("async () => await axe.run(document)")
        bad = [
            f"{v['id']} ({v['impact']}): {v['nodes'][0]['target']}"
            for v in result["violations"]
            if v["impact"] in ("serious", "critical")
        ]
        if bad:
            found[path] = bad
    await page.context.close()
    assert found == {}
