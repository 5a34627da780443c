"""Completion and retry policies as OpenPAI defines them, one table row per case."""

from __future__ import annotations

import pytest

from libs.protocol.events import FailureInfo
from services.orchestrator.core.policies import (
    CompletionDecision,
    JobSpec,
    RetryDecision,
    RoleCounts,
    RoleSpec,
    TaskTally,
    decide_completion,
    decide_completion_counted,
    decide_retry,
    failure_type,
    spec_from_config,
)
from tests.support.jobs import job_model

MASTER_DOMINATED = JobSpec(
    roles=(
        RoleSpec(name="master", instances=1, min_succeeded=1),
        RoleSpec(name="worker", instances=2, min_failed=-1),
    )
)
ANY_WORKER = JobSpec(roles=(RoleSpec(name="worker", instances=3, min_succeeded=1),))
ALL_WORKERS = JobSpec(roles=(RoleSpec(name="worker", instances=3),))
NEVER_FAIL = JobSpec(roles=(RoleSpec(name="worker", instances=2, min_failed=-1),))


def tallies(spec: JobSpec, done: dict[tuple[str, int], bool]) -> list[TaskTally]:
    return [
        TaskTally(r.name, i, (r.name, i) in done, done.get((r.name, i), False))
        for r in spec.roles
        for i in range(r.instances)
    ]


@pytest.mark.parametrize(
    ("spec", "done", "trigger", "expected"),
    [
        pytest.param(
            MASTER_DOMINATED, {("master", 0): True}, ("master", 0), "succeeded", id="master-succeeds"
        ),
        pytest.param(MASTER_DOMINATED, {("master", 0): False}, ("master", 0), "failed", id="master-fails"),
        pytest.param(
            MASTER_DOMINATED, {("worker", 0): False}, ("worker", 0), None, id="worker-failure-ignored"
        ),
        pytest.param(MASTER_DOMINATED, {("worker", 1): True}, ("worker", 1), None, id="worker-success-waits"),
        pytest.param(ANY_WORKER, {("worker", 2): True}, ("worker", 2), "succeeded", id="any-worker-succeeds"),
        pytest.param(ANY_WORKER, {("worker", 0): False}, ("worker", 0), "failed", id="any-worker-one-fails"),
        pytest.param(ALL_WORKERS, {("worker", 0): True}, ("worker", 0), None, id="all-workers-one-of-three"),
        pytest.param(
            ALL_WORKERS,
            {("worker", 0): True, ("worker", 1): True, ("worker", 2): True},
            ("worker", 2),
            "succeeded",
            id="all-workers-all-succeed",
        ),
        pytest.param(
            ALL_WORKERS, {("worker", 1): False}, ("worker", 1), "failed", id="all-workers-one-fails"
        ),
        pytest.param(
            NEVER_FAIL,
            {("worker", 0): False, ("worker", 1): False},
            ("worker", 1),
            "succeeded",
            id="minfailed-minus-one",
        ),
    ],
)
def test_completion_policy(
    spec: JobSpec, done: dict[tuple[str, int], bool], trigger: tuple[str, int], expected: str | None
) -> None:
    decision = decide_completion(spec, tallies(spec, done), *trigger)
    assert (decision.outcome if decision else None) == expected
    if decision is not None:
        assert (decision.trigger_role, decision.trigger_index) == trigger


def test_min_failed_above_one_waits_for_enough_failures() -> None:
    spec = JobSpec(roles=(RoleSpec(name="w", instances=3, min_failed=2),))
    assert decide_completion(spec, tallies(spec, {("w", 0): False}), "w", 0) is None
    second = decide_completion(spec, tallies(spec, {("w", 0): False, ("w", 1): False}), "w", 1)
    assert second is not None
    assert second.outcome == "failed"


def test_spec_from_config_reads_openpai_fields_and_defaults() -> None:
    spec = spec_from_config(
        job_model(
            {
                "jobRetryCount": 2,
                "extras": {"gangAllocation": False},
                "taskRoles": {
                    "master": {"instances": 1, "completion": {"minSucceededInstances": 1}},
                    "worker": {
                        "instances": 4,
                        "taskRetryCount": 3,
                        "completion": {"minFailedInstances": None},
                    },
                },
            }
        )
    )
    assert spec.job_retry_count == 2
    assert spec.gang is False
    assert spec.role("master") == RoleSpec(name="master", instances=1, min_failed=1, min_succeeded=1)
    assert spec.role("worker") == RoleSpec(
        name="worker", instances=4, min_failed=1, min_succeeded=4, task_retry_count=3
    )


def info(kind: str, code: int = 1) -> FailureInfo:
    return FailureInfo(code=code, phrase="x", type=kind)  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("exit_code", "failure", "expected"),
    [
        (0, None, "succeeded"),
        (1, None, "unknown"),
        (1, info("transient"), "transient"),
        (1, info("permanent"), "permanent"),
        (1, info("unknown"), "unknown"),
        (251, info("transient", 251), "conflict"),
        (251, None, "conflict"),
    ],
)
def test_failure_type_reads_the_verdict(exit_code: int, failure: FailureInfo | None, expected: str) -> None:
    assert failure_type(exit_code, failure) == expected


@pytest.mark.parametrize(
    ("kind", "used", "limit", "retry", "counted", "retry_kind"),
    [
        pytest.param("succeeded", 0, 5, False, False, "user", id="succeeded-never"),
        pytest.param("permanent", 0, 5, False, False, "user", id="permanent-never"),
        pytest.param("transient", 9, 0, True, False, "platform", id="transient-always-uncounted"),
        pytest.param("conflict", 9, 0, True, False, "resource", id="conflict-always-uncounted"),
        pytest.param("unknown", 0, 1, True, True, "user", id="unknown-counted-within-limit"),
        pytest.param("unknown", 1, 1, False, False, "user", id="unknown-limit-reached"),
        pytest.param("unknown", 0, 0, False, False, "user", id="unknown-no-retries"),
        pytest.param("unknown", 1000, -2, True, True, "user", id="unknown-unlimited"),
    ],
)
def test_retry_policy(kind: str, used: int, limit: int, retry: bool, counted: bool, retry_kind: str) -> None:
    decision = decide_retry(kind, used, limit, 0.5)  # type: ignore[arg-type]
    assert (decision.retry, decision.counted, decision.kind) == (retry, counted, retry_kind)


def test_conflict_delay_comes_from_the_random_argument() -> None:
    low, high = decide_retry("conflict", 0, 0, 0.0), decide_retry("conflict", 0, 0, 0.999)
    assert 0 < low.delay_seconds < high.delay_seconds
    assert decide_retry("conflict", 0, 0, 0.3) == decide_retry("conflict", 0, 0, 0.3)


@pytest.mark.parametrize(
    ("spec", "done", "wording"),
    [
        pytest.param(
            ALL_WORKERS,
            {("worker", 0): True, ("worker", 1): True, ("worker", 2): True},
            "all 3 tasks succeeded",
            id="every-task-succeeded",
        ),
        pytest.param(
            NEVER_FAIL,
            {("worker", 0): False, ("worker", 1): False},
            "all 2 tasks completed; 2 failed without reaching their role's minFailedInstances, "
            "so the job succeeded",
            id="failures-below-the-limit",
        ),
    ],
)
def test_a_success_without_a_completion_condition_says_why_it_succeeded(
    spec: JobSpec, done: dict[tuple[str, int], bool], wording: str
) -> None:
    last = list(done)[-1]
    decision = decide_completion(spec, tallies(spec, done), *last)
    assert decision is not None
    assert decision.outcome == "succeeded"
    assert decision.diagnostics == wording
    assert "no completion condition" not in decision.diagnostics


@pytest.mark.parametrize(
    ("kind", "used", "limit", "random", "expected"),
    [
        ("succeeded", 0, 5, 0.5, RetryDecision(False, False, "user", 0.0, "succeeded: never retried")),
        (
            "permanent",
            0,
            5,
            0.5,
            RetryDecision(False, False, "user", 0.0, "permanent failure: never retried"),
        ),
        (
            "transient",
            9,
            0,
            0.5,
            RetryDecision(True, False, "platform", 0.0, "transient failure: retried without counting"),
        ),
        (
            "conflict",
            0,
            0,
            0.5,
            RetryDecision(True, False, "resource", 35.0, "resource conflict: retried after a random delay"),
        ),
        ("unknown", 2, 5, 0.5, RetryDecision(True, True, "user", 0.0, "retry 3 of 5")),
        ("unknown", 5, 5, 0.5, RetryDecision(False, False, "user", 0.0, "retry limit 5 reached")),
        ("unknown", 7, -2, 0.5, RetryDecision(True, True, "user", 0.0, "retry 8 of -2")),
    ],
    ids=[
        "succeeded",
        "permanent",
        "transient",
        "conflict-halfway-from-10-to-60-s",
        "counted",
        "limit",
        "unlimited",
    ],
)
def test_each_retry_decision_in_full_with_the_reason_the_job_shows(
    kind: str, used: int, limit: int, random: float, expected: RetryDecision
) -> None:
    assert decide_retry(kind, used, limit, random) == expected  # type: ignore[arg-type]


def test_a_conflict_is_known_by_the_verdict_s_code_or_the_exit_code() -> None:
    assert failure_type(1, info("transient", 251)) == "conflict"
    assert failure_type(251, info("permanent", 1)) == "conflict"


def test_completion_thresholds_and_instances_come_from_the_config() -> None:
    spec = spec_from_config(
        job_model(
            {
                "taskRoles": {
                    "a": {"completion": {"minFailedInstances": 2, "minSucceededInstances": -1}},
                    "b": {"instances": 3, "completion": {"minFailedInstances": -1}},
                }
            }
        )
    )
    assert spec.role("a") == RoleSpec(name="a", instances=1, min_failed=2, min_succeeded=-1)
    assert spec.role("b") == RoleSpec(name="b", instances=3, min_failed=-1, min_succeeded=3)
    with pytest.raises(KeyError, match="'c'"):
        spec.role("c")


def test_a_role_reaching_its_failure_threshold_says_so() -> None:
    spec = spec_from_config(
        job_model({"taskRoles": {"w": {"instances": 4, "completion": {"minFailedInstances": 2}}}})
    )
    failed_twice = {"w": RoleCounts(failed=2)}
    assert decide_completion_counted(spec, failed_twice, 4, "w", 3, False) == CompletionDecision(
        "failed", "w", 3, "2 task(s) of role w failed, reaching minFailedInstances 2"
    )
    assert decide_completion_counted(spec, {}, 4, "w", 0, True) is None
