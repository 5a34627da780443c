"""A cluster without OpenID Connect settings answers its routes with a clear 404, never a 500."""

from __future__ import annotations

from typing import Any

import pytest
from aiohttp.test_utils import TestClient


@pytest.mark.parametrize("route", ["login", "logout", "return?code=c&state=s"])
async def test_oidc_routes_name_basic_login_when_oidc_is_not_configured(
    api: TestClient[Any, Any], route: str
) -> None:
    response = await api.get(f"/api/v2/authn/oidc/{route}", allow_redirects=False)
    assert response.status == 404
    body = await response.json()
    assert body["code"] == "NoApiError"
    assert body["message"] == f"API /api/v2/authn/oidc/{route} is not found."
    assert "basic login" in body["hint"]
    assert "PAI_OIDC_ISSUER" in body["hint"]
    info = await (await api.get("/api/v2/info")).json()
    assert info["authnMethod"] == "basic"
