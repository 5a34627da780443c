"""The usage page in Chromium: GPU-hours per user or VC over a period, each user their own.

The platform's job history gets jobs of known size and length through the REST service's own
projection (tests/rest/test_usage.py's history, written into the platform's database), so the
figures on the page are known: alice 5 GPU-hours (4 in default, 1 in team).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from services.rest.adapters.database import create_engine
from services.rest.handlers import apply_events
from tests.portal.conftest import ADMIN_PASSWORD, USER, USER_PASSWORD, PortalPlatform
from tests.portal.test_browser import DESKTOP, PHONE, signed_in
from tests.rest.test_usage import history

pytestmark = [pytest.mark.timeout(300), pytest.mark.asyncio(loop_scope="module")]


async def write_history(platform: PortalPlatform) -> None:
    engine = create_engine(f"sqlite+aiosqlite:///{platform.info.data_dir / 'rest.db'}")
    try:
        await apply_events(engine, history())
    finally:
        await engine.dispose()


async def shown(page: Any) -> dict[str, str]:
    """Each row's key and its GPU-hours as the table shows them, once the page has drawn."""
    await page.wait_for_selector("body[data-ready=true]", timeout=15_000)
    cells = await page.eval_on_selector_all(
        "#usage-rows tr[data-key]",
        "rows => rows.map(r => [r.dataset.key, r.querySelector('[data-gpu-hours]').textContent])",
    )
    return dict(cells)


async def test_the_usage_page_shows_gpu_hours_by_user_and_by_vc_and_a_user_their_own(
    platform: PortalPlatform, browser: Any, artifacts: Path
) -> None:
    await write_history(platform)
    page = await signed_in(browser, platform, "admin", ADMIN_PASSWORD, viewport=DESKTOP)
    await page.click("#main-menu a:text('Usage')")
    await page.wait_for_url("**/usage.html")
    by_user = await shown(page)
    assert by_user["alice"] == "5.00"
    assert by_user["carol"] == "2.00"
    assert "bob" in by_user
    assert await page.text_content("#usage-key") == "User"
    assert "every user's jobs" in (await page.text_content("#usage-scope") or "")
    await page.screenshot(path=str(artifacts / "usage-by-user.png"), full_page=True)

    await page.check("#by-vc")
    await page.wait_for_url("**/usage.html?by=vc&since=7d")
    by_vc = await shown(page)
    assert by_vc["team"] == "1.00"
    assert set(by_vc) == {"default", "team"}
    assert await page.text_content("#usage-key") == "Virtual cluster"
    await page.screenshot(path=str(artifacts / "usage-by-vc.png"), full_page=True)

    await page.select_option("#since", "24h")
    await page.wait_for_url("**/usage.html?by=vc&since=24h")
    assert (await shown(page))["team"] == "1.00"
    await page.go_back()
    await page.wait_for_url("**/usage.html?by=vc&since=7d")
    assert await page.input_value("#since") == "7d"
    await page.context.close()

    mine = await signed_in(browser, platform, USER, USER_PASSWORD, viewport=PHONE)
    await mine.goto(platform.url + "/usage.html")
    assert await shown(mine) == {"alice": "5.00"}
    assert "your own jobs" in (await mine.text_content("#usage-scope") or "")
    assert await mine.text_content("#total-gpu-hours") == "5.00"
    width = await mine.evaluate("() => document.documentElement.scrollWidth")
    assert width <= PHONE["width"], width
    await mine.screenshot(path=str(artifacts / "phone-usage.png"), full_page=True)
    await mine.context.close()
