"""The portal's pages at OpenPAI's addresses, who may open each, the shared page frame, and the
one-pass filling of the stand-alone pages (sign-in, refusals)."""

from __future__ import annotations

import html
import re
from dataclasses import dataclass


@dataclass(frozen=True)
class Page:
    path: str
    file: str
    title: str
    admin: bool = False
    nav: str | None = None  # the menu's label; None keeps it out of the menu
    script: str | None = None


PAGES: tuple[Page, ...] = (
    Page("/home.html", "home.html", "Home", nav="Home", script="home.js"),
    Page("/submit.html", "submit.html", "Submit job", nav="Submit job", script="submit.js"),
    Page("/job-list.html", "job-list.html", "Jobs", nav="Jobs", script="job-list.js"),
    Page("/job-detail.html", "job-detail.html", "Job", script="job-detail.js"),
    Page("/marketplace.html", "marketplace.html", "Marketplace", nav="Marketplace", script="marketplace.js"),
    Page("/marketplace-item.html", "marketplace-item.html", "Marketplace item", script="marketplace-item.js"),
    Page(
        "/virtual-clusters.html",
        "virtual-clusters.html",
        "Virtual clusters",
        nav="Virtual clusters",
        script="virtual-clusters.js",
    ),
    Page("/usage.html", "usage.html", "Usage", nav="Usage", script="usage.js"),
    Page("/user-view.html", "user-view.html", "Users", admin=True, nav="Users", script="user-view.js"),
    Page("/group-view.html", "group-view.html", "Groups", admin=True, nav="Groups", script="group-view.js"),
    Page(
        "/cluster-view/services.html",
        "services.html",
        "Services",
        admin=True,
        nav="Services",
        script="services.js",
    ),
    Page(
        "/cluster-view/hardware.html",
        "hardware.html",
        "Hardware",
        admin=True,
        nav="Hardware",
        script="hardware.js",
    ),
    Page("/alerts.html", "alerts.html", "Alerts", admin=True, nav="Alerts", script="alerts.js"),
    Page(
        "/marketplace-review.html",
        "marketplace-review.html",
        "Marketplace review",
        admin=True,
        nav="Review",
        script="marketplace-review.js",
    ),
    Page("/user-profile.html", "user-profile.html", "Profile", script="user-profile.js"),
)

BY_PATH = {page.path: page for page in PAGES}


def may_open(page: Page, *, admin: bool) -> bool:
    return admin or not page.admin


def may_open_job(owner: str, *, user: str, admin: bool) -> bool:
    """A job's page: its owner's and the admins'."""
    return admin or owner == user


_SLOT = re.compile(r"\{([a-z]+)\}")


def fill(template: str, **slots: str) -> str:
    """`template` with each `{name}` that `slots` names replaced by its value, in one pass.

    A value is never searched for slots itself (a `{error}` typed into the sign-in's `next` stays
    text), and braces of other names stay as they are. Values go in as given: the caller escapes.
    """
    return _SLOT.sub(lambda match: slots.get(match.group(1), match.group(0)), template)


def frame(page: Page, body: str, *, user: str, admin: bool, version: str = "") -> str:
    """The whole HTML document of a page: header, menu, the page's own body, its module script."""
    links = []
    for item in PAGES:
        if item.nav is None or not may_open(item, admin=admin):
            continue
        current = ' aria-current="page"' if item.path == page.path else ""
        links.append(f'<li><a href="{item.path}"{current}>{html.escape(item.nav)}</a></li>')
    # Static files are cached for long; `version` (a hash of their contents) changes their address
    # whenever they change.
    base = f"/static/v{version}" if version else "/static"
    script = f'<script type="module" src="{base}/{page.script}"></script>' if page.script else ""
    role = "admin" if admin else "user"
    return FRAME.format(
        title=html.escape(page.title),
        links="\n        ".join(links),
        user=html.escape(user),
        role=role,
        body=body,
        script=script,
        static=base,
    )


FRAME = """<!doctype html>
<html lang="en">
<head>
  <meta charset="utf-8">
  <meta name="viewport" content="width=device-width, initial-scale=1">
  <title>{title} · PAI</title>
  <link rel="stylesheet" href="{static}/portal.css">
  <link rel="icon" href="{static}/favicon.svg" type="image/svg+xml">
  <script type="module" src="{static}/common.js"></script>
  {script}
</head>
<body data-user="{user}" data-role="{role}">
  <a class="skip" href="#main">Skip to content</a>
  <header class="topbar">
    <a class="brand" href="/home.html"><span class="logo" aria-hidden="true">▣</span> PAI</a>
    <button type="button" class="menu-toggle" id="menu-toggle" aria-expanded="false"
      aria-controls="main-menu">Menu</button>
    <nav aria-label="Main" id="main-menu">
      <ul>
        {links}
      </ul>
    </nav>
    <div class="who">
      <a href="/user-profile.html" class="user-link">{user}</a>
      <form method="post" action="/portal/logout" id="logout-form">
        <input type="hidden" name="csrf" value="">
        <button type="submit" class="link-button">Sign out</button>
      </form>
    </div>
  </header>
  <main id="main">
    <h1>{title}</h1>
    <div id="live" class="live" role="status" aria-live="polite"></div>
{body}
  </main>
</body>
</html>
"""
