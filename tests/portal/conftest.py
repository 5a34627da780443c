"""The portal on a real embedded platform, driven by Debian's Chromium through Playwright.

One platform and one browser serve a whole test module (starting them is the slow part); each
test opens its own browser context, so cookies never leak between tests. Screenshots of every
page go to PAI_TEST_ARTIFACTS (a folder outside the repository) or pytest's temporary folder.
"""

from __future__ import annotations

import os
import shutil
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path

import httpx
import pytest
import pytest_asyncio

from pai.embedded.platform import EmbeddedPlatform, PlatformInfo, free_port

CHROMIUM = os.environ.get("PAI_CHROMIUM", "/usr/bin/chromium")
CHROMIUM_ARGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]
ADMIN_PASSWORD = "portal-admin-pass"
USER, USER_PASSWORD = "alice", "alice-password-1"
ROOT = Path(__file__).resolve().parents[2]
AXE = ROOT / "services" / "portal" / "node_modules" / "axe-core" / "axe.min.js"


@dataclass
class PortalPlatform:
    info: PlatformInfo
    admin: httpx.AsyncClient  # REST as admin
    embedded: EmbeddedPlatform | None = None  # its supervisor's children, for kill tests

    @property
    def url(self) -> str:
        return self.info.portal_url.rstrip("/")


def chromium_or_skip() -> str:
    path = shutil.which(CHROMIUM) or (CHROMIUM if Path(CHROMIUM).exists() else None)
    if path is None:
        pytest.skip(
            f"Chromium is not installed at {CHROMIUM}; `make setup` installs it (apt-get install chromium)"
        )
    return path


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def platform(tmp_path_factory: pytest.TempPathFactory) -> AsyncIterator[PortalPlatform]:
    embedded = EmbeddedPlatform(
        tmp_path_factory.mktemp("portal-platform") / "data",
        api_port=free_port(),
        admin_password=ADMIN_PASSWORD,
        extra_env={
            "PAI_RATE_LIMIT_API_PER_MIN": "10000000",
            "PAI_RATE_LIMIT_LIST_JOB_PER_MIN": "10000000",
            "PAI_PORTAL_POLL_SECONDS": "0.25",
            "PAI_PORTAL_LIST_POLL_SECONDS": "0.5",
            # The charts need a few points of history within a test's time.
            "PAI_METRICS_EVERY": "1",
            "PAI_METRICS_HISTORY_STEP": "2",
        },
    )
    try:
        info = await embedded.start()
        async with httpx.AsyncClient(base_url=info.api_url, timeout=30) as admin:
            login = await admin.post(
                "/api/v2/authn/basic/login", json={"username": "admin", "password": ADMIN_PASSWORD}
            )
            assert login.status_code == 200, login.text
            admin.headers["Authorization"] = f"Bearer {login.json()['token']}"
            created = await admin.post(
                "/api/v2/users",
                json={
                    "username": USER,
                    "password": USER_PASSWORD,
                    "admin": False,
                    "virtualCluster": ["default"],
                },
            )
            assert created.status_code == 201, created.text
            yield PortalPlatform(info, admin, embedded)
    finally:
        await embedded.stop()


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def browser() -> AsyncIterator[object]:
    executable = chromium_or_skip()
    from playwright.async_api import async_playwright

    async with async_playwright() as driver:
        launched = await driver.chromium.launch(executable_path=executable, args=CHROMIUM_ARGS)
        try:
            yield launched
        finally:
            await launched.close()


@pytest.fixture(scope="module")
def artifacts(tmp_path_factory: pytest.TempPathFactory) -> Path:
    configured = os.environ.get("PAI_TEST_ARTIFACTS")
    folder = Path(configured) / "portal" if configured else tmp_path_factory.mktemp("screenshots")
    folder.mkdir(parents=True, exist_ok=True)
    return folder
