"""The portal's pure rules as a browser meets them: the page frame and its menu, sealed sessions
and their keys, CSRF tokens, origins, change detection and the YAML line of a problem."""

from __future__ import annotations

import base64
import hashlib
import hmac
import json
from datetime import UTC, datetime

from cryptography.fernet import Fernet

from services.portal.core import changes
from services.portal.core.pages import BY_PATH, PAGES, Page, frame, may_open
from services.portal.core.problems import line_of
from services.portal.core.security import Sealer, Session, as_key, new_key, random_secret, same_origin

USER_MENU = (
    '<li><a href="/home.html">Home</a></li>\n'
    '        <li><a href="/submit.html" aria-current="page">Submit job</a></li>\n'
    '        <li><a href="/job-list.html">Jobs</a></li>\n'
    '        <li><a href="/marketplace.html">Marketplace</a></li>\n'
    '        <li><a href="/virtual-clusters.html">Virtual clusters</a></li>\n'
    '        <li><a href="/usage.html">Usage</a></li>'
)


def test_a_users_page_has_its_title_its_menu_its_script_and_who_is_signed_in() -> None:
    html = frame(BY_PATH["/submit.html"], "<p>the body</p>", user="alice & co", admin=False)
    assert "<title>Submit job · PAI</title>" in html
    assert "<h1>Submit job</h1>" in html
    assert f"      <ul>\n        {USER_MENU}\n      </ul>" in html
    assert '<body data-user="alice &amp; co" data-role="user">' in html
    assert '<a href="/user-profile.html" class="user-link">alice &amp; co</a>' in html
    assert '<link rel="stylesheet" href="/static/portal.css">' in html
    assert '<script type="module" src="/static/common.js"></script>' in html
    assert '  <script type="module" src="/static/submit.js"></script>\n</head>' in html
    assert (
        '<div id="live" class="live" role="status" aria-live="polite"></div>\n<p>the body</p>\n  </main>'
        in html
    )


def test_an_admins_menu_holds_every_page_with_a_label_in_order() -> None:
    html = frame(BY_PATH["/alerts.html"], "", user="root", admin=True, version="v9")
    labels = [page.nav for page in PAGES if page.nav]
    assert labels == [
        "Home",
        "Submit job",
        "Jobs",
        "Marketplace",
        "Virtual clusters",
        "Usage",
        "Users",
        "Groups",
        "Services",
        "Hardware",
        "Alerts",
        "Review",
    ]
    positions = [html.index(f">{label}</a></li>") for label in labels]
    assert positions == sorted(positions)
    assert '<li><a href="/alerts.html" aria-current="page">Alerts</a></li>' in html
    assert html.count('aria-current="page"') == 1
    assert '<body data-user="root" data-role="admin">' in html
    assert '<script type="module" src="/static/vv9/alerts.js"></script>' in html
    assert '<link rel="icon" href="/static/vv9/favicon.svg" type="image/svg+xml">' in html


def test_a_page_without_a_script_or_a_menu_entry_has_neither() -> None:
    page = Page("/plain.html", "plain.html", "Plain <page>")
    html = frame(page, "", user="bob", admin=False)
    assert "<title>Plain &lt;page&gt; · PAI</title>" in html
    assert "plain.html" not in html
    assert html.count("<script") == 1, "only the common script"
    assert '<script type="module" src="/static/common.js"></script>\n  \n</head>' in html
    assert may_open(page, admin=False)
    assert may_open(Page("/a.html", "a.html", "A", admin=True), admin=True)


def test_a_session_key_is_kept_or_derived_from_any_secret() -> None:
    key = new_key()
    assert as_key(key) == key
    derived = as_key(b"any secret at all")
    assert derived == base64.urlsafe_b64encode(
        hashlib.sha256(b"pai-portal-session\0any secret at all").digest()
    )
    Fernet(derived)
    assert as_key(b"another") != derived


def test_a_session_opens_as_it_was_sealed_until_it_expires() -> None:
    sealer = Sealer(new_key())
    admin = Session("tok", "root", True, expires=1_001)
    assert sealer.open(sealer.seal(admin), now=1_000) == admin
    assert sealer.open(sealer.seal(admin), now=1_001) is None


def test_a_sealed_body_missing_a_field_or_of_the_wrong_kind_opens_nothing() -> None:
    key = new_key()
    sealer, fernet = Sealer(key), Fernet(key)
    for body in (
        {"t": "x", "u": "a", "a": False},
        {"t": "x", "u": "a", "a": False, "e": "soon"},
        [1],
        "text",
    ):
        assert sealer.open(fernet.encrypt(json.dumps(body).encode()).decode(), now=0) is None
    assert sealer.open(fernet.encrypt(b"not json").decode(), now=0) is None
    assert sealer.open("not a token", now=0) is None


def test_the_csrf_token_is_the_hmac_of_the_cookie_under_the_portals_key() -> None:
    key = new_key()
    sealer = Sealer(key)
    expected = hmac.new(
        hashlib.sha256(b"pai-portal-csrf" + key).digest(), b"cookie", hashlib.sha256
    ).hexdigest()
    assert sealer.csrf_token("cookie") == expected
    assert sealer.csrf_ok("cookie", expected)
    assert not sealer.csrf_ok("cookie", expected[:-1] + "0" if expected[-1] != "0" else expected[:-1] + "1")
    assert Sealer(new_key()).csrf_token("cookie") != expected


def test_a_random_secret_is_long_and_new_each_time() -> None:
    first, second = random_secret(), random_secret()
    assert len(first) == 43
    assert first != second


def test_a_write_from_another_origin_is_refused() -> None:
    assert same_origin("", "pai.example.com", "https")
    assert same_origin("http://pai.example.com", "pai.example.com", "https")
    assert same_origin("https://pai.example.com", "pai.example.com", "https")
    assert same_origin("ws://pai.example.com", "pai.example.com", "ws")
    assert not same_origin("https://pai.example.com", None, "https")
    assert not same_origin("https://pai.example.com", "", "https")
    assert not same_origin("https://pai.example.com:8443", "pai.example.com", "https")
    assert not same_origin("ftp://pai.example.com", "pai.example.com", "https")


def test_the_digest_of_an_answer_is_its_sorted_json_hashed() -> None:
    answer = {"b": [1, 2], "a": datetime(2026, 1, 1, tzinfo=UTC)}
    text = json.dumps(answer, sort_keys=True, default=str)
    assert changes.digest(answer) == hashlib.sha256(text.encode()).hexdigest()
    assert changes.digest({"a": 1}) != changes.digest({"a": 2})


def test_job_states_are_keyed_by_user_and_name() -> None:
    assert changes.job_states([{"username": "a", "name": "x~y", "state": "RUNNING"}, {"name": "z"}]) == {
        "a~x~y": "RUNNING",
        "None~z": "None",
    }


def test_a_job_whose_name_holds_the_separator_is_told_whole() -> None:
    assert changes.changed_jobs({}, {"a~x~y": "RUNNING"}) == [
        {"username": "a", "name": "x~y", "state": "RUNNING", "previous": ""}
    ]
    assert changes.changed_jobs({"a~x": "WAITING", "gone~j": "RUNNING"}, {"a~x": "WAITING"}) == []


def test_the_first_line_named_in_a_message_is_the_problems() -> None:
    assert line_of("(line 3) then (line 9)") == 3
    assert line_of("at (line 120)") == 120
    assert line_of("line 5") is None
    assert line_of("(line x)") is None
