"""Errors the API answers with, in OpenPAI's body shape ``{code, message}``.

OpenPAI clients (its SDK, its web portal, scripts) branch on ``code``, so the codes are
OpenPAI's own (see its REST API v2 specification). Any route raises an ``ApiError``; one
middleware in ``app.py`` turns it into the JSON response. Extra fields (the protocol's
problem list on a 400) ride along without changing the shape older clients read.
"""

from __future__ import annotations

from typing import Any


class ApiError(Exception):
    """An error response: HTTP status, OpenPAI error code, a message a user can act on."""

    def __init__(self, status: int, code: str, message: str, **extra: Any) -> None:
        super().__init__(message)
        self.status = status
        self.code = code
        self.message = message
        self.extra = extra
        self.headers: dict[str, str] = {}  # e.g. Retry-After on a 503

    def body(self) -> dict[str, Any]:
        return {"code": self.code, "message": self.message, **self.extra}


def invalid_parameters(message: str, **extra: Any) -> ApiError:
    return ApiError(400, "InvalidParametersError", message, **extra)


def unauthorized(message: str = "Guest is not allowed to do this operation; log in first.") -> ApiError:
    return ApiError(401, "UnauthorizedUserError", message)


def forbidden(message: str) -> ApiError:
    return ApiError(403, "ForbiddenUserError", message)


def no_job(user: str, job: str) -> ApiError:
    return ApiError(404, "NoJobError", f"Job {user}~{job} is not found.")


def no_task(message: str) -> ApiError:
    return ApiError(404, "NoTaskError", message)


def no_task_log(message: str) -> ApiError:
    return ApiError(404, "NoTaskLogError", message)


def no_user(user: str) -> ApiError:
    return ApiError(404, "NoUserError", f"User {user} is not found.")


def incorrect_password() -> ApiError:
    return ApiError(400, "IncorrectPasswordError", "Password is incorrect.")


def conflict_job(user: str, job: str) -> ApiError:
    return ApiError(
        409,
        "ConflictJobError",
        f"Job name {user}~{job} already exists; choose another name in the job config.",
    )


def unavailable(message: str) -> ApiError:
    # OpenPAI has no dedicated code for a dependency being down; UnknownError is its catch-all.
    return ApiError(503, "UnknownError", message)
