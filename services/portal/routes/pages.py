"""The pages: each one framed for the signed-in user, or refused; the static files under an
address that changes with them."""

from __future__ import annotations

import hashlib
import html
from urllib.parse import urlencode

from aiohttp import web

from services.portal.context import BROWSER_LIBS, HERE, STATIC_DIR, TEMPLATES, VERSION, Handler, session_of
from services.portal.core.pages import Page, fill, frame, may_open, may_open_job


async def versioned_static(request: web.Request) -> web.StreamResponse:
    """/static/v<version>/<file>: a file under an address that changes with the files, cached long."""
    name = request.match_info["name"]
    path = (STATIC_DIR / name).resolve()
    if request.match_info["version"] != request.app[VERSION] or not path.is_relative_to(STATIC_DIR):
        raise web.HTTPNotFound()
    if not path.is_file():
        raise web.HTTPNotFound()
    return web.FileResponse(path, headers={"Cache-Control": "public, max-age=31536000, immutable"})


# What a package's browser build may serve: its modules and its stylesheets.
_LIB_TYPES = {".js": "text/javascript", ".mjs": "text/javascript", ".css": "text/css"}


async def browser_lib(request: web.Request) -> web.StreamResponse:
    """/static/v<version>/lib/<package>/<file>: an npm package's browser build (ES modules and
    stylesheets), where npm installed it; 404 for any other package or a file outside its build."""
    folder = BROWSER_LIBS.get(request.match_info["package"])
    if folder is None or request.match_info["version"] != request.app[VERSION]:
        raise web.HTTPNotFound()
    path = (folder / request.match_info["path"]).resolve()
    kind = _LIB_TYPES.get(path.suffix)
    if not path.is_relative_to(folder.resolve()) or kind is None or not path.is_file():
        raise web.HTTPNotFound()
    return web.FileResponse(
        path, headers={"Cache-Control": "public, max-age=31536000, immutable", "Content-Type": kind}
    )


def static_version() -> str:
    """A hash of the static files and of the npm packages' pinned versions (package-lock.json)."""
    digest = hashlib.sha256()
    for path in sorted(STATIC_DIR.rglob("*")):
        if path.is_file():
            digest.update(path.name.encode() + path.read_bytes())
    lock = HERE / "package-lock.json"
    if lock.is_file():
        digest.update(lock.read_bytes())
    return digest.hexdigest()[:12]


def _refused(request: web.Request, page_title: str, message: str, status: int) -> web.Response:
    template = request.app[TEMPLATES]["refused.html"]
    text = fill(template, title=html.escape(page_title), message=html.escape(message))
    return web.Response(text=text, content_type="text/html", status=status)


def page_handler(page: Page) -> Handler:
    async def handler(request: web.Request) -> web.StreamResponse:
        session = session_of(request)
        if session is None:
            target = request.path_qs
            raise web.HTTPFound("/index.html?" + urlencode({"next": target}))
        if not may_open(page, admin=session.admin):
            return _refused(request, page.title, "This page is for administrators.", 403)
        if page.path == "/job-detail.html":
            owner = request.query.get("username", "")
            if not owner or not request.query.get("jobName"):
                return _refused(request, page.title, "Name the job: ?username=USER&jobName=NAME.", 400)
            if not may_open_job(owner, user=session.user, admin=session.admin):
                return _refused(request, page.title, "This job belongs to another user.", 403)
        body = request.app[TEMPLATES][page.file]
        text = frame(page, body, user=session.user, admin=session.admin, version=request.app[VERSION])
        return web.Response(text=text, content_type="text/html", headers={"Cache-Control": "no-store"})

    return handler
