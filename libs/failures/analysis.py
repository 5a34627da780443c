"""Why did a task end, and may it be retried: matching a rule set against one task's exit.

Two places ask the question, with different evidence:

- the runtime, inside the task, when the user's command exits (stage "container"): the exit code,
  the user's log, the runtime's own log and the GPU's health, checked against the rules'
  `runtimeContainerPatterns`. The runtime then exits with the verdict's code, as OpenPAI's does,
  so the code carries the diagnosis out of the task;
- the orchestrator, on what the cluster or the local executor reports (stage "platform"): a
  status reason and message and the exit codes of the task's containers, checked against the
  rules' `controllerPodPatterns`; when none matches, the exit code itself is looked up, so the
  code a runtime chose keeps its meaning, and codes no rule knows fall back to OpenPAI's two
  shadow codes (256 for positive, -8000 for negative) while the raw code stays visible.

The verdict's `type` folds OpenPAI's behavior/reaction into FrameworkController's retry classes:
transient (retry, do not count), permanent (never retry), unknown (retry, count against the job's
budget). Matching never raises on any exit code or log text.
"""

from __future__ import annotations

import re
from typing import Literal

from pydantic import BaseModel, ConfigDict

from libs.failures.models import ContainerPattern, FailureRule, PodContainerPattern, PodPattern, RuleSet
from libs.failures.regexes import (
    DEFAULT_TAIL_KIB,
    last_matching_line,
    matches_anything,
    search_field,
    tail_lines,
)

RetryType = Literal["transient", "permanent", "unknown"]
Stage = Literal["container", "platform"]

SUCCEEDED_CODE = 0
STOPPED_BY_USER_CODE = -210
POD_FAILED_WITHOUT_FAILED_CONTAINER_CODE = -300
UNRECOGNISED_CONTAINER_CODE = 255
UNDEFINED_POSITIVE_CODE = 256
UNDEFINED_NEGATIVE_CODE = -8000

_BEHAVIOR_TYPES: dict[str, RetryType] = {
    "TRANSIENT": "transient",
    "TRANSIENT_CONFLICT": "transient",
    "PERMANENT": "permanent",
    "UNKNOWN": "unknown",
}
_REACTION_TYPES: dict[str, RetryType] = {
    "ALWAYS_RETRY": "transient",
    "ALWAYS_BACKOFF_RETRY": "transient",
    "NEVER_RETRY": "permanent",
    "RETRY_TO_MAX": "unknown",
}


class ContainerStatus(BaseModel):
    """One container of a task as the cluster (or the local executor) reports it."""

    model_config = ConfigDict(frozen=True)

    name: str = "main"
    reason: str = ""
    message: str = ""
    exit_code: int | None = None


class PodStatus(BaseModel):
    """A task as the cluster reports it: e.g. reason "NodeLost", or a container "OOMKilled"."""

    model_config = ConfigDict(frozen=True)

    reason: str = ""
    message: str = ""
    containers: tuple[ContainerStatus, ...] = ()


class FailureVerdict(BaseModel):
    """What ended a task, in words a user can act on, and how a retry policy should treat it."""

    model_config = ConfigDict(frozen=True)

    code: int
    """The code to report: the rule's, or the raw exit code where only a shadow rule matched."""
    phrase: str
    type: RetryType
    category: str
    """OpenPAI's rough type: USER_SUCCESS, USER_STOP, USER_FAILURE, PLATFORM_FAILURE, ..."""
    issuer: str | None
    causer: str | None
    reason: str
    solution: tuple[str, ...]
    matched_line: str | None
    rule_code: int | None
    """The rule that matched; None when no rule in the set applied and a built-in answer is given."""
    exit_code: int | None
    """The exit code analysed, as given."""
    conflict: bool = False
    """The failure came from competing for resources: retry after a back-off."""
    succeeded: bool = False


def _retry_type(rule: FailureRule) -> RetryType:
    if rule.type == "USER_SUCCESS":
        return "permanent"  # the outcome is final: nothing to retry
    if rule.behavior is not None:
        return _BEHAVIOR_TYPES[rule.behavior]
    if rule.reaction is not None:
        return _REACTION_TYPES[rule.reaction]
    return "unknown"


def _verdict(
    rule: FailureRule, exit_code: int | None, line: str | None, code: int | None = None
) -> FailureVerdict:
    category = rule.type or ("USER_SUCCESS" if rule.code == SUCCEEDED_CODE else "UNKNOWN_FAILURE")
    return FailureVerdict(
        code=rule.code if code is None else code,
        phrase=rule.phrase,
        type=_retry_type(rule),
        category=category,
        issuer=rule.issuer,
        causer=rule.causer,
        reason=rule.reason or f"The task ended with code {rule.code} ({rule.phrase}).",
        solution=rule.solution,
        matched_line=line,
        rule_code=rule.code,
        exit_code=exit_code,
        conflict=rule.behavior == "TRANSIENT_CONFLICT" or rule.reaction == "ALWAYS_BACKOFF_RETRY",
        succeeded=category == "USER_SUCCESS",
    )


def _builtin_success(exit_code: int | None) -> FailureVerdict:
    return FailureVerdict(
        code=SUCCEEDED_CODE,
        phrase="Succeeded",
        type="permanent",
        category="USER_SUCCESS",
        issuer="USER_CONTAINER",
        causer="USER_CONTAINER",
        reason="The command finished with exit code 0.",
        solution=(),
        matched_line=None,
        rule_code=None,
        exit_code=exit_code,
        succeeded=True,
    )


def _builtin_unknown(code: int, exit_code: int | None) -> FailureVerdict:
    shown = "no exit code" if exit_code is None else f"exit code {exit_code}"
    return FailureVerdict(
        code=code,
        phrase="UnrecognisedFailure",
        type="unknown",
        category="UNKNOWN_FAILURE",
        issuer=None,
        causer="UNKNOWN",
        reason=f"The task failed with {shown} and no rule recognised why.",
        solution=(
            "Read the last lines of the task's log for the first error.",
            "If the next attempt fails the same way, fix that error and submit again.",
        ),
        matched_line=None,
        rule_code=None,
        exit_code=exit_code,
    )


class _Logs:
    """Log lines cut once per analysis, however many rules look at them."""

    def __init__(self, tail_kib: int) -> None:
        self._tail_kib = tail_kib
        self._cache: dict[int, list[str]] = {}

    def lines(self, text: str) -> list[str]:
        key = id(text)
        if key not in self._cache:
            # An empty log is one empty line, so `(?ms).*` accepts it as OpenPAI's engines do.
            self._cache[key] = tail_lines(text, self._tail_kib) or [""]
        return self._cache[key]


def _match_container(
    p: ContainerPattern, exit_code: int | None, user: list[str], platform: list[str], ecc: bool
) -> tuple[bool, str | None]:
    if p.exit_code is not None and p.exit_code != exit_code:
        return False, None
    if p.gpu_info is not None and p.gpu_info.nvidia_double_ecc_error not in (None, ecc):
        return False, None
    platform_line = user_line = None
    if p.platform_re is not None:
        platform_line = last_matching_line(p.platform_re, platform)
        if platform_line is None:
            return False, None
    if p.user_re is not None:
        user_line = last_matching_line(p.user_re, user)
        if user_line is None:
            return False, None
    return True, user_line if user_line is not None else platform_line


def _match_one_container(p: PodContainerPattern, c: ContainerStatus, logs: _Logs) -> tuple[bool, str | None]:
    name_re, reason_re, message_re = p.compiled
    if p.exit_code is not None and p.exit_code != c.exit_code:
        return False, None
    if name_re is not None and search_field(name_re, c.name) is None:
        return False, None
    return _match_reason_and_message(
        reason_re, message_re, p.reason_regex, p.message_regex, c.reason, c.message, logs
    )


def _match_reason_and_message(
    reason_re: re.Pattern[str] | None,
    message_re: re.Pattern[str] | None,
    reason_regex: str | None,
    message_regex: str | None,
    reason: str,
    message: str,
    logs: _Logs,
) -> tuple[bool, str | None]:
    """A reason regex and a message regex over one status (a pod's or a container's).

    The line shown is the message line that matched; failing that, the reason, unless the
    regex that matched it accepts anything (and so explains nothing)."""
    if reason_re is not None and search_field(reason_re, reason) is None:
        return False, None
    line = None
    if message_re is not None:
        line = last_matching_line(message_re, logs.lines(message))
        if line is None:
            return False, None
        if matches_anything(message_regex):
            line = None
    if line is None and reason_regex is not None and not matches_anything(reason_regex):
        line = reason
    return True, line


def _match_pod(p: PodPattern, pod: PodStatus, logs: _Logs) -> tuple[bool, str | None]:
    reason_re, message_re = p.compiled
    matched, pod_line = _match_reason_and_message(
        reason_re, message_re, p.reason_regex, p.message_regex, pod.reason, pod.message, logs
    )
    if not matched:
        return False, None
    container_line = None
    for cp in p.containers:
        # Every container pattern must be met by some container of the task.
        for container in pod.containers:
            ok, line = _match_one_container(cp, container, logs)
            if ok:
                container_line = container_line or line
                break
        else:
            return False, None
    return True, container_line or pod_line


def analyze(
    rules: RuleSet,
    *,
    exit_code: int | None,
    user_log: str = "",
    platform_log: str = "",
    stage: Stage = "container",
    pod: PodStatus | None = None,
    gpu_double_ecc_error: bool = False,
    tail_kib: int = DEFAULT_TAIL_KIB,
) -> FailureVerdict:
    """Explain one task's end. See the module docstring for what each stage looks at."""
    logs = _Logs(max(tail_kib, 1))
    if stage == "container":
        return _analyze_container(
            rules, exit_code, logs.lines(user_log), logs.lines(platform_log), gpu_double_ecc_error
        )
    if stage == "platform":
        return _analyze_platform(rules, exit_code, platform_log, pod, logs)
    raise ValueError(f"stage must be 'container' or 'platform', not {stage!r}")


def _analyze_container(
    rules: RuleSet, exit_code: int | None, user: list[str], platform: list[str], ecc: bool
) -> FailureVerdict:
    if exit_code == SUCCEEDED_CODE:
        success = rules.by_code(SUCCEEDED_CODE)
        return _builtin_success(exit_code) if success is None else _verdict(success, exit_code, None)
    for rule in rules.rules:
        if rule.pattern is None:
            continue
        for p in rule.pattern.runtime_container_patterns:
            ok, line = _match_container(p, exit_code, user, platform, ecc)
            if ok:
                return _verdict(rule, exit_code, line)
    fallback = rules.by_code(UNRECOGNISED_CONTAINER_CODE)
    if fallback is None:
        return _builtin_unknown(UNRECOGNISED_CONTAINER_CODE, exit_code)
    return _verdict(fallback, exit_code, None)


def _analyze_platform(
    rules: RuleSet, exit_code: int | None, platform_log: str, pod: PodStatus | None, logs: _Logs
) -> FailureVerdict:
    if pod is None:
        # Without a cluster status (the local executor), the process and its events stand in for it.
        containers = (
            () if exit_code is None else (ContainerStatus(exit_code=exit_code, message=platform_log),)
        )
        pod = PodStatus(message=platform_log, containers=containers)
    for rule in rules.rules:
        if rule.pattern is None:
            continue
        for p in rule.pattern.controller_pod_patterns:
            ok, line = _match_pod(p, pod, logs)
            if ok:
                return _verdict(rule, exit_code, line)
    if exit_code is None:
        no_code = rules.by_code(POD_FAILED_WITHOUT_FAILED_CONTAINER_CODE)
        if no_code is None:
            return _builtin_unknown(POD_FAILED_WITHOUT_FAILED_CONTAINER_CODE, exit_code)
        return _verdict(no_code, exit_code, None)
    known = rules.by_code(exit_code)
    if known is not None:
        return _verdict(known, exit_code, None)
    if exit_code == SUCCEEDED_CODE:
        return _builtin_success(exit_code)
    shadow = rules.by_code(UNDEFINED_POSITIVE_CODE if exit_code > 0 else UNDEFINED_NEGATIVE_CODE)
    if shadow is None:
        return _builtin_unknown(exit_code, exit_code)
    # OpenPAI's shadow codes stand for a whole range; the raw code is the one worth showing.
    return _verdict(shadow, exit_code, None, code=exit_code)


def retry_decision(verdict: FailureVerdict) -> Literal["retry_free", "retry_counted", "no_retry"]:
    """FrameworkController's policy: transient retried without counting, permanent never, unknown counted."""
    if verdict.succeeded or verdict.type == "permanent":
        return "no_retry"
    if verdict.type == "transient":
        return "retry_free"
    return "retry_counted"


def retry_kind(verdict: FailureVerdict) -> Literal["user", "platform", "resource"]:
    """Which bucket of OpenPAI's retryDetails a retry after this verdict belongs to.

    OpenPAI splits retries by who pays for them: "resource" for waiting on a resource conflict
    (gang allocation), "platform" for transient failures retried for free, "user" for retries
    counted against the job's retry budget (unknown failures; permanent ones are never retried).
    """
    if verdict.conflict or verdict.category == "RESOURCE_ALLOCATION_TIMEOUT":
        return "resource"
    if verdict.type == "transient":
        return "platform"
    return "user"
