"""Errors the API answers with: OpenPAI's statuses, codes and message texts, in one table.

OpenPAI clients (its JavaScript SDK, its web portal, scripts) branch on the status, on
``code`` and sometimes on ``message`` itself, so every error a route raises comes from the
table below. Where OpenPAI's rest-server defines an error, the entry carries its status, its
code and its message text exactly as the rest-server's ``createError(status, code, message)``
calls write them (its controllers, models and middlewares; where its swagger's examples say
otherwise, the rest-server wins, since that is what clients met). Errors OpenPAI has no
counterpart for (a bad query value, a bus outage) use its nearest code with this platform's
own text, and are marked as such.

This platform's advice on what to do next never goes into ``message``: it rides in a separate
``hint`` field, which OpenPAI's clients ignore. Extra fields (the job protocol's problem list
on a 400) ride along the same way. One middleware in ``app.py`` turns an ``ApiError`` into the
JSON response ``{code, message[, hint][, ...]}``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any


class ApiError(Exception):
    """An error response: HTTP status, OpenPAI error code, OpenPAI's message, an optional hint."""

    def __init__(self, status: int, code: str, message: str, hint: str | None = None, **extra: Any) -> None:
        super().__init__(message)
        self.status = status
        self.code = code
        self.message = message
        self.hint = hint
        self.extra = extra
        self.headers: dict[str, str] = {}  # e.g. Retry-After on a 503

    def body(self) -> dict[str, Any]:
        body: dict[str, Any] = {"code": self.code, "message": self.message}
        if self.hint:
            body["hint"] = self.hint
        return {**body, **self.extra}


@dataclass(frozen=True)
class OpenPaiError:
    """One row of the table: status, code and message template (``{name}`` fields)."""

    status: int
    code: str
    template: str

    def __call__(self, hint: str | None = None, **values: Any) -> ApiError:
        """The error with the template filled from ``values``; ``hint`` is this platform's advice."""
        extra = {key: value for key, value in values.items() if f"{{{key}}}" not in self.template}
        named = {key: value for key, value in values.items() if key not in extra}
        return ApiError(self.status, self.code, self.template.format(**named), hint, **extra)


# --- Authentication and rights (rest-server middlewares/token.js and the v2 controllers) ---
GUEST = OpenPaiError(401, "UnauthorizedUserError", "Guest is not allowed to do this operation.")
BAD_TOKEN = OpenPaiError(401, "UnauthorizedUserError", "Your token is invalid.")
APPLICATION_TOKEN = OpenPaiError(
    403, "ForbiddenUserError", "Applications are not allowed to do this operation."
)
NON_ADMIN = OpenPaiError(403, "ForbiddenUserError", "Non-admin is not allow to do this operation.")
OTHER_USERS_DATA = OpenPaiError(403, "ForbiddenUserError", "Can't update other user's data")
WRONG_OLD_PASSWORD = OpenPaiError(403, "ForbiddenUserError", "Pls input the correct password.")
NOT_IN_VIRTUAL_CLUSTER = OpenPaiError(
    403, "ForbiddenUserError", "User {user} is not allowed to do operation in {vc}"
)
NOT_JOB_EXECUTOR = OpenPaiError(403, "ForbiddenUserError", "User {user} is not allowed to execute job {job}.")
# Not OpenPAI's (its job details are public): a private cluster's refusal of another user's job.
NOT_JOB_READER = OpenPaiError(403, "ForbiddenUserError", "User {user} is not allowed to read job {job}.")
NOT_TAG_ADDER = OpenPaiError(403, "ForbiddenUserError", "User {user} is not allowed to add tag to job {job}.")
NOT_TAG_REMOVER = OpenPaiError(
    403, "ForbiddenUserError", "User {user} is not allowed to delete tag from job {job}."
)
NOT_STORAGE_USER = OpenPaiError(403, "ForbiddenUserError", "User {user} is not allowed to access {storage}.")
# This platform's own text: OpenPAI revokes only the caller's own tokens too.
NOT_TOKEN_OWNER = OpenPaiError(403, "ForbiddenUserError", "A token can be revoked only by its owner.")
REMOVE_ADMIN = OpenPaiError(403, "RemoveAdminError", "Admin {user} is not allowed to remove.")

# This platform's own text: the OpenID Connect provider refused the sign-in.
SIGN_IN_REFUSED = OpenPaiError(401, "UnauthorizedUserError", "Sign-in refused: {reason}.")

# --- Users and groups (rest-server controllers/v2/user.js, group.js) ---
# Login and GET /users/{user} answer 400 for an unknown user; the updates answer 404.
NO_USER = OpenPaiError(400, "NoUserError", "User {user} is not found.")
NO_USER_TO_UPDATE = OpenPaiError(404, "NoUserError", "User {user} not found.")
INCORRECT_PASSWORD = OpenPaiError(400, "IncorrectPasswordError", "Password is incorrect.")
# Login answers an unknown user and a wrong password alike (routes/auth.py, logins.py): OpenPAI's
# rest-server says NoUserError for the first, which tells anyone which names exist.
LOGIN_FAILED = OpenPaiError(400, "IncorrectPasswordError", "User name or password is incorrect.")
CONFLICT_USER = OpenPaiError(409, "ConflictUserError", "User name {user} already exists.")
NO_GROUP = OpenPaiError(404, "NoGroupError", "Group {group} is not found.")
NO_GROUP_TO_JOIN = OpenPaiError(404, "NoGroupError", "Updated nonexistent group: {group}")
NO_GROUPS_TO_JOIN = OpenPaiError(404, "NoGroupError", "Updated nonexistent grouplist: {groups}")
# This platform's own: OpenPAI answers a duplicate group with a 500 UnknownError.
CONFLICT_GROUP = OpenPaiError(409, "ConflictGroupError", "Group name {group} already exists.")
# This platform's own: the built-in groups keep every user's default rights.
BUILT_IN_GROUP = OpenPaiError(403, "ForbiddenUserError", "Group {group} is built in and cannot be removed.")
NO_VC_TO_JOIN = OpenPaiError(400, "NoVirtualClusterError", "Try to update nonexist: {vcs}")

# --- Virtual clusters and storages ---
NO_VIRTUAL_CLUSTER = OpenPaiError(404, "NoVirtualClusterError", "Virtual cluster {vc} is not found.")
# A job naming an unknown virtual cluster (rest-server middlewares/v2/hived.js, protocol.js).
NO_VIRTUAL_CLUSTER_FOR_JOB = OpenPaiError(400, "NoVirtualClusterError", "Virtual cluster {vc} is not found.")
# This platform's own: the HiveD config change the scheduler refused for running jobs.
CONFLICT_VIRTUAL_CLUSTER = OpenPaiError(409, "ConflictVirtualClusterError", "{reason}")
NO_STORAGE = OpenPaiError(404, "NoStorageError", "Storage {storage} is not found.")

# --- Jobs (rest-server models/v2/job/k8s.js, controllers/v2/job.js, log.js) ---
NO_JOB = OpenPaiError(404, "NoJobError", "Job {job} is not found.")
NO_JOB_ATTEMPT = OpenPaiError(404, "NoJobError", "JobAttemptId {attempt} is not found in {job}.")
CONFLICT_JOB = OpenPaiError(409, "ConflictJobError", "Job {job} already exists.")
NO_JOB_CONFIG = OpenPaiError(404, "NoJobConfigError", "Config of job {job} is not found.")
NO_TAG = OpenPaiError(404, "NoTagError", "Tag {tag} is not found for job {job}.")
NO_TASK = OpenPaiError(404, "NoTaskError", "Task {task} is not found.")
NO_TASK_LOG = OpenPaiError(404, "NoTaskLogError", "Log of task is not found.")
# This platform's own: a command in a running task (`pai job exec`) is for its owner and admins,
# and needs the task to run.
NOT_TASK_ENTERER = OpenPaiError(
    403, "ForbiddenUserError", "User {user} is not allowed to run commands in job {job}."
)
TASK_NOT_RUNNING = OpenPaiError(409, "TaskNotRunningError", "Task {task} of job {job} is not running.")

# --- Requests ---
NO_API = OpenPaiError(404, "NoApiError", "API {url} is not found.")
# OpenPAI's parameter validation names the field in its message; so does ours.
INVALID_PARAMETERS = OpenPaiError(400, "InvalidParametersError", "{reason}")
# A job protocol that does not validate (rest-server middlewares/v2/protocol.js).
INVALID_PROTOCOL = OpenPaiError(400, "InvalidProtocolError", "{reason}")
# OpenPAI's limiter (express-rate-limit) answers 429 with this text; the code is this platform's.
TOO_MANY_REQUESTS = OpenPaiError(429, "TooManyRequestsError", "Too many requests, please try again later.")
UNKNOWN = OpenPaiError(500, "UnknownError", "{reason}")
# This platform's own: a dependency (the bus, the scheduler, the alerter) did not answer.
# OpenPAI has no code for it; UnknownError is its catch-all, 503 says a retry may work.
UNAVAILABLE = OpenPaiError(503, "UnknownError", "{reason}")
# This platform's own too: a part it needs is down or restarting (the bus, the events gateway,
# the monitor, the alerter), said so, with Retry-After; and a body over the admin's size limit.
SERVICE_UNAVAILABLE = OpenPaiError(503, "ServiceUnavailableError", "{reason}")
REQUEST_TOO_LARGE = OpenPaiError(413, "RequestEntityTooLargeError", "{reason}")
# This platform's own too: a write refused because the disk under the database or the bus is
# full. OpenPAI has no code for it; 507 Insufficient Storage (RFC 4918) says what a retry needs.
INSUFFICIENT_STORAGE = OpenPaiError(507, "InsufficientStorageError", "{reason}")

TABLE: tuple[OpenPaiError, ...] = tuple(
    value for value in globals().values() if isinstance(value, OpenPaiError)
)


def invalid_parameters(message: str, hint: str | None = None, **extra: Any) -> ApiError:
    """A 400 naming the field and what it must be."""
    return INVALID_PARAMETERS(hint, reason=message, **extra)


def unavailable(message: str, hint: str | None = None) -> ApiError:
    """A 503: a dependency did not answer; the request may succeed when retried."""
    return UNAVAILABLE(hint, reason=message)
