"""A small deterministic world for driving the orchestrator core without any I/O.

It plays the executor (a set of live processes), the bus (a queue of events) and the store
(the last snapshot written), so tests can deliver, duplicate, reorder and crash at will.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any

from libs.protocol.events import (
    EventBase,
    FailureInfo,
    JobScheduled,
    JobSubmitted,
    TaskCompleted,
    TaskPlacement,
    decode_event,
)
from libs.protocol.jobs import JobConfig
from services.orchestrator.core.deciders import decide
from services.orchestrator.core.effects import (
    AdoptTask,
    Context,
    Decision,
    Input,
    Probe,
    Publish,
    Recovered,
    ReportExit,
    StartTask,
    StopTask,
    TaskLaunched,
)
from services.orchestrator.core.frameworks import Framework, TaskKey
from tests.support.jobs import job_model

JOB = "job1"
T0 = datetime(2026, 1, 1, tzinfo=UTC)


def config(roles: dict[str, dict[str, Any]], **top: Any) -> dict[str, Any]:
    return {"protocolVersion": 2, "name": "j", "taskRoles": roles, **top}


def submitted(cfg: dict[str, Any] | JobConfig, job_id: str = JOB) -> JobSubmitted:
    return JobSubmitted(
        job_id=job_id, user="alice", name="j", virtual_cluster="default", config=job_model(cfg)
    )


def scheduled(cfg: dict[str, Any] | JobConfig, attempt: int = 0, job_id: str = JOB) -> JobScheduled:
    placements = [
        TaskPlacement(role=role, index=i, node="local", node_address="127.0.0.1")
        for role, body in job_model(cfg).task_roles.items()
        for i in range(body.instances)
    ]
    return JobScheduled(job_id=job_id, attempt=attempt, placements=tuple(placements))


def verdict(kind: str, code: int = 1) -> FailureInfo:
    return FailureInfo(code=code, phrase=kind, type=kind)  # type: ignore[arg-type]


def completed(
    key: TaskKey, exit_code: int, failure: FailureInfo | None = None, job_id: str = JOB
) -> TaskCompleted:
    attempt, role, index, task_attempt = key
    return TaskCompleted(
        event_id=f"{job_id}.{attempt}.{role}.{index}.{task_attempt}.completed",
        job_id=job_id,
        attempt=attempt,
        role=role,
        index=index,
        task_attempt=task_attempt,
        exit_code=exit_code,
        failure=failure,
    )


def decide_untouched(framework: Framework | None, message: Input, ctx: Context) -> Decision:
    """`decide`, checking that it left the snapshot it was given as it was (copy-on-write)."""
    frozen = framework.model_dump() if framework is not None else None
    decision = decide(framework, message, ctx)
    if framework is not None:
        assert framework.model_dump() == frozen, f"deciding {type(message).__name__} modified the snapshot"
    return decision


@dataclass
class World:
    """Runs decisions and their effects; `running` is what the executor has alive now."""

    framework: Framework | None = None
    running: dict[TaskKey, int] = field(default_factory=dict)
    ever_started: list[TaskKey] = field(default_factory=list)
    ended: set[TaskKey] = field(default_factory=set)
    published: list[EventBase] = field(default_factory=list)
    bus: list[TaskCompleted] = field(default_factory=list)
    tick: int = 0
    next_pid: int = 100
    exit_on_stop: int = 143

    def ctx(self) -> Context:
        self.tick += 1
        return Context(now=T0 + timedelta(seconds=self.tick), random=0.25)

    def feed(self, message: Input, *, apply_effects: bool = True) -> list[Any]:
        decision = decide_untouched(self.framework, message, self.ctx())
        self.framework = decision.framework
        if apply_effects:
            self.apply(decision.effects)
            self.flush()
        return decision.effects

    def apply(self, effects: list[Any]) -> None:
        for effect in effects:
            if isinstance(effect, StartTask):
                assert effect.key not in self.running, f"{effect.key} started while it runs"
                assert effect.key not in self.ever_started, f"{effect.key} started twice"
                self.ever_started.append(effect.key)
                self.next_pid += 1
                self.running[effect.key] = self.next_pid
                self.feed(TaskLaunched(JOB, effect.key, self.next_pid, f"/tasks/{effect.key}"))
            elif isinstance(effect, StopTask):
                if effect.key in self.running:
                    del self.running[effect.key]
                    self.ended.add(effect.key)
                    self.bus.append(completed(effect.key, self.exit_on_stop))
                elif effect.key not in self.ended:
                    self.bus.append(completed(effect.key, -210))
            elif isinstance(effect, ReportExit):
                self.bus.append(completed(effect.key, 137))
            elif isinstance(effect, Publish):
                pass  # published from the outbox by flush(), as the handler does
            elif isinstance(effect, AdoptTask):
                assert effect.key in self.running

    def flush(self) -> None:
        """Publish the outbox as the handler does; the bus drops duplicates by event id."""
        if self.framework is None:
            return
        known = {e.event_id for e in self.published}
        for raw in self.framework.outbox:
            event = decode_event(json.dumps(raw))
            if event.event_id not in known:
                self.published.append(event)
        self.framework.outbox.clear()

    def exit(self, key: TaskKey, code: int, failure: FailureInfo | None = None) -> None:
        """The task's process ends by itself; its completion goes to the bus."""
        del self.running[key]
        self.ended.add(key)
        self.bus.append(completed(key, code, failure))

    def drain(self) -> None:
        while self.bus:
            self.feed(self.bus.pop(0))

    def restart(self) -> None:
        """The orchestrator restarts: probe every task it may own and recover."""
        assert self.framework is not None
        self.flush()
        probes: dict[TaskKey, Probe] = {}
        for key in self.framework.running_keys():
            if key in self.running:
                probes[key] = Probe("alive", self.running[key], f"/tasks/{key}")
            elif key in self.ended:
                probes[key] = Probe("ended", None, f"/tasks/{key}")
            else:
                probes[key] = Probe("absent")
        self.feed(Recovered(JOB, probes))

    def types(self) -> list[str]:
        return [getattr(e, "type") for e in self.published]  # noqa: B009
