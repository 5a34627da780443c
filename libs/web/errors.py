"""Errors answered in OpenPAI's ``{code, message}`` shape (plus ``field`` naming what to fix), and
the middleware that turns them, unknown routes and unexpected failures into such answers.

The events gateway and the marketplace use these; REST keeps its own table of OpenPAI's errors
(services/rest/core/errors.py), whose messages and hints follow the original rest-server's.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

import structlog
from aiohttp import web
from aiohttp.typedefs import Middleware

log = structlog.get_logger(__name__)

Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]


class ApiError(Exception):
    def __init__(self, status: int, code: str, message: str, field: str | None = None, **extra: Any) -> None:
        super().__init__(message)
        self.status = status
        self.code = code
        self.message = message
        self.field = field
        self.extra = extra

    def body(self) -> dict[str, Any]:
        body: dict[str, Any] = {"code": self.code, "message": self.message}
        if self.field:
            body["field"] = self.field
        return {**body, **self.extra}


def invalid(message: str, field: str | None = None, **extra: Any) -> ApiError:
    return ApiError(400, "InvalidParametersError", message, field, **extra)


def unauthorized(message: str = "Guest is not allowed to do this operation; log in first.") -> ApiError:
    return ApiError(401, "UnauthorizedUserError", message)


def forbidden(message: str) -> ApiError:
    return ApiError(403, "ForbiddenUserError", message)


def not_found(message: str) -> ApiError:
    return ApiError(404, "NotFoundError", message)


def conflict(message: str) -> ApiError:
    return ApiError(409, "ConflictError", message)


def unavailable(message: str) -> ApiError:
    return ApiError(503, "ServiceUnavailableError", message)


def error_middleware(where_routes_are: str, too_large: str | None = None) -> Middleware:
    """Answers an ApiError as itself, an unknown route as NoApiError pointing to
    `where_routes_are`, a body over the limit as `too_large` (when given), anything else as a
    500 whose details go to the log, never to the client."""

    @web.middleware
    async def middleware(request: web.Request, handler: Handler) -> web.StreamResponse:
        try:
            return await handler(request)
        except ApiError as exc:
            return web.json_response(exc.body(), status=exc.status)
        except web.HTTPException as exc:
            if exc.status in (404, 405):
                message = f"No API {request.method} {request.path}; {where_routes_are}"
                return web.json_response({"code": "NoApiError", "message": message}, status=exc.status)
            if exc.status == 413 and too_large is not None:
                return web.json_response(
                    {"code": "RequestEntityTooLargeError", "message": too_large}, status=413
                )
            raise
        except Exception:
            log.exception("request failed", method=request.method, path=request.path)
            return web.json_response(
                {"code": "UnknownError", "message": "Internal error; the service log has the details."},
                status=500,
            )

    return middleware
