"""Failure analysis: why a task ended and whether a retry can help, from OpenPAI-style exit rules.

    rules = default_rules()                      # or load_rules(text) for an operator's file
    verdict = analyze(rules, exit_code=1, user_log=log)             # runtime, inside the task
    verdict = analyze(rules, exit_code=None, stage="platform",
                      pod=PodStatus(reason="NodeLost"))             # orchestrator
    retry_decision(verdict)  # "retry_free" | "retry_counted" | "no_retry"
    retry_kind(verdict)      # "user" | "platform" | "resource"

Pure code: no I/O beyond reading the packaged rule file, no event loop, no processes.
"""

from libs.failures.analysis import (
    POD_FAILED_WITHOUT_FAILED_CONTAINER_CODE,
    STOPPED_BY_USER_CODE,
    SUCCEEDED_CODE,
    UNDEFINED_NEGATIVE_CODE,
    UNDEFINED_POSITIVE_CODE,
    UNRECOGNISED_CONTAINER_CODE,
    ContainerStatus,
    FailureVerdict,
    PodStatus,
    RetryType,
    Stage,
    analyze,
    retry_decision,
    retry_kind,
)
from libs.failures.checks import check_rules
from libs.failures.defaults import default_rules, default_rules_text
from libs.failures.errors import RuleError, RuleProblem
from libs.failures.models import FailureRule, RuleSet, dump_rules, load_rules
from libs.failures.regexes import DEFAULT_TAIL_KIB

__all__ = [
    "DEFAULT_TAIL_KIB",
    "POD_FAILED_WITHOUT_FAILED_CONTAINER_CODE",
    "STOPPED_BY_USER_CODE",
    "SUCCEEDED_CODE",
    "UNDEFINED_NEGATIVE_CODE",
    "UNDEFINED_POSITIVE_CODE",
    "UNRECOGNISED_CONTAINER_CODE",
    "ContainerStatus",
    "FailureRule",
    "FailureVerdict",
    "PodStatus",
    "RetryType",
    "RuleError",
    "RuleProblem",
    "RuleSet",
    "Stage",
    "analyze",
    "check_rules",
    "default_rules",
    "default_rules_text",
    "dump_rules",
    "load_rules",
    "retry_decision",
    "retry_kind",
]
