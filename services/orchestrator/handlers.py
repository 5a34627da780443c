"""Message in -> core decision -> stored snapshot -> effects out.

One `apply` per input (or per group of one job's inputs that arrived together, decided in stream
order and written once), always in this order, which is what makes a crash at any instant safe:
1. read the job's framework state and its KV revision;
2. decide (pure) and write the new state with the revision read: the intention (a task to
   start, a task to stop, events to publish in the outbox) is on record before anything happens;
3. carry out the effects: spawn (and feed the launch back through `apply`), stop, adopt, report;
4. publish the outbox with deterministic event ids (the stream drops duplicates), then clear it;
   a run of one kind of event of different tasks is sent together, anything else in order.

A lost KV race re-reads and decides again. A write whose answer is lost with the bus may have
been stored all the same (the server stored it and died before answering, or nats-py sent it from
its buffer once reconnected, after the caller had given up): the store reads such a write back
before it returns (`FrameworkStore.save`), so what a stored decision asks for is carried out, never
left to a redelivery that finds the message seen and does nothing. Messages of one job arrive in
order (the consume loop keys its work queue by job id) and an in-process lock per job serialises
them with executor callbacks, so decisions for one job never interleave.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import json
import random
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping, Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import structlog
from nats.aio.msg import Msg

from libs.backbone.errors import TRANSIENT_ERRORS, KVConflictError, TemporaryError
from libs.backbone.fencing import FenceReader
from libs.backbone.grouping import GroupCommit
from libs.backbone.publishing import NOT_SENT
from libs.failures import PodStatus, RuleSet, analyze, default_rules
from libs.protocol.events import (
    EventBase,
    JobCompleted,
    JobPreempting,
    JobRetrying,
    JobScheduled,
    JobStopRequested,
    JobSubmitted,
    TaskCompleted,
    decode_event,
    task_event_runs,
)
from services.orchestrator.adapters.executing import (
    AlreadyRunningError,
    ContainmentError,
    Executor,
    TaskExit,
    to_failure_info,
)
from services.orchestrator.adapters.rules import RulesKeeper
from services.orchestrator.adapters.specs import launch_facts
from services.orchestrator.adapters.state import FrameworkStore
from services.orchestrator.core.deciders import decide, decide_all
from services.orchestrator.core.effects import (
    AdoptTask,
    Context,
    Effect,
    Input,
    Publish,
    Recovered,
    ReportExit,
    StartTask,
    StopTask,
    TaskLaunched,
)
from services.orchestrator.core.frameworks import Framework

log = structlog.get_logger(__name__)

LAUNCH_FAILED_EXIT_CODE = 255
"""A task whose process could not be started ends as the runtime's own failures do."""
GROUP_LIMIT = 64
"""The most messages of one job decided together (and so the most its consume loop pipelines)."""
CONSUMED = (JobSubmitted, JobScheduled, JobStopRequested, JobPreempting, TaskCompleted)
Publisher = Callable[[EventBase], Awaitable[None]]
Submissions = Callable[[str], Awaitable[JobSubmitted | None]]
"""A job's submission event, read from the job stream (None when the stream has none)."""


class Orchestrator:
    def __init__(
        self,
        store: FrameworkStore,
        executor: Executor,
        publish: Publisher,
        *,
        clock: Callable[[], datetime] = lambda: datetime.now(UTC),
        rng: Callable[[], float] = random.random,
        rules: RulesKeeper | None = None,
        submissions: Submissions | None = None,
        fence: FenceReader | None = None,
    ) -> None:
        self.store = store
        # The scheduler's fences: a placement or preemption of a deposed leader is never carried out.
        self._fence = fence
        self._submissions = submissions
        self.executor = executor
        self._publish = publish
        self._clock = clock
        self._rng = rng
        self._locks: dict[str, tuple[asyncio.Lock, int]] = {}
        self._batches: dict[str, GroupCommit[Input, None]] = {}
        self._keeper = rules
        self._recovered: set[str] = set()  # jobs `recover` has been through (it may be tried again)
        self._reconciled = 0

    @property
    def rules(self) -> RuleSet:
        """The failure rules in force for platform-level analysis."""
        return self._keeper.rules if self._keeper is not None else default_rules()

    async def _refresh_rules(self) -> None:
        """Catch up with a rule change the watch may not have delivered yet, before a task starts."""
        if self._keeper is None:
            return
        try:
            await self._keeper.refresh()
        except TRANSIENT_ERRORS as exc:  # the bus is away: the rules in force are still good ones
            log.warning("could not read the failure rules; using those in force", error=str(exc))

    @contextlib.asynccontextmanager
    async def _job_lock(self, job_id: str) -> AsyncIterator[None]:
        """Serialise one job's decisions; the lock lives only while someone holds or awaits it."""
        lock, users = self._locks.get(job_id, (asyncio.Lock(), 0))
        self._locks[job_id] = (lock, users + 1)
        try:
            async with lock:
                yield
        finally:
            lock, users = self._locks[job_id]
            if users == 1:
                del self._locks[job_id]
            else:
                self._locks[job_id] = (lock, users - 1)

    async def handle_message(self, msg: Msg) -> None:
        """The consume loop's handler: decode, keep only what the orchestrator consumes, apply."""
        event = decode_event(msg.data)
        if isinstance(event, JobScheduled | JobPreempting) and self._fence is not None:
            verdict = await self._fence.deposed(event.epoch, msg.metadata.sequence.stream)
            if verdict is None:
                raise TemporaryError("a new scheduler leader is raising its fence", delay=0.5)
            if verdict:
                log.warning(
                    "ignoring a decision of a deposed scheduler leader",
                    type=event.type,
                    job_id=event.job_id,
                    epoch=event.epoch,
                    sequence=msg.metadata.sequence.stream,
                )
                return
        if isinstance(event, CONSUMED):
            await self.apply(event.job_id, event)

    async def apply(self, job_id: str, message: Input) -> None:
        """Decide and act on one message; returns once its decision is stored and carried out.

        Messages of one job handed in while an earlier one of that job is being applied (the
        consume loop pipelines a job's queued messages, in stream order) are decided together:
        one read and one write of the job's state for all of them, so the 1,000 completions of
        a 1,000-task job are a few dozen writes. If such a group fails, its messages are applied
        again one by one, so one that cannot be applied fails alone.
        """
        group = self._batches.get(job_id)
        if group is None:
            group = self._batches[job_id] = GroupCommit(
                functools.partial(self._apply_group, job_id),
                functools.partial(self._apply_one, job_id),
                max_batch=GROUP_LIMIT,
            )
        try:
            await group.submit(message)
        finally:
            if group.idle and self._batches.get(job_id) is group:
                del self._batches[job_id]

    async def _apply_group(self, job_id: str, messages: Sequence[Input]) -> list[None]:
        async with self._job_lock(job_id):
            await self._apply_locked(job_id, *messages)
        return [None] * len(messages)

    async def _apply_one(self, job_id: str, message: Input) -> None:
        async with self._job_lock(job_id):
            await self._apply_locked(job_id, message)

    async def _apply_locked(self, job_id: str, *messages: Input) -> None:
        """Decide `messages` in order on the stored state, write the result once, then act.

        Several messages at once are the launches of one decision's tasks: however many tasks a
        job has, their pids are recorded in one write, not one write of the whole framework each.
        """
        first = messages[0]
        # A submission is the job's first event: its state is not read, only created (a
        # redelivered one finds the state there, fails to create it, and reads it then).
        new = isinstance(first, JobSubmitted)
        while True:
            current = await self.store.get(job_id, new=new)
            new = False
            snapshot = current.value if current is not None else None
            framework = snapshot
            if framework is None and not isinstance(first, JobSubmitted):
                framework = await self._from_submission(job_id)
            decision = decide_all(framework, [(message, self._context()) for message in messages])
            framework, effects = decision.framework, decision.effects
            if framework is None or (framework == snapshot and not effects):
                if snapshot is not None and snapshot.outbox:  # a flush that failed: this try sends it
                    await self._flush_outbox(job_id)
                return
            revision = current.revision if current else None
            try:
                if framework is snapshot or snapshot is None:
                    await self.store.save(job_id, framework, revision)
                else:  # a working copy of the stored state: only the tasks it took changed
                    await self.store.save(job_id, framework, revision, touched=decision.owned.values())
            except KVConflictError:
                continue  # someone wrote in between: decide again on what is there now
            break
        await self._carry_out(framework, effects)
        await self._flush_outbox(job_id)

    def _context(self) -> Context:
        return Context(now=self._clock(), random=self._rng())

    async def _from_submission(self, job_id: str) -> Framework | None:
        """The framework of a job first met after its submission, built from the submission.

        Frameworks are made when a job first needs one (it is placed, stopped or preempted), not
        while it waits: a queue of thousands of waiting jobs costs the orchestrator nothing.
        """
        if self._submissions is None:
            return None
        submission = await self._submissions(job_id)
        if submission is None or submission.job_id != job_id:
            return None
        return decide(None, submission, self._context()).framework

    async def _carry_out(self, framework: Framework, effects: list[Effect]) -> None:
        job_id = framework.job_id
        launched: list[Input] = []
        if any(isinstance(effect, StartTask) for effect in effects):
            await self._refresh_rules()  # once for every task this decision starts
        for effect in effects:
            started = await EFFECTS[type(effect)](self, framework, effect)
            if started is not None:
                launched.append(started)
        if launched:
            # Recorded together once every task is spawned. A crash before this write leaves
            # tasks whose launch is on record without a pid: `recover` finds them by their lock.
            await self._apply_locked(job_id, *launched)

    async def _start(
        self, framework: Framework, effect: StartTask, *, again: bool = False
    ) -> TaskLaunched | None:
        """Spawn one task; what to record of it, or None when its launch failed (reported as its exit)."""
        try:
            pid, directory = await self.executor.start(framework, effect.key)
        except AlreadyRunningError:
            # Started before: by a decision whose launch was never recorded (a crash, a failed
            # write, a stale probe carried out again), or still in a lost fork server's queue.
            # It is watched, and its end reported once; it is never run a second time.
            probe = self.executor.probe(framework.job_id, effect.key)
            if probe.status == "absent" and not again:  # what held its lock went away unlaunched
                return await self._start(framework, effect, again=True)
            self.executor.adopt(framework.job_id, effect.key, probe.pid or 0, Path(probe.task_dir or ""))
            if probe.status != "alive" or probe.pid is None:
                return None  # its end (or its first sign of life, then its end) comes from the watch
            ports, note, digest = launch_facts(Path(probe.task_dir)) if probe.task_dir else ({}, None, None)
            return TaskLaunched(
                framework.job_id, effect.key, probe.pid, probe.task_dir or "", ports, note, digest
            )
        except Exception as exc:  # the launch itself failed: that is the task's (platform) exit
            log.exception("task launch failed", job_id=framework.job_id, key=list(effect.key))
            why = f"the task could not start: {type(exc).__name__}: {exc}"
            # Not contained, not run: a platform failure retried for free; any other, unknown.
            code = exc.exit_code if isinstance(exc, ContainmentError) else LAUNCH_FAILED_EXIT_CODE
            verdict = analyze(self.rules, exit_code=code, platform_log=why, stage="platform")
            exit_ = TaskExit(framework.job_id, effect.key, code, to_failure_info(verdict), why)
            await self.on_task_exit(exit_)
            return None
        ports, note, digest = launch_facts(directory)
        return TaskLaunched(framework.job_id, effect.key, pid, str(directory), ports, note, digest)

    async def _stop(self, framework: Framework, effect: StopTask) -> None:
        await self.executor.stop(framework.job_id, effect.key, effect.exit_code)

    async def _adopt(self, framework: Framework, effect: AdoptTask) -> None:
        self.executor.adopt(framework.job_id, effect.key, effect.pid, Path(effect.task_dir))

    async def _report(self, framework: Framework, effect: ReportExit) -> None:
        await self.executor.report(framework.job_id, effect.key)

    async def _published(self, framework: Framework, effect: Publish) -> None:
        """Nothing here: the event is in the stored outbox, which `_flush_outbox` sends next."""

    async def on_task_exit(self, exit_: TaskExit) -> None:
        """The executor saw a task end: publish task.completed; its handling comes from the stream."""
        attempt, role, index, task_attempt = exit_.key
        event = TaskCompleted(
            event_id=f"{exit_.job_id}.{attempt}.{role}.{index}.{task_attempt}.completed",
            job_id=exit_.job_id,
            attempt=attempt,
            role=role,
            index=index,
            task_attempt=task_attempt,
            exit_code=exit_.exit_code,
            failure=exit_.failure,
            diagnostics=exit_.diagnostics,
            image_digest=exit_.image_digest,
        )
        await self._publish_until_sent(event)

    async def _publish_until_sent(self, event: EventBase) -> None:
        delay = 0.2
        while True:
            try:
                await self._publish(event)
                return
            except NOT_SENT as exc:  # the bus is away: a fact must not be lost, so keep trying
                log.warning("publish failed; retrying", event_id=event.event_id, error=str(exc), delay=delay)
                await asyncio.sleep(delay)
                delay = min(delay * 2, 5.0)

    async def _flush_outbox(self, job_id: str) -> None:
        while True:
            current = await self.store.get(job_id)
            if current is None or not current.value.outbox:
                return
            outbox = [decode_event_dict(raw) for raw in current.value.outbox]
            for run in task_event_runs(outbox, longest=PUBLISH_WINDOW):
                for event in run:
                    if isinstance(event, JobRetrying | JobCompleted):
                        # Before the announcement, so whoever reacts to it finds the ports free.
                        self.executor.release(job_id, event.attempt)
                # A run is in flight together (its events are of different tasks, so their order
                # among themselves means nothing); a run is stored before the next one is sent.
                await asyncio.gather(*(self._publish_until_sent(event) for event in run))
            cleared = current.value.model_copy(update={"outbox": []})
            try:
                await self.store.save(job_id, cleared, current.revision)
                return
            except KVConflictError:
                continue

    async def on_node_lost(self, node: str) -> int:
        """A node stopped answering: every task placed on it ends as NodeLost, a platform failure
        the retry policy retries for free. The task is also asked to stop, in case the node comes
        back; its later exit is a duplicate the decider ignores. Returns how many tasks ended."""
        verdict = to_failure_info(
            analyze(self.rules, exit_code=None, stage="platform", pod=PodStatus(reason="NodeLost"))
        )
        ended = 0
        for job_id in await self.store.job_ids():
            if await self.store.settled(job_id):
                continue
            current = await self.store.get(job_id)
            if current is None:
                continue
            framework = current.value
            for key in framework.running_keys():
                attempt = next((a for a in framework.attempts if a.attempt == key.job_attempt), None)
                task = attempt.task(key.role, key.task_index) if attempt is not None else None
                if task is None or task.placement is None or task.placement.node != node:
                    continue
                try:
                    await self.executor.stop(job_id, key, verdict.code)
                except Exception:  # the node is gone: stopping may fail; its end is reported below
                    log.warning("a task of a lost node could not be stopped", job_id=job_id, exc_info=True)
                await self.on_task_exit(TaskExit(job_id, key, verdict.code, verdict, f"node {node} was lost"))
                ended += 1
        return ended

    async def recover(self) -> int:
        """On start-up: republish pending events and reconcile every task the state may own.

        Tried again where the bus failed midway (`patiently`), it goes on from the job it failed
        at: a job already reconciled is not probed and adopted twice. Returns the jobs with tasks
        reconciled, over every try."""
        for job_id in await self.store.job_ids():
            if job_id in self._recovered:
                continue
            if await self.store.settled(job_id):
                self._recovered.add(job_id)
                continue  # over and announced: nothing of it can run or be pending
            current = await self.store.get(job_id)
            if current is None:
                self._recovered.add(job_id)
                continue
            framework = current.value
            keys = framework.running_keys()
            if keys:
                probes = {key: self.executor.probe(job_id, key) for key in keys}
                await self.apply(job_id, Recovered(job_id, probes))
                self._reconciled += 1
            async with self._job_lock(job_id):
                await self._flush_outbox(job_id)
            self._recovered.add(job_id)
        return self._reconciled


PUBLISH_WINDOW = 256
"""The most outbox events in flight at once: a 10,000-task job's task.started events go out in
dozens of round trips to the bus instead of ten thousand."""


EffectHandler = Callable[[Orchestrator, Framework, Any], Awaitable[TaskLaunched | None]]
EFFECTS: Mapping[type[Effect], EffectHandler] = {
    StartTask: Orchestrator._start,
    StopTask: Orchestrator._stop,
    AdoptTask: Orchestrator._adopt,
    ReportExit: Orchestrator._report,
    Publish: Orchestrator._published,
}
"""What carries out each effect a decision asks for: a table from effect type to handler (a
launch's record, where one comes back, is fed to the core again)."""


def decode_event_dict(raw: dict[str, object]) -> EventBase:
    event: EventBase = decode_event(json.dumps(raw))
    return event
