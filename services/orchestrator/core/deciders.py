"""The orchestrator's decisions: one pure function from (snapshot, input, context) to a decision.

`decide` copies the snapshot, folds the input into the copy through the state table, and
returns the new snapshot with the effects to carry out (start or stop a task, adopt a task
found alive, report a task that ended unseen, publish an event). Published events are also
kept in the snapshot's outbox so they survive a crash until the handler confirms them.

Every input is idempotent: a redelivered event, a stale attempt's task report, a second stop,
all leave the snapshot unchanged and ask for nothing.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from libs.protocol.events import (
    EventBase,
    FailureInfo,
    JobCompleted,
    JobPreempting,
    JobRetrying,
    JobScheduled,
    JobState,
    JobStopRequested,
    JobSubmitted,
    TaskCompleted,
    TaskStarted,
)
from services.orchestrator.core.effects import (
    AdoptTask,
    Context,
    Decision,
    Input,
    Publish,
    Recovered,
    ReportExit,
    StartTask,
    StopTask,
    TaskLaunched,
)
from services.orchestrator.core.frameworks import (
    Ending,
    Framework,
    JobAttempt,
    Task,
    TaskAttempt,
    TaskKey,
    editable_task,
    remember,
    task_position,
    working_copy,
)
from services.orchestrator.core.policies import (
    PREEMPTED_EXIT_CODE,
    STOP_EXIT_CODE,
    decide_completion_counted,
    decide_retry,
    failure_type,
    spec_from_config,
)
from services.orchestrator.core.states import (
    ENDING_STATES,
    LIVE_STATES,
    AttemptState,
    Trigger,
    transition,
    walk,
)

S = AttemptState
T = Trigger


def decide(framework: Framework | None, message: Input, ctx: Context) -> Decision:
    """The new snapshot and effects for one input; the given snapshot is never modified."""
    return decide_all(framework, [(message, ctx)])


def decide_all(framework: Framework | None, inputs: Sequence[tuple[Input, Context]]) -> Decision:
    """The new snapshot and effects for several inputs in order, as `decide` one after the other
    would give, from one copy of the snapshot (the launches of ten thousand tasks are recorded
    without copying the job for each). The given snapshot is never modified."""
    decision = Decision(framework)
    fw: Framework | None = None  # the working copy, made when an input changes something
    for message, ctx in inputs:
        current = decision.framework
        event_id = getattr(message, "event_id", None)
        if current is not None and event_id is not None and event_id in current.seen:
            continue
        if isinstance(message, JobSubmitted):
            if current is not None:
                continue
            fw = Framework(
                job_id=message.job_id,
                user=message.user,
                name=message.name,
                virtual_cluster=message.virtual_cluster,
                config=message.config,
                storages=[storage.model_dump() for storage in message.storages],
                spec=spec_from_config(message.config),
                submitted_at=message.occurred_at,
                attempts=[JobAttempt(attempt=0)],
            )
            remember(fw, message.event_id)
            decision.framework = fw
            continue
        if current is None:
            # Nothing known about the job (its submission is not in the stream): nothing to do.
            continue
        if fw is None:
            fw = working_copy(current)
            decision.framework = fw
        _fold(fw, message, event_id, ctx, decision)
    return decision


def _fold(fw: Framework, message: Input, event_id: str | None, ctx: Context, decision: Decision) -> None:
    """Fold one input into the working copy by its type's rule (``_RULES``, at the module's end)."""
    rule = _RULES.get(type(message))
    if rule is not None:
        rule(fw, message, ctx, decision)
    if event_id is not None and not isinstance(message, TaskCompleted):
        # A task's report needs no memory: its task attempt's own state makes a second one a
        # no-op, and keeping thousands of task ids would make every write of the job larger.
        remember(fw, event_id)
    fw.state = fw.current.state if fw.current is not None else fw.state


def _on_stop_requested(fw: Framework, event: JobStopRequested, ctx: Context, decision: Decision) -> None:
    _on_stop(fw, "stopped", STOP_EXIT_CODE, f"stopped by {event.by}", ctx, decision)


def _on_preempting(fw: Framework, event: JobPreempting, ctx: Context, decision: Decision) -> None:
    if fw.current is not None and fw.current.state in (S.CREATION_REQUESTED, S.PREPARING, S.RUNNING):
        fw.preempting = True
        _on_stop(fw, "preempted", PREEMPTED_EXIT_CODE, f"preempted: {event.reason}", ctx, decision)


def _on_task_completed(fw: Framework, event: TaskCompleted, ctx: Context, decision: Decision) -> None:
    key = TaskKey(event.attempt, event.role, event.index, event.task_attempt)
    _on_task_exit(fw, key, event.exit_code, event.failure, event.diagnostics, ctx, decision)


def _on_task_launched(fw: Framework, message: TaskLaunched, ctx: Context, decision: Decision) -> None:
    _on_launched(
        fw,
        message.key,
        message.pid,
        message.task_dir,
        ctx,
        decision,
        message.ports,
        message.note,
        message.image_digest,
    )


def _publish(fw: Framework, decision: Decision, event: EventBase) -> None:
    fw.outbox.append(event.model_dump(mode="json"))
    decision.effects.append(Publish(event))


def _find(fw: Framework, key: TaskKey, decision: Decision) -> tuple[JobAttempt, Task, TaskAttempt] | None:
    """The attempt, task and task attempt of `key`, the task made editable by this decision."""
    attempt_no, role, index, task_attempt = key
    for attempt in fw.attempts:
        if attempt.attempt != attempt_no:
            continue
        position = task_position(fw.spec, attempt, role, index)
        if position is None:
            return None
        if not any(ta.task_attempt == task_attempt for ta in attempt.tasks[position].attempts):
            return None
        task = editable_task(attempt, position, decision.owned)
        ta = next(ta for ta in task.attempts if ta.task_attempt == task_attempt)
        return attempt, task, ta
    return None


def _on_scheduled(fw: Framework, event: JobScheduled, ctx: Context, decision: Decision) -> None:
    attempt = fw.current
    if attempt is None or attempt.attempt != event.attempt or attempt.state is not S.CREATION_PENDING:
        return  # stale or repeated placement
    if fw.stop_requested or fw.outcome is not None or fw.spec is None:
        return
    placements = {(p.role, p.index): p for p in event.placements}
    for role in fw.spec.roles:
        for index in range(role.instances):
            task = Task(role=role.name, index=index, placement=placements.get((role.name, index)))
            task.attempts.append(TaskAttempt(task_attempt=0, state=S.CREATION_REQUESTED))
            attempt.tasks.append(task)
            decision.owned[id(task)] = (attempt.attempt, len(attempt.tasks) - 1)  # new: no copy needed
            key = TaskKey(attempt.attempt, role.name, index, 0)
            decision.effects.append(StartTask(fw.job_id, key, task.placement))
    attempt.scheduled_at = ctx.now
    attempt.state = transition(attempt.state, T.REQUEST_CREATION)
    if not attempt.tasks:  # a job with no task has nothing to run: it succeeds at once
        _end_attempt(fw, attempt, AttemptEnd("succeeded", 0, "the job has no task"), ctx, decision)


def _on_launched(
    fw: Framework,
    key: TaskKey,
    pid: int,
    task_dir: str,
    ctx: Context,
    decision: Decision,
    ports: dict[str, list[int]] | None = None,
    note: str | None = None,
    image_digest: str | None = None,
) -> None:
    found = _find(fw, key, decision)
    if found is None:
        return
    attempt, task, ta = found
    if ta.state is not S.CREATION_REQUESTED:
        return
    ta.state = walk(ta.state, T.LAUNCHED, T.STARTED)
    ta.pid, ta.task_dir, ta.launched_at = pid, task_dir, ctx.now
    if attempt.state is S.CREATION_REQUESTED:
        # The first process of the attempt exists: the job runs (OpenPAI shows RUNNING).
        attempt.state = walk(attempt.state, T.LAUNCHED, T.STARTED)
        attempt.running_at = ctx.now
    node = task.placement.node if task.placement is not None else "local"
    address = task.placement.node_address if task.placement is not None else None
    _publish(
        fw,
        decision,
        TaskStarted(
            event_id=f"{fw.job_id}.{key.job_attempt}.{key.role}.{key.task_index}.{key.task_attempt}.started",
            occurred_at=ctx.now,
            job_id=fw.job_id,
            attempt=key.job_attempt,
            role=key.role,
            index=key.task_index,
            task_attempt=key.task_attempt,
            node=node,
            pid=pid,
            address=address,
            ports=dict(ports or {}),
            note=note,
            image_digest=image_digest,
        ),
    )
    if attempt.state in ENDING_STATES:
        # The attempt was asked to end while this launch was in flight: stop it now.
        ta.state = walk(ta.state, T.DECIDE_END, T.REQUEST_DELETION)
        decision.effects.append(StopTask(fw.job_id, key, attempt.diagnostics, _stop_code(attempt)))


def _on_task_exit(
    fw: Framework,
    key: TaskKey,
    exit_code: int,
    failure: FailureInfo | None,
    diagnostics: str,
    ctx: Context,
    decision: Decision,
) -> None:
    found = _find(fw, key, decision)
    if found is None:
        return
    attempt, task, ta = found
    if ta.state in (S.ATTEMPT_COMPLETED, S.COMPLETED, S.CREATION_PENDING):
        return  # already reported (duplicate), or never launched
    ta.state = transition(ta.state, T.EXITED)
    ta.exit_code, ta.failure, ta.diagnostics, ta.completed_at = exit_code, failure, diagnostics, ctx.now
    if attempt.state in ENDING_STATES:
        _finish_task(attempt, task, ta, succeeded=exit_code == 0)
        _maybe_finish_attempt(fw, attempt, ctx, decision)
        return
    assert fw.spec is not None
    role = fw.spec.role(task.role)
    if exit_code != 0 and not fw.spec.gang:
        verdict = decide_retry(
            failure_type(exit_code, failure), task.counted_retries, role.task_retry_count, ctx.random
        )
        if verdict.retry:
            task.counted_retries += 1 if verdict.counted else 0
            # The old task attempt stays AttemptCompleted in history; a new one begins.
            new = TaskAttempt(task_attempt=ta.task_attempt + 1)
            new.state = transition(new.state, T.REQUEST_CREATION)
            task.attempts.append(new)
            new_key = TaskKey(attempt.attempt, task.role, task.index, new.task_attempt)
            decision.effects.append(StartTask(fw.job_id, new_key, task.placement))
            return
    _finish_task(attempt, task, ta, succeeded=exit_code == 0)
    completion = decide_completion_counted(
        fw.spec, attempt.tally, len(attempt.tasks), task.role, task.index, task.succeeded
    )
    if completion is None:
        return
    if completion.outcome == "succeeded":
        end = AttemptEnd("succeeded", 0, completion.diagnostics, None, task.role, task.index)
    else:
        end = AttemptEnd("failed", exit_code, completion.diagnostics, failure, task.role, task.index)
    _end_attempt(fw, attempt, end, ctx, decision)


def _stop_code(attempt: JobAttempt) -> int:
    """How a task ended by the platform is reported: a user's stop, or its attempt completing."""
    return STOP_EXIT_CODE if attempt.ending == "stopped" else PREEMPTED_EXIT_CODE


def _finish_task(attempt: JobAttempt, task: Task, ta: TaskAttempt, *, succeeded: bool) -> None:
    ta.state = transition(ta.state, T.COMPLETE)
    _mark_done(attempt, task, succeeded=succeeded)


def _mark_done(attempt: JobAttempt, task: Task, *, succeeded: bool) -> None:
    task.done, task.succeeded = True, succeeded
    attempt.count_completed(task.role, succeeded=succeeded)


@dataclass(frozen=True)
class AttemptEnd:
    """How a policy, a stop or a preemption ends an attempt: what its retry or the job's
    completion will report, and which task, if one, brought the end."""

    ending: Ending
    exit_code: int
    diagnostics: str
    failure: FailureInfo | None = None
    trigger_role: str | None = None
    trigger_index: int | None = None


def _end_attempt(
    fw: Framework, attempt: JobAttempt, end: AttemptEnd, ctx: Context, decision: Decision
) -> None:
    """A policy, a stop or a preemption ends the attempt: stop what still runs, then finish."""
    attempt.ending, attempt.exit_code, attempt.failure = end.ending, end.exit_code, end.failure
    attempt.diagnostics, attempt.trigger_role, attempt.trigger_index = (
        end.diagnostics,
        end.trigger_role,
        end.trigger_index,
    )
    attempt.state = transition(attempt.state, T.DECIDE_END)
    for position, shared in enumerate(attempt.tasks):
        if shared.done:
            continue
        task = editable_task(attempt, position, decision.owned)
        ta = task.current
        if ta.state is S.CREATION_PENDING:
            ta.state = walk(ta.state, T.DECIDE_END, T.REQUEST_DELETION, T.EXITED, T.COMPLETE)
            _mark_done(attempt, task, succeeded=False)
        elif ta.state in LIVE_STATES:
            ta.state = walk(ta.state, T.DECIDE_END, T.REQUEST_DELETION)
            key = TaskKey(attempt.attempt, task.role, task.index, ta.task_attempt)
            decision.effects.append(StopTask(fw.job_id, key, end.diagnostics, _stop_code(attempt)))
    attempt.state = transition(attempt.state, T.REQUEST_DELETION)
    _maybe_finish_attempt(fw, attempt, ctx, decision)


def _maybe_finish_attempt(fw: Framework, attempt: JobAttempt, ctx: Context, decision: Decision) -> None:
    """Once no process of the attempt is left, retry it or complete the job."""
    if attempt.completed_tasks < len(attempt.tasks) or attempt.state not in ENDING_STATES:
        return
    attempt.state = transition(attempt.state, T.EXITED)
    attempt.completed_at = ctx.now
    ending = attempt.ending
    assert ending is not None
    assert fw.spec is not None
    if ending == "preempted":
        fw.preempting = False
        fw.retries.resource += 1
        _retry(fw, attempt, "resource", False, 0.0, attempt.diagnostics, ctx, decision)
        return
    if ending == "failed":
        kind = failure_type(attempt.exit_code or 0, attempt.failure)
        verdict = decide_retry(kind, fw.retries.user, fw.spec.job_retry_count, ctx.random)
        if verdict.retry:
            if verdict.kind == "user":
                fw.retries.user += 1
            elif verdict.kind == "platform":
                fw.retries.platform += 1
            else:
                fw.retries.resource += 1
            reason = f"{attempt.diagnostics}; {verdict.reason}"
            _retry(fw, attempt, verdict.kind, verdict.counted, verdict.delay_seconds, reason, ctx, decision)
            return
        attempt.diagnostics = f"{attempt.diagnostics}; {verdict.reason}"
    outcome = {"succeeded": JobState.SUCCEEDED, "failed": JobState.FAILED, "stopped": JobState.STOPPED}[
        ending
    ]
    attempt.state = transition(attempt.state, T.COMPLETE)
    fw.outcome, fw.completed_at = outcome, ctx.now
    _publish(
        fw,
        decision,
        JobCompleted(
            event_id=f"{fw.job_id}.completed",
            occurred_at=ctx.now,
            job_id=fw.job_id,
            attempt=attempt.attempt,
            state=outcome,  # type: ignore[arg-type]
            exit_code=attempt.exit_code if attempt.exit_code is not None else 0,
            diagnostics=attempt.diagnostics,
            failure=attempt.failure,
            trigger_role=attempt.trigger_role,
            trigger_index=attempt.trigger_index,
        ),
    )


def _retry(
    fw: Framework,
    attempt: JobAttempt,
    kind: str,
    counted: bool,
    delay: float,
    reason: str,
    ctx: Context,
    decision: Decision,
) -> None:
    # The ended attempt keeps its AttemptCompleted record; the move back to CreationPending is
    # the next attempt's first state.
    fw.attempts.append(JobAttempt(attempt=attempt.attempt + 1, state=transition(attempt.state, T.RETRY)))
    _publish(
        fw,
        decision,
        JobRetrying(
            event_id=f"{fw.job_id}.retrying.{attempt.attempt}",
            occurred_at=ctx.now,
            job_id=fw.job_id,
            attempt=attempt.attempt,
            next_attempt=attempt.attempt + 1,
            kind=kind,  # type: ignore[arg-type]
            counted=counted,
            delay_seconds=delay,
            reason=reason,
            exit_code=attempt.exit_code,
            failure=attempt.failure,
            trigger_role=attempt.trigger_role,
            trigger_index=attempt.trigger_index,
        ),
    )


def _on_stop(
    fw: Framework, ending: Ending, exit_code: int, reason: str, ctx: Context, decision: Decision
) -> None:
    attempt = fw.current
    if fw.outcome is not None or attempt is None:
        return  # already over: stopping is idempotent
    if ending == "stopped":
        if fw.stop_requested:
            return
        fw.stop_requested = True
    if attempt.state is S.CREATION_PENDING:
        if ending == "preempted":
            return
        attempt.state = transition(attempt.state, T.DECIDE_END)
        attempt.ending, attempt.exit_code, attempt.diagnostics = ending, exit_code, reason
        attempt.state = transition(attempt.state, T.REQUEST_DELETION)
        _maybe_finish_attempt(fw, attempt, ctx, decision)
        return
    if attempt.state in ENDING_STATES:
        if ending == "stopped":
            # A stop outranks the policy decision in progress: no retry will follow.
            attempt.ending, attempt.exit_code, attempt.failure = "stopped", exit_code, None
            attempt.diagnostics = reason
        return
    _end_attempt(fw, attempt, AttemptEnd(ending, exit_code, reason), ctx, decision)


def _on_recovered(fw: Framework, message: Recovered, ctx: Context, decision: Decision) -> None:
    for key in fw.running_keys():
        found = _find(fw, key, decision)
        assert found is not None
        attempt, task, ta = found
        probe = message.probes.get(key)
        if probe is None:
            continue
        if probe.status == "alive" and probe.pid is not None:
            if ta.state is S.CREATION_REQUESTED:
                _on_launched(fw, key, probe.pid, probe.task_dir or "", ctx, decision)
            decision.effects.append(AdoptTask(fw.job_id, key, probe.pid, probe.task_dir or ta.task_dir or ""))
            if ta.state in ENDING_STATES and not any(
                isinstance(e, StopTask) and e.key == key for e in decision.effects
            ):
                decision.effects.append(StopTask(fw.job_id, key, attempt.diagnostics, _stop_code(attempt)))
        elif probe.status == "ended" or ta.pid is not None:
            decision.effects.append(ReportExit(fw.job_id, key, probe.task_dir or ta.task_dir))
        elif ta.state is S.CREATION_REQUESTED and attempt.state not in ENDING_STATES:
            # The launch was intended and never happened: this is the only start it gets.
            decision.effects.append(StartTask(fw.job_id, key, task.placement))
        else:
            # Never launched and no longer wanted.
            _on_task_exit(fw, key, STOP_EXIT_CODE, None, "stopped before it started", ctx, decision)


# One rule per input type after the submission (cosmicpython's message bus); any other input
# changes nothing but is remembered.
_RULES: dict[type, Callable[[Framework, Any, Context, Decision], None]] = {
    JobScheduled: _on_scheduled,
    JobStopRequested: _on_stop_requested,
    JobPreempting: _on_preempting,
    TaskCompleted: _on_task_completed,
    TaskLaunched: _on_task_launched,
    Recovered: _on_recovered,
}
