"""One trailing slash is accepted on every route, as OpenPAI's Express router accepts it.

OpenPAI's clients (its JavaScript SDK among them) call ``POST /api/v2/users/`` as often as
``/api/v2/users``, and its swagger writes some paths with the slash (``.../group/``). Each
route is registered once, without it; this resource, registered after every other one,
matches what no route matched and, when the path ends in ``/``, resolves the same request
without that slash. The handler then serves the request as if it had been sent without the
slash: same method, headers, body and middlewares, no redirect (a redirect would make
``curl -X POST .../users/`` create nothing). It owns no route, so the OpenAPI document still
lists each operation once.
"""

from __future__ import annotations

from collections.abc import Iterator

from aiohttp import web
from aiohttp.web_urldispatcher import AbstractResource, AbstractRoute, UrlMappingMatchInfo, _InfoDict
from yarl import URL


class TrailingSlashResource(AbstractResource):
    """The routes of ``router`` again, for a path ending in one ``/``; tried after every route."""

    def __init__(self, router: web.UrlDispatcher) -> None:
        super().__init__(name=None)
        self._router = router

    @property
    def canonical(self) -> str:
        # Indexed under "/", the last place the router looks for a path.
        return "/"

    def url_for(self, **kwargs: str) -> URL:
        raise NotImplementedError("the trailing-slash resource builds no URLs")

    def add_prefix(self, prefix: str) -> None:
        raise NotImplementedError("the trailing-slash resource is not for sub-applications")

    def get_info(self) -> _InfoDict:
        return {}

    def raw_match(self, path: str) -> bool:
        return False

    def __len__(self) -> int:
        return 0

    def __iter__(self) -> Iterator[AbstractRoute]:
        return iter(())

    async def resolve(self, request: web.Request) -> tuple[UrlMappingMatchInfo | None, set[str]]:
        path = request.rel_url.raw_path
        if len(path) < 2 or not path.endswith("/") or path.endswith("//"):
            return None, set()
        bare = request.clone(rel_url=request.rel_url.with_path(path[:-1], encoded=True))
        match = await self._router.resolve(bare)
        exception = match.http_exception
        if exception is None:
            return match, set()
        if isinstance(exception, web.HTTPMethodNotAllowed):
            return None, set(exception.allowed_methods)
        return None, set()


def accept_trailing_slash(app: web.Application) -> None:
    """Register after every route: a path with one trailing ``/`` reaches its route without it."""
    app.router.register_resource(TrailingSlashResource(app.router))
