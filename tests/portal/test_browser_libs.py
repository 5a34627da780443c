"""The npm packages the pages use in the browser, served from where npm installed them."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
import pytest_asyncio
from aiohttp.test_utils import TestClient, TestServer
from cryptography.fernet import Fernet

from services.portal.app import build_app
from services.portal.context import BROWSER_LIBS, VERSION
from services.portal.settings import PortalSettings

Client = TestClient[Any, Any]


@pytest_asyncio.fixture
async def portal(tmp_path: Path) -> AsyncIterator[Client]:
    app = build_app(PortalSettings(data_dir=tmp_path), key=Fernet.generate_key())
    client: Client = TestClient(TestServer(app))
    await client.start_server()
    try:
        yield client
    finally:
        await client.close()


async def test_the_yaml_package_is_served_under_the_static_version_and_nothing_beside_it(
    portal: Client,
) -> None:
    if not (BROWSER_LIBS["yaml"] / "index.js").is_file():
        pytest.skip("the portal's npm packages are not installed (make setup runs npm ci)")
    version = portal.app[VERSION]
    answer = await portal.get(f"/static/v{version}/lib/yaml/index.js")
    assert answer.status == 200
    assert answer.headers["Content-Type"].startswith("text/javascript")
    assert "immutable" in answer.headers["Cache-Control"]
    assert "parseDocument" in await answer.text()
    # Its own modules, imported by relative paths, are served too.
    assert (await portal.get(f"/static/v{version}/lib/yaml/compose/composer.js")).status == 200
    for path in (
        f"/static/v{version}/lib/yaml/../../package.json",
        f"/static/v{version}/lib/yaml/%2e%2e/%2e%2e/package.json",
        f"/static/v{version}/lib/typescript/index.js",
        f"/static/v{version}/lib/yaml/missing.js",
        "/static/v000000000000/lib/yaml/index.js",
    ):
        assert (await portal.get(path)).status == 404, path


async def test_xterm_is_served_as_a_module_and_a_stylesheet_and_nothing_else_of_its_package(
    portal: Client,
) -> None:
    if not (BROWSER_LIBS["xterm"] / "lib" / "xterm.mjs").is_file():
        pytest.skip("the portal's npm packages are not installed (make setup runs npm ci)")
    version = portal.app[VERSION]
    module = await portal.get(f"/static/v{version}/lib/xterm/lib/xterm.mjs")
    assert module.status == 200
    assert module.headers["Content-Type"].startswith("text/javascript")
    assert "Terminal" in await module.text()
    sheet = await portal.get(f"/static/v{version}/lib/xterm/css/xterm.css")
    assert sheet.status == 200
    assert sheet.headers["Content-Type"].startswith("text/css")
    for path in (
        f"/static/v{version}/lib/xterm/package.json",
        f"/static/v{version}/lib/xterm/README.md",
        f"/static/v{version}/lib/xterm/../yaml/package.json",
    ):
        assert (await portal.get(path)).status == 404, path
