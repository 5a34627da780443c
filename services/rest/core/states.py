"""How job and task facts read in OpenPAI's vocabulary: states, sub-states, exit specs, times.

OpenPAI reports a job as a state (WAITING ... FAILED) plus the FrameworkController sub-state
it came from, and explains an exit with an "exit spec" (code, phrase, type, reaction...).
Our events carry the facts (an exit code, the failure rule the runtime matched); this module
derives what OpenPAI clients expect to read, with no I/O so the projection and the tests share
one definition.
"""

from __future__ import annotations

import hashlib
import uuid
from datetime import datetime
from typing import Any

from libs.protocol.events import FailureInfo

# FrameworkController's exit codes for a stop requested by a user (job level and attempt level).
STOP_EXIT_CODES = frozenset({-210, -220})

SUB_STATE_WAITING = "AttemptCreationPending"
SUB_STATE_PREPARING = "AttemptPreparing"
SUB_STATE_RUNNING = "AttemptRunning"
SUB_STATE_DELETING = "AttemptDeletionPending"
SUB_STATE_ATTEMPT_DONE = "AttemptCompleted"
SUB_STATE_COMPLETED = "Completed"

FINAL = frozenset({"SUCCEEDED", "FAILED", "STOPPED"})


def epoch_ms(moment: datetime) -> int:
    return int(moment.timestamp() * 1000)


def state_for_exit(exit_code: int) -> str:
    """The final state an exit code means, as OpenPAI converts FrameworkController statuses."""
    if exit_code == 0:
        return "SUCCEEDED"
    if exit_code in STOP_EXIT_CODES:
        return "STOPPED"
    return "FAILED"


def framework_name(username: str, job_name: str) -> str:
    """OpenPAI's framework name for a job: md5 of ``user~name`` (shown as ``debugId``)."""
    return hashlib.md5(f"{username}~{job_name}".encode(), usedforsecurity=False).hexdigest()


_URL_NAMESPACE = uuid.NAMESPACE_URL.bytes


def task_uid(job_id: str, role: str, index: int) -> str:
    """A stable uid per task, the same across attempts, like FrameworkController's: the name-based
    UUID ``uuid.uuid5(NAMESPACE_URL, "pai:<job id>:<role>:<index>")``, made here without UUID
    objects, in a third of the time (a large job's detail makes one per task)."""
    digest = hashlib.sha1(
        _URL_NAMESPACE + f"pai:{job_id}:{role}:{index}".encode(), usedforsecurity=False
    ).digest()
    # RFC 4122: the version (5) in the high half of octet 6, the variant (10) in the top of octet 8.
    marked = bytes(((digest[6] & 0x0F) | 0x50, digest[7], (digest[8] & 0x3F) | 0x80))
    text = (digest[:6] + marked + digest[9:16]).hex()
    return f"{text[:8]}-{text[8:12]}-{text[12:16]}-{text[16:20]}-{text[20:]}"


def _exit_type(exit_code: int, failure: FailureInfo | None) -> str:
    if exit_code == 0:
        return "USER_SUCCESS"
    if exit_code in STOP_EXIT_CODES:
        return "USER_STOP"
    who = ((failure.causer or failure.issuer or "") if failure else "").upper()
    if who.startswith("USER"):
        return "USER_FAILURE"
    if who.startswith(("PAI", "PLATFORM")):
        return "PLATFORM_FAILURE"
    return "UNKNOWN_FAILURE"


def _default_phrase(exit_code: int) -> str:
    if exit_code == 0:
        return "Succeeded"
    if exit_code in STOP_EXIT_CODES:
        return "FrameworkStopped" if exit_code == -210 else "FrameworkAttemptCompletion"
    return "ContainerExitCode" if exit_code > 0 else "UnknownFailure"


def exit_spec(exit_code: int | None, failure: FailureInfo | None) -> dict[str, Any] | None:
    """OpenPAI's exit spec for an exit: the matched failure rule when there is one."""
    if exit_code is None:
        return None
    behavior = (
        failure.type if failure else ("permanent" if exit_code in STOP_EXIT_CODES else "unknown")
    ).upper()
    reaction = {"TRANSIENT": "RETRY_TO_MAX", "PERMANENT": "NEVER_RETRY"}.get(behavior, "ALWAYS_RETRY")
    if exit_code == 0:
        reaction = "NEVER_RETRY"
    return {
        "code": failure.code if failure else exit_code,
        "phrase": failure.phrase if failure else _default_phrase(exit_code),
        "issuer": (failure.issuer if failure else None) or ("PAI_RUNTIME" if failure else "USER_CONTAINER"),
        "causer": (failure.causer if failure else None) or "UNKNOWN",
        "type": _exit_type(exit_code, failure),
        "stage": "COMPLETING" if exit_code == 0 else "RUNNING",
        "behavior": behavior,
        "reaction": reaction,
        "reason": failure.reason if failure else "",
        "repro": [failure.matched_line] if failure and failure.matched_line else [],
        "solution": [failure.solution] if failure and failure.solution else [],
    }
