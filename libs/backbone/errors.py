"""The errors a message handler raises to tell the consume loop what to do with a message.

The type decides the outcome, not the message text: a ``TemporaryError`` is retried after its
delay (nak with delay), a ``PermanentError`` is never retried (term). Anything else is treated
as a bug that may be transient and retried with a growing delay, so one bad message never
stops a service.
"""

from __future__ import annotations

import nats.errors


class BackboneError(Exception):
    """Base of every error this package raises on purpose."""


class TemporaryError(BackboneError):
    """The work failed for a reason that may go away; retry the message after ``delay`` seconds."""

    def __init__(self, message: str = "temporary failure", *, delay: float = 1.0) -> None:
        super().__init__(message)
        self.delay = max(0.0, delay)


class PermanentError(BackboneError):
    """The message can never be handled (bad content, impossible request); do not redeliver it."""

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason


class KVConflictError(BackboneError):
    """A KV write lost an optimistic-concurrency race: the key changed since it was read."""

    def __init__(self, bucket: str, key: str, expected_revision: int | None) -> None:
        super().__init__(f"key {key!r} in bucket {bucket!r} is not at revision {expected_revision}")
        self.bucket = bucket
        self.key = key
        self.expected_revision = expected_revision


class ProvisioningError(BackboneError):
    """A stream, consumer or bucket exists with a configuration that cannot be changed in place."""


# What a retry loop waits out: the bus away, refusing or electing (every nats-py error, JetStream's
# and KV's among them), a timeout, an operating system's error (a socket, a file) or a handler's
# TemporaryError. Anything else is a bug: logged with its traceback and raised, so the service
# stops and its supervisor (`pai up`, Kubernetes) starts it again, rather than a warning repeated
# for ever.
TRANSIENT_ERRORS: tuple[type[Exception], ...] = (nats.errors.Error, TimeoutError, OSError, TemporaryError)
