"""The portal's pure parts: sealed sessions, CSRF tokens, page rights, change detection."""

from __future__ import annotations

from services.portal.core import changes
from services.portal.core.pages import BY_PATH, PAGES, fill, frame, may_open, may_open_job
from services.portal.core.problems import line_of
from services.portal.core.security import Sealer, Session, new_key, same_origin


def test_a_sealed_session_opens_only_with_its_key_and_before_it_expires() -> None:
    sealer = Sealer(new_key())
    session = Session("the-token", "alice", False, expires=2_000)
    value = sealer.seal(session)
    assert "the-token" not in value, "the cookie does not show the token"
    assert sealer.open(value, now=1_000) == session
    assert sealer.open(value, now=2_000) is None, "expired"
    assert Sealer(new_key()).open(value, now=1_000) is None, "another key"
    assert sealer.open(value[:-4] + "AAAA", now=1_000) is None, "tampered"
    assert sealer.open("", now=1_000) is None


def test_the_csrf_token_belongs_to_one_cookie() -> None:
    sealer = Sealer(new_key())
    one = sealer.seal(Session("t1", "alice", False, 9_999))
    two = sealer.seal(Session("t2", "bob", False, 9_999))
    token = sealer.csrf_token(one)
    assert sealer.csrf_ok(one, token)
    assert not sealer.csrf_ok(two, token)
    assert not sealer.csrf_ok(one, None)
    assert not sealer.csrf_ok(one, "")


def test_origins() -> None:
    assert same_origin(None, "pai.example.com", "https")
    assert same_origin("https://pai.example.com", "pai.example.com", "http"), "TLS ends at the Ingress"
    assert not same_origin("https://evil.example", "pai.example.com", "https")


def test_admin_pages_are_for_admins_and_job_pages_for_owners() -> None:
    admin_pages = {page.path for page in PAGES if page.admin}
    assert admin_pages == {
        "/user-view.html",
        "/group-view.html",
        "/cluster-view/services.html",
        "/marketplace-review.html",
        "/cluster-view/hardware.html",
        "/alerts.html",
    }
    assert all(may_open(page, admin=True) for page in PAGES)
    assert not any(may_open(page, admin=False) for page in PAGES if page.admin)
    assert may_open_job("alice", user="alice", admin=False)
    assert not may_open_job("bob", user="alice", admin=False)
    assert may_open_job("bob", user="root", admin=True)


def test_the_frame_escapes_the_user_and_shows_the_menu_by_rights() -> None:
    page = BY_PATH["/home.html"]
    html = frame(page, "<p>body</p>", user="<script>x</script>", admin=False, version="abc123")
    assert "<script>x</script>" not in html
    assert "&lt;script&gt;" in html
    assert "/user-view.html" not in html
    assert '<script type="module" src="/static/vabc123/home.js">' in html
    assert "/user-view.html" in frame(page, "", user="root", admin=True)


def test_changes_name_the_jobs_that_moved() -> None:
    before = changes.job_states([{"username": "a", "name": "x", "state": "WAITING"}])
    after = changes.job_states(
        [
            {"username": "a", "name": "x", "state": "RUNNING"},
            {"username": "b", "name": "y", "state": "WAITING"},
        ]
    )
    assert changes.changed_jobs(before, after) == [
        {"username": "a", "name": "x", "state": "RUNNING", "previous": "WAITING"},
        {"username": "b", "name": "y", "state": "WAITING", "previous": ""},
    ]
    assert changes.changed_jobs(after, after) == []
    assert changes.digest({"a": 1, "b": 2}) == changes.digest({"b": 2, "a": 1})


def test_the_line_of_a_problem() -> None:
    assert line_of("must be at least 1, not -3 (line 14)") == 14
    assert line_of("a job must be a YAML mapping") is None


def test_a_template_is_filled_in_one_pass() -> None:
    template = '<input value="{next}">{error}<style>a {color: red}</style>{unknown}'
    filled = fill(template, next="/jobs?x={error}", error="<p>bad</p>")
    assert filled == '<input value="/jobs?x={error}"><p>bad</p><style>a {color: red}</style>{unknown}', (
        "a value is not searched for slots, and other braces stay"
    )
    assert fill("{a}{b}", a="{b}", b="") == "{b}"
