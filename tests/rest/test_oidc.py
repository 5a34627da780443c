"""OpenID Connect sign-in end to end against a fake provider, and what the service refuses.

The browser's part is played by the test client's own session (it keeps the state cookie):
login redirects to the provider, the provider approves and redirects to our return route,
which redirects to the portal with a one-time code bound to the portal's state (never the
token); the portal trades it for a token that then works like a basic-login token.
"""

from __future__ import annotations

from typing import Any
from urllib.parse import parse_qs, urlsplit

import pytest
from aiohttp.test_utils import TestClient

from services.rest.routes.oidc import PROVIDERS
from services.rest.settings import RestSettings
from tests.rest.fake_idp import CLIENT_ID, CLIENT_SECRET, FakeIdp

Client = TestClient[Any, Any]
PORTAL = "http://portal.example/index.html"


@pytest.fixture
def rest_settings(rest_settings: RestSettings, idp: FakeIdp) -> RestSettings:
    return rest_settings.model_copy(
        update={
            "oidc_issuer": idp.issuer,
            "oidc_client_id": CLIENT_ID,
            "oidc_client_secret": CLIENT_SECRET,
            "oidc_portal_url": PORTAL,
        }
    )


PORTAL_STATE = "portal-state-1"


async def start_sign_in(api: Client) -> str:
    """Login's redirect followed to the provider; returns where the provider sends the browser."""
    login = await api.get(
        "/api/v2/authn/oidc/login", params={"portalState": PORTAL_STATE}, allow_redirects=False
    )
    assert login.status == 302
    authorize = login.headers["Location"]
    approved = await api.session.get(authorize, allow_redirects=False)
    assert approved.status == 302
    return approved.headers["Location"]


async def finish(api: Client, back: str) -> Any:
    return await api.session.get(back, allow_redirects=False)


async def redeem(api: Client, done: Any, state: str = PORTAL_STATE) -> Any:
    given = parse_qs(urlsplit(done.headers["Location"]).query)
    return await api.post("/api/v2/authn/oidc/code", json={"code": given["code"][0], "state": state})


async def token_of(api: Client, done: Any) -> str:
    traded = await redeem(api, done)
    assert traded.status == 200, await traded.text()
    token: str = (await traded.json())["token"]
    return token


async def test_signing_in_creates_the_user_and_hands_the_portal_a_working_token(
    api: Client, idp: FakeIdp, admin_headers: dict[str, str]
) -> None:
    login = await api.get("/api/v2/authn/oidc/login", allow_redirects=False)
    query = parse_qs(urlsplit(login.headers["Location"]).query)
    assert login.headers["Location"].startswith(idp.issuer + "/authorize?")
    assert query["client_id"] == [CLIENT_ID]
    assert query["response_type"] == ["code"]
    assert query["state"][0]
    assert query["nonce"][0]
    assert "openid" in query["scope"][0]
    assert query["redirect_uri"][0].endswith("/api/v2/authn/oidc/return")

    back = await start_sign_in(api)
    done = await finish(api, back)
    assert done.status == 302, await done.text()
    target = urlsplit(done.headers["Location"])
    assert f"{target.scheme}://{target.netloc}{target.path}" == PORTAL
    given = parse_qs(target.query)
    # The portal gets a one-time code and its own state back, never a bearer token in the URL.
    assert set(given) == {"code", "state"}
    assert given["state"] == [PORTAL_STATE]
    assert idp.exchanged[-1]["grant_type"] == "authorization_code"
    # The code is good only with the state it is bound to, and only once.
    assert (await redeem(api, done, state="another-browsers-state")).status == 401
    traded = await redeem(api, done)
    assert traded.status == 200, await traded.text()
    body = await traded.json()
    assert (body["user"], body["admin"]) == ("dana", False)
    assert (await redeem(api, done)).status == 401

    me = await api.get("/api/v2/users/me", headers={"Authorization": f"Bearer {body['token']}"})
    assert me.status == 200
    body = await me.json()
    assert body["username"] == "dana"
    assert body["email"] == "dana@example.com"
    assert body["grouplist"] == ["default"]
    info = await (await api.get("/api/v2/info")).json()
    assert info["authnMethod"] == "OIDC"

    # A second sign-in finds the same user rather than creating another.
    again = await finish(api, await start_sign_in(api))
    assert (await (await redeem(api, again)).json())["user"] == "dana"
    users = await (await api.get("/api/v2/users", headers=admin_headers)).json()
    assert [u["username"] for u in users].count("dana") == 1


@pytest.mark.parametrize(
    ("tamper", "why"),
    [
        ({"secret": "not-the-client-secret-at-all-0123456789"}, "Signature verification failed"),
        ({"claims": {"aud": "another-client"}}, "Audience doesn't match"),
        ({"claims": {"iss": "http://impostor.example"}}, "Invalid issuer"),
        ({"claims": {"nonce": "replayed"}}, "nonce"),
    ],
    ids=["bad signature", "wrong audience", "wrong issuer", "wrong nonce"],
)
async def test_an_id_token_that_does_not_verify_is_refused_and_creates_no_user(
    api: Client, idp: FakeIdp, admin_headers: dict[str, str], tamper: dict[str, Any], why: str
) -> None:
    idp.tamper = tamper
    done = await finish(api, await start_sign_in(api))
    assert done.status == 401
    body = await done.json()
    assert body["code"] == "UnauthorizedUserError"
    assert why in body["message"]
    users = await (await api.get("/api/v2/users", headers=admin_headers)).json()
    assert "dana" not in [u["username"] for u in users]


async def test_a_return_with_another_state_or_from_another_browser_is_refused(api: Client) -> None:
    back = await start_sign_in(api)
    forged = back.replace("state=", "state=x", 1)
    wrong = await finish(api, forged)
    assert wrong.status == 400
    assert (await wrong.json())["code"] == "InvalidParametersError"
    api.session.cookie_jar.clear()
    elsewhere = await finish(api, back)
    assert elsewhere.status == 400
    assert "not started in this browser" in (await elsewhere.json())["message"]


async def test_logout_revokes_the_token_and_redirects_to_the_providers_end_session(
    api: Client, idp: FakeIdp
) -> None:
    done = await finish(api, await start_sign_in(api))
    token = await token_of(api, done)
    headers = {"Authorization": f"Bearer {token}"}
    out = await api.get("/api/v2/authn/oidc/logout", headers=headers, allow_redirects=False)
    assert out.status == 302
    target = urlsplit(out.headers["Location"])
    assert f"{target.scheme}://{target.netloc}{target.path}" == idp.issuer + "/logout"
    assert parse_qs(target.query)["post_logout_redirect_uri"] == [PORTAL]
    assert (await api.get("/api/v2/users/me", headers=headers)).status == 401

    idp.end_session = False
    for provider in PROVIDERS.values():
        provider.metadata = None  # discovered again: now without an end-session endpoint
    portal = await api.get("/rest-server/api/v2/authn/oidc/logout", allow_redirects=False)
    assert portal.status == 302
    assert portal.headers["Location"] == PORTAL


async def test_rs256_id_tokens_verify_against_the_providers_jwks(api: Client, idp: FakeIdp) -> None:
    rsa = pytest.importorskip("cryptography.hazmat.primitives.asymmetric.rsa")
    idp.private_key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    done = await finish(api, await start_sign_in(api))
    assert done.status == 302, await done.text()
    # A rotated key under a new id: the service fetches the JWKS again and verifies.
    idp.private_key, idp.kid = rsa.generate_private_key(public_exponent=65537, key_size=2048), "k2"
    assert (await finish(api, await start_sign_in(api))).status == 302
