"""Errors the gateway answers with, in OpenPAI's ``{code, message}`` shape, like the REST API."""

from __future__ import annotations


class ApiError(Exception):
    def __init__(self, status: int, code: str, message: str) -> None:
        super().__init__(message)
        self.status = status
        self.code = code
        self.message = message

    def body(self) -> dict[str, str]:
        return {"code": self.code, "message": self.message}


def invalid_parameters(message: str) -> ApiError:
    return ApiError(400, "InvalidParametersError", message)


def unauthorized(message: str = "Guest is not allowed to do this operation; log in first.") -> ApiError:
    return ApiError(401, "UnauthorizedUserError", message)


def forbidden(message: str) -> ApiError:
    return ApiError(403, "ForbiddenUserError", message)


def not_found(message: str) -> ApiError:
    return ApiError(404, "NotFoundError", message)


def unavailable(message: str) -> ApiError:
    return ApiError(503, "ServiceUnavailableError", message)
