"""Errors the marketplace answers with: ``{code, message, field}``, as the REST API shapes them."""

from __future__ import annotations

from typing import Any


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
