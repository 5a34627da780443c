"""Completion and retry policies: when an attempt ends, how it ends, and whether another follows.

Completion (per task role, OpenPAI's `completion` with FrameworkController's meaning):
- a task failed and its role's failed count reached `minFailedInstances` (default 1; -1 means
  this role never fails the job): the attempt FAILS, triggered by that task;
- a task succeeded and its role's succeeded count reached `minSucceededInstances` (null means
  every instance of the role, as the protocol normalises it; -1 means the role has no such
  condition): the attempt SUCCEEDS, triggered by that task, even if other roles still run;
- otherwise, once every task of every role has completed, the attempt SUCCEEDS (so a job whose
  roles all say minFailedInstances -1 succeeds even if every task failed).

Retry (the "fancy" policy, job level with `jobRetryCount`, task level with `taskRetryCount`
when gang allocation is off): succeeded never retries; a transient failure always retries
without using up the count (a conflict, such as a gang-allocation or barrier timeout, after a
random delay); a permanent failure never retries; an unknown failure retries while the
counted retries are below the limit.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from pydantic import BaseModel, ConfigDict

from libs.protocol.events import FailureInfo
from libs.protocol.jobs import JobConfig
from libs.protocol.wording import counted
from runtime.exitcodes import BARRIER_TIMEOUT

STOP_EXIT_CODE = -210
"""OpenPAI's exit code for a job a user stopped."""
PREEMPTED_EXIT_CODE = -220
"""OpenPAI's exit code for an attempt ended to make room for another job."""
KILLED_EXIT_CODE = 137
"""What a task reports when its process died without a result (128 + SIGKILL)."""
CONFLICT_EXIT_CODES = frozenset({BARRIER_TIMEOUT})
CONFLICT_DELAY_RANGE = (10.0, 60.0)
"""Seconds before a conflict retry; random so jobs in conflict do not collide again in step."""


class RoleSpec(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")

    name: str
    instances: int = 1
    min_failed: int = 1
    min_succeeded: int = -1
    task_retry_count: int = 0


class JobSpec(BaseModel):
    """What the orchestrator needs from a job config: roles, policies and retry limits."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    roles: tuple[RoleSpec, ...]
    job_retry_count: int = 0
    gang: bool = True

    def role(self, name: str) -> RoleSpec:
        for role in self.roles:
            if role.name == name:
                return role
        raise KeyError(name)


def spec_from_config(config: JobConfig) -> JobSpec:
    """The policies of a job config. The protocol's model has filled OpenPAI's defaults in: a
    missing, null or 0 completion threshold is minFailedInstances 1 and minSucceededInstances
    the role's instances, as OpenPAI's launcher reads them."""
    roles = []
    for name, body in config.task_roles.items():
        completion = body.completion
        roles.append(
            RoleSpec(
                name=name,
                instances=body.instances,
                min_failed=completion.min_failed_instances or 1,
                min_succeeded=completion.min_succeeded_instances or body.instances,
                task_retry_count=body.task_retry_count,
            )
        )
    return JobSpec(roles=tuple(roles), job_retry_count=config.job_retry_count, gang=config.gang_allocation)


Outcome = Literal["succeeded", "failed"]


@dataclass(frozen=True)
class TaskTally:
    """How a task of the current attempt stands, as the completion policy sees it."""

    role: str
    index: int
    completed: bool
    succeeded: bool


@dataclass(frozen=True)
class CompletionDecision:
    outcome: Outcome
    trigger_role: str
    trigger_index: int
    diagnostics: str


@dataclass(frozen=True)
class RoleCounts:
    """How many tasks of one role have completed, by how they ended."""

    succeeded: int = 0
    failed: int = 0

    def plus(self, *, succeeded: bool) -> RoleCounts:
        if succeeded:
            return RoleCounts(self.succeeded + 1, self.failed)
        return RoleCounts(self.succeeded, self.failed + 1)


def decide_completion(
    spec: JobSpec, tasks: list[TaskTally], trigger_role: str, trigger_index: int
) -> CompletionDecision | None:
    """Whether the attempt ends now that task (trigger_role, trigger_index) completed."""
    trigger = next(t for t in tasks if t.role == trigger_role and t.index == trigger_index)
    counts: dict[str, RoleCounts] = {}
    for t in tasks:
        if t.completed:
            counts[t.role] = counts.get(t.role, RoleCounts()).plus(succeeded=t.succeeded)
    return decide_completion_counted(spec, counts, len(tasks), trigger_role, trigger_index, trigger.succeeded)


def decide_completion_counted(
    spec: JobSpec,
    counts: dict[str, RoleCounts],
    total: int,
    trigger_role: str,
    trigger_index: int,
    trigger_succeeded: bool,
) -> CompletionDecision | None:
    """`decide_completion` from the completed tasks' counts per role (`total`: tasks of the attempt).

    What one completion costs does not grow with the job: the deciders keep the counts as tasks
    complete instead of looking at every task each time.
    """
    role = spec.role(trigger_role)
    in_role = counts.get(trigger_role, RoleCounts())
    if not trigger_succeeded:
        failed = in_role.failed
        if role.min_failed != -1 and failed >= role.min_failed:
            return CompletionDecision(
                "failed",
                trigger_role,
                trigger_index,
                f"{failed} task(s) of role {trigger_role} failed, reaching minFailedInstances "
                f"{role.min_failed}",
            )
    else:
        succeeded = in_role.succeeded
        if role.min_succeeded != -1 and succeeded >= role.min_succeeded:
            return CompletionDecision(
                "succeeded",
                trigger_role,
                trigger_index,
                f"{succeeded} task(s) of role {trigger_role} succeeded, reaching minSucceededInstances "
                f"{role.min_succeeded}",
            )
    if sum(c.succeeded + c.failed for c in counts.values()) >= total:
        # FrameworkController's rule: an attempt whose tasks all completed without a role
        # reaching minFailedInstances (or minSucceededInstances first) succeeds.
        failed_total = sum(c.failed for c in counts.values())
        if not failed_total:
            why = f"all {counted(total, 'task')} succeeded"
        else:
            why = (
                f"all {counted(total, 'task')} completed; {failed_total} failed without reaching "
                "their role's minFailedInstances, so the job succeeded"
            )
        return CompletionDecision("succeeded", trigger_role, trigger_index, why)
    return None


FailureType = Literal["succeeded", "transient", "conflict", "permanent", "unknown"]


def failure_type(exit_code: int, failure: FailureInfo | None) -> FailureType:
    """How the retry policy sees an exit: by the verdict's type, conflicts by their code."""
    if exit_code == 0:
        return "succeeded"
    code = failure.code if failure is not None else exit_code
    if code in CONFLICT_EXIT_CODES or exit_code in CONFLICT_EXIT_CODES:
        return "conflict"
    if failure is None:
        return "unknown"
    return failure.type


RetryKind = Literal["user", "platform", "resource"]


@dataclass(frozen=True)
class RetryDecision:
    retry: bool
    counted: bool
    kind: RetryKind
    delay_seconds: float
    reason: str


def decide_retry(kind: FailureType, counted_so_far: int, limit: int, random: float) -> RetryDecision:
    """The fancy retry policy; `random` in [0, 1) picks the conflict delay."""
    if kind == "succeeded":
        return RetryDecision(False, False, "user", 0.0, "succeeded: never retried")
    if kind == "permanent":
        return RetryDecision(False, False, "user", 0.0, "permanent failure: never retried")
    if kind == "transient":
        return RetryDecision(True, False, "platform", 0.0, "transient failure: retried without counting")
    if kind == "conflict":
        low, high = CONFLICT_DELAY_RANGE
        delay = low + (high - low) * random
        return RetryDecision(
            True, False, "resource", delay, "resource conflict: retried after a random delay"
        )
    if limit == -2 or counted_so_far < limit:
        return RetryDecision(True, True, "user", 0.0, f"retry {counted_so_far + 1} of {limit}")
    return RetryDecision(False, False, "user", 0.0, f"retry limit {limit} reached")
