"""The framework state as a job value plus task values: small writes, and exact after any crash.

What a restarted orchestrator reads (a fresh FrameworkStore) must always be what the running one
decided, whichever write a crash interrupted, and what one task event writes must not grow
with the job.
"""

from __future__ import annotations

from typing import Any

import pytest

from libs.backbone.connecting import Bus
from libs.backbone.topology import ensure_topology
from libs.protocol.events import EventBase
from services.orchestrator.adapters.state import CARRIED_TASKS, FrameworkStore, TaskRecord, task_key
from services.orchestrator.core.frameworks import Framework, TaskKey
from services.orchestrator.handlers import Orchestrator
from tests.orchestrator.executors import InstantExecutor
from tests.orchestrator.sim import completed, config, scheduled, submitted


class Crash(BaseException):
    """Stands for the process dying: nothing in the handler may catch it."""


async def ignore(_event: EventBase) -> None:
    return None


class Writes:
    """The sizes of the values written to the framework bucket, by key kind."""

    def __init__(self, store: FrameworkStore) -> None:
        self.sizes: list[tuple[str, int]] = []
        js = store._kv._js
        self._publish = js.publish
        self._js = js
        prefix = f"$KV.{store._store.bucket}."

        async def counted(subject: str, payload: bytes = b"", *args: Any, **kwargs: Any) -> Any:
            if subject.startswith(prefix):
                self.sizes.append((subject.removeprefix(prefix), len(payload)))
            return await self._publish(subject, payload, *args, **kwargs)

        js.publish = counted  # type: ignore[method-assign]

    def close(self) -> None:
        self._js.publish = self._publish  # type: ignore[method-assign]


async def started_job(bus: Bus, tasks: int, job_id: str = "job1") -> Orchestrator:
    await ensure_topology(bus.js)
    orch = Orchestrator(await FrameworkStore.open(bus.js), InstantExecutor(), ignore)  # type: ignore[arg-type]
    cfg = config({"worker": {"instances": tasks}})
    await orch.apply(job_id, submitted(cfg, job_id=job_id))
    await orch.apply(job_id, scheduled(cfg, job_id=job_id))
    return orch


async def fresh_read(bus: Bus, job_id: str = "job1") -> Framework:
    stored = await (await FrameworkStore.open(bus.js)).get(job_id)
    assert stored is not None
    return stored.value


async def test_what_a_completion_writes_is_the_same_for_twenty_tasks_or_a_thousand(bus: Bus) -> None:
    largest = {}
    per_completion = {}
    for tasks, job_id in ((20, "small"), (1000, "large")):
        orch = await started_job(bus, tasks, job_id)
        writes = Writes(orch.store)
        for i in range(tasks - 1):  # the last one ends the job, which writes more
            await orch.apply(job_id, completed(TaskKey(0, "worker", i, 0), 0, job_id=job_id))
        writes.close()
        largest[tasks] = max(size for _key, size in writes.sizes)
        per_completion[tasks] = sum(size for _key, size in writes.sizes) / (tasks - 1)
        assert all(not key.startswith(f"{job_id}.d.") for key, _size in writes.sizes), "nothing staged"
    assert largest[1000] < 8 * 1024
    assert largest[1000] <= largest[20] * 1.1
    assert per_completion[1000] <= per_completion[20] * 1.2


async def test_a_restart_reads_exactly_what_was_decided_at_every_step(bus: Bus) -> None:
    orch = await started_job(bus, 40)
    for i in range(40):
        await orch.apply("job1", completed(TaskKey(0, "worker", i, 0), 0 if i % 3 else 1))
        mine = await orch.store.get("job1")
        assert mine is not None
        # Whether this task is only in the job's value or already in its own, a restart sees it.
        assert (await fresh_read(bus)).model_dump() == mine.value.model_dump()
        if mine.value.outcome is not None:
            break


async def test_a_placement_staged_but_never_named_is_never_read(
    bus: Bus, monkeypatch: pytest.MonkeyPatch
) -> None:
    await ensure_topology(bus.js)
    store = await FrameworkStore.open(bus.js)
    orch = Orchestrator(store, InstantExecutor(), ignore)  # type: ignore[arg-type]
    cfg = config({"worker": {"instances": 500}})
    await orch.apply("job1", submitted(cfg))
    writes = Writes(store)
    update = store._store.update

    async def dying(*args: Any) -> int:
        raise Crash

    monkeypatch.setattr(store._store, "update", dying)
    with pytest.raises(Crash):
        await orch.apply("job1", scheduled(cfg))  # its tasks staged, the job's value not written
    writes.close()
    monkeypatch.setattr(store._store, "update", update)
    assert any(key.startswith("job1.d.") for key, _size in writes.sizes)
    after = await fresh_read(bus)
    assert after.attempts[0].tasks == []
    assert after.attempts[0].state == "AttemptCreationPending"
    assert orch.executor.spawned == 0  # type: ignore[attr-defined]


async def test_a_crash_after_the_job_value_before_its_tasks_are_copied_loses_nothing(
    bus: Bus, monkeypatch: pytest.MonkeyPatch
) -> None:
    orch = await started_job(bus, 3 * CARRIED_TASKS)
    for i in range(CARRIED_TASKS):
        await orch.apply("job1", completed(TaskKey(0, "worker", i, 0), 0))

    async def dying(*args: Any, **kwargs: Any) -> None:
        raise Crash

    # The next completion first copies the carried tasks to their own values: die there.
    monkeypatch.setattr(orch.store, "_write_tasks", dying)
    with pytest.raises(Crash):
        await orch.apply("job1", completed(TaskKey(0, "worker", CARRIED_TASKS, 0), 0))
    after = await fresh_read(bus)
    done = [t.index for t in after.attempts[0].tasks if t.done]
    assert done == list(range(CARRIED_TASKS))
    assert after.attempts[0].tally["worker"].succeeded == CARRIED_TASKS

    # A restarted orchestrator goes on from there and finishes the job.
    second = Orchestrator(await FrameworkStore.open(bus.js), InstantExecutor(), ignore)  # type: ignore[arg-type]
    for i in range(CARRIED_TASKS, 3 * CARRIED_TASKS):
        await second.apply("job1", completed(TaskKey(0, "worker", i, 0), 0))
    final = await fresh_read(bus)
    assert final.outcome == "SUCCEEDED"
    assert all(t.done and t.succeeded for t in final.attempts[0].tasks)


async def test_a_late_copy_of_a_task_never_replaces_a_later_decision(bus: Bus) -> None:
    orch = await started_job(bus, 2 * CARRIED_TASKS)
    for i in range(2 * CARRIED_TASKS - 1):
        await orch.apply("job1", completed(TaskKey(0, "worker", i, 0), 0))
    after = await fresh_read(bus)
    # Another process, still holding the task as it was at launch, copies it late.
    kv = orch.store._kv
    stale = TaskRecord(attempt=0, position=0, task=after.attempts[0].tasks[0].model_copy(), rev=1)
    stale.task.done = False
    other = await FrameworkStore.open(bus.js)
    await other._write_task("job1", stale, 1, {})
    value = await kv.get(task_key("job1", 0, 0))
    assert TaskRecord.model_validate_json(value.value or b"{}").task.done
    assert (await fresh_read(bus)).attempts[0].tasks[0].done


async def test_a_value_of_the_former_layout_is_read_and_rewritten_in_the_new(bus: Bus) -> None:
    orch = await started_job(bus, 5)
    mine = await orch.store.get("job1")
    assert mine is not None
    framework = mine.value
    kv = orch.store._kv
    # The former layout: the whole framework, tasks inline, in the job's one value.
    revision = await kv.put("job1", framework.model_dump_json().encode())
    store = await FrameworkStore.open(bus.js)
    read = await store.get("job1")
    assert read is not None
    assert read.value.model_dump() == framework.model_dump()
    await store.save("job1", read.value, revision)
    assert (await fresh_read(bus)).model_dump() == framework.model_dump()
    assert (await kv.get(task_key("job1", 0, 4))).value


async def test_every_job_is_listed_for_recovery_even_when_the_buckets_listing_comes_back_short(
    bus: Bus, monkeypatch: pytest.MonkeyPatch
) -> None:
    for job_id in ("j1", "j2", "j3"):
        await started_job(bus, 2, job_id)
    store = await FrameworkStore.open(bus.js)
    read = store._read

    async def short(pattern: str) -> list[tuple[str, bytes, int]]:
        found = await read(pattern)
        return found[:1] if pattern == "*" else found  # as a watch on a recovering bus can answer

    monkeypatch.setattr(store, "_read", short)
    assert sorted(await store.job_ids()) == ["j1", "j2", "j3"]
    await store._kv.purge("j3")  # a key whose value is gone: listed maybe, and read as absent
    assert set(await store.job_ids()) >= {"j1", "j2"}
    fresh = await FrameworkStore.open(bus.js)
    assert await fresh.get("j3") is None
    assert await fresh.settled("j3")
