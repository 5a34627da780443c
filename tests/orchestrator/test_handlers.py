"""The handler's write-then-act order against a real KV bucket: crashes and races lose nothing."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any, Literal

import pytest

from libs.backbone.connecting import Bus, patiently
from libs.backbone.topology import ensure_topology
from libs.protocol.events import EventBase, JobState, JobStopRequested
from services.orchestrator.adapters.executing import AlreadyRunningError, TaskExit
from services.orchestrator.adapters.local import LocalExecutor
from services.orchestrator.adapters.state import FrameworkStore
from services.orchestrator.core.effects import Probe
from services.orchestrator.core.frameworks import TaskKey
from services.orchestrator.handlers import Orchestrator
from tests.orchestrator.executors import InstantExecutor
from tests.orchestrator.jobs import job_config
from tests.orchestrator.sim import JOB, completed, scheduled, submitted
from tests.orchestrator.sim import config as sim_config


class Crash(BaseException):
    """Stands for the process dying: nothing in the handler may catch it."""


async def no_secrets(_job_id: str) -> dict[str, Any] | None:
    return None


async def ignore_exit(_exit: TaskExit) -> None:
    return None


async def ignore_event(_event: EventBase) -> None:
    return None


async def orchestrator(bus: Bus, tmp_path: Path, publish: Any) -> Orchestrator:
    await ensure_topology(bus.js)
    store = await FrameworkStore.open(bus.js)
    return Orchestrator(store, LocalExecutor(tmp_path, ignore_exit, no_secrets), publish)


async def test_an_event_decided_before_a_crash_is_published_after_the_restart(
    bus: Bus, tmp_path: Path
) -> None:
    async def dying(_event: EventBase) -> None:
        raise Crash

    first = await orchestrator(bus, tmp_path, dying)
    await first.apply("job1", submitted(job_config({"worker": (1, "echo ok")})))
    with pytest.raises(Crash):
        await first.apply("job1", JobStopRequested(job_id="job1", by="alice"))

    published: list[EventBase] = []

    async def working(event: EventBase) -> None:
        published.append(event)

    second = await orchestrator(bus, tmp_path, working)
    await second.recover()
    assert [(getattr(e, "type", None), getattr(e, "state", None)) for e in published] == [
        ("job.completed", "STOPPED")
    ]
    stored = await second.store.get("job1")
    assert stored is not None
    assert stored.value.outbox == []
    # The redelivered stop decides nothing new.
    await second.apply("job1", JobStopRequested(job_id="job1", by="alice"))
    assert len(published) == 1


async def test_a_bus_that_does_not_answer_is_waited_for_and_a_bug_reaches_the_consumer(
    bus: Bus, tmp_path: Path
) -> None:
    """The outbox retries what the bus raises (the event goes out once it answers); anything
    else is a bug no retry cures: it leaves the handler, whose consumer naks the message with
    backoff, and the job's lock with it. The event stays in the outbox for the next try."""
    timeouts = [TimeoutError("the bus did not answer")]
    bug = [True]
    published: list[EventBase] = []

    async def flaky(event: EventBase) -> None:
        if timeouts:
            raise timeouts.pop()
        if bug[0]:
            raise TypeError("a bug")
        published.append(event)

    orch = await orchestrator(bus, tmp_path, flaky)
    await orch.apply("job1", submitted(job_config({"worker": (1, "echo ok")})))
    with pytest.raises(TypeError, match="a bug"):
        await orch.apply("job1", JobStopRequested(job_id="job1", by="alice"))
    assert timeouts == []
    assert published == []
    bug[0] = False
    await orch.recover()
    assert [(getattr(e, "type", None), getattr(e, "state", None)) for e in published] == [
        ("job.completed", "STOPPED")
    ]


async def test_a_lost_revision_race_decides_again_on_the_fresh_state(bus: Bus, tmp_path: Path) -> None:
    published: list[EventBase] = []

    async def working(event: EventBase) -> None:
        published.append(event)

    orch = await orchestrator(bus, tmp_path, working)
    await orch.apply("job1", submitted(job_config({"worker": (1, "echo ok")})))
    # Another writer (a second store: another process) moves the key on; the orchestrator's
    # store still remembers the version it wrote itself.
    other = await FrameworkStore.open(bus.js)
    theirs = await other.get("job1")
    assert theirs is not None
    await other.save("job1", theirs.value.model_copy(update={"name": "renamed"}), theirs.revision)
    remembered = await orch.store.get("job1")
    assert remembered is not None
    assert remembered.value.name != "renamed"

    await orch.apply("job1", JobStopRequested(job_id="job1", by="alice"))
    final = await (await FrameworkStore.open(bus.js)).get("job1")  # what KV holds
    assert final is not None
    assert final.value.name == "renamed"  # the other writer's change survived
    assert final.value.outcome == "STOPPED"
    assert [getattr(e, "type", None) for e in published] == ["job.completed"]


async def test_decisions_start_from_what_the_store_wrote_without_reading_kv(
    bus: Bus, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    orch = await orchestrator(bus, tmp_path, ignore_event)
    reads: list[str] = []
    kv_get = orch.store._store.get

    async def counted(key: str) -> Any:
        reads.append(key)
        return await kv_get(key)

    monkeypatch.setattr(orch.store._store, "get", counted)
    await orch.apply("job1", submitted(job_config({"worker": (1, "echo ok")})))
    await orch.apply("job1", JobStopRequested(job_id="job1", by="alice"))
    assert reads == []
    stored = await (await FrameworkStore.open(bus.js)).get("job1")
    assert stored is not None
    assert stored.value.outcome == "STOPPED"


async def test_a_redelivered_submission_leaves_the_stored_state_alone(bus: Bus, tmp_path: Path) -> None:
    first = await orchestrator(bus, tmp_path, ignore_event)
    submission = submitted(job_config({"worker": (1, "echo ok")}))
    await first.apply("job1", submission)
    await first.apply("job1", JobStopRequested(job_id="job1", by="alice"))
    before = await first.store.get("job1")
    assert before is not None
    # A restarted orchestrator (nothing in memory) is given the submission again.
    second = await orchestrator(bus, tmp_path, ignore_event)
    await second.apply("job1", submission)
    after = await (await FrameworkStore.open(bus.js)).get("job1")
    assert after is not None
    assert (after.revision, after.value.outcome) == (before.revision, "STOPPED")


async def test_the_store_remembers_a_bounded_number_of_jobs(
    bus: Bus, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    await ensure_topology(bus.js)
    store = FrameworkStore((await FrameworkStore.open(bus.js))._store, remember=2)
    orch = Orchestrator(store, LocalExecutor(tmp_path, ignore_exit, no_secrets), ignore_event)
    for job in ("a", "b", "c"):
        await orch.apply(job, submitted(job_config({"worker": (1, "echo ok")}), job_id=job))
    reads: list[str] = []
    kv_get = store._store.get

    async def counted(key: str) -> Any:
        reads.append(key)
        return await kv_get(key)

    monkeypatch.setattr(store._store, "get", counted)
    for job in ("c", "a"):
        await orch.apply(job, JobStopRequested(job_id=job, by="alice"))
    assert reads == ["a"]  # the oldest was forgotten and read again; the newest was in memory
    for job in ("a", "c"):
        stored = await store.get(job)
        assert stored is not None
        assert stored.value.outcome == "STOPPED"


async def test_concurrent_stops_of_one_job_publish_one_completion(bus: Bus, tmp_path: Path) -> None:
    published: list[EventBase] = []

    async def slow(event: EventBase) -> None:
        await asyncio.sleep(0)  # yield inside the critical section
        published.append(event)

    orch = await orchestrator(bus, tmp_path, slow)
    await orch.apply("job1", submitted(job_config({"worker": (1, "echo ok")})))
    stops = [JobStopRequested(job_id="job1", by=f"user{i}") for i in range(5)]
    await asyncio.gather(*(orch.apply("job1", stop) for stop in stops))
    assert [getattr(e, "type", None) for e in published] == ["job.completed"]
    assert orch._locks == {}


class CrashingExecutor(LocalExecutor):
    """Dies inside `start`: before the spawn, or after it but before the spawn is recorded."""

    def __init__(self, *args: Any, spawn_first: bool, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.spawn_first = spawn_first

    async def start(self, framework: Any, key: Any) -> tuple[int, Path]:
        if self.spawn_first:
            await super().start(framework, key)
        raise Crash


@pytest.mark.parametrize("spawn_first", [False, True], ids=["before-spawn", "after-spawn-before-record"])
async def test_a_crash_inside_a_launch_never_runs_the_task_twice(
    bus: Bus, tmp_path: Path, spawn_first: bool
) -> None:
    await ensure_topology(bus.js)
    store = await FrameworkStore.open(bus.js)
    exits: asyncio.Queue[TaskExit] = asyncio.Queue()
    published: list[EventBase] = []

    async def working(event: EventBase) -> None:
        published.append(event)

    config = job_config({"worker": (1, "sleep 1")})
    first = Orchestrator(
        store, CrashingExecutor(tmp_path, exits.put, no_secrets, spawn_first=spawn_first), working
    )
    await first.apply("job1", submitted(config))
    with pytest.raises(Crash):
        await first.apply("job1", scheduled(config))
    await first.executor.close()

    executor = LocalExecutor(tmp_path, exits.put, no_secrets, poll_seconds=0.05)
    second = Orchestrator(store, executor, working)
    await second.recover()
    done = await asyncio.wait_for(exits.get(), 60)
    assert (done.key, done.exit_code) == ((0, "worker", 0, 0), 0)
    starts = [e for e in published if getattr(e, "type", None) == "task.started"]
    assert len(starts) == 1
    runs = (tmp_path / "jobs/job1/attempt-0/worker-0/try-0/logs/runtime.pai.log").read_text()
    assert runs.count("user command starts") == 1
    await executor.close()


class BrokenExecutor(LocalExecutor):
    async def start(self, framework: Any, key: Any) -> tuple[int, Path]:
        raise OSError("no space left on device")


async def test_a_task_that_cannot_start_completes_with_a_platform_failure(bus: Bus, tmp_path: Path) -> None:
    await ensure_topology(bus.js)
    published: list[EventBase] = []

    async def working(event: EventBase) -> None:
        published.append(event)

    orch = Orchestrator(
        await FrameworkStore.open(bus.js), BrokenExecutor(tmp_path, ignore_exit, no_secrets), working
    )
    config = job_config({"worker": (1, "echo ok")})
    await orch.apply("job1", submitted(config))
    await orch.apply("job1", scheduled(config))
    [completed] = [e for e in published if getattr(e, "type", None) == "task.completed"]
    assert getattr(completed, "exit_code", None) == 255
    assert "no space left on device" in getattr(completed, "diagnostics", "")
    assert getattr(completed, "failure", None) is not None


class CountingStore(FrameworkStore):
    """Counts writes; `crash_on_launch_record` dies on the write that records spawned tasks' pids."""

    def __init__(self, inner: FrameworkStore, *, crash_on_launch_record: bool = False) -> None:
        super().__init__(inner._store)
        self.writes = 0
        self.crash = crash_on_launch_record

    async def save(self, job_id: str, framework: Any, revision: int | None, **hints: Any) -> int:
        recorded = [t for a in framework.attempts for t in a.tasks if t.current and t.current.pid]
        if self.crash and recorded:
            raise Crash
        self.writes += 1
        return await super().save(job_id, framework, revision, **hints)


async def test_the_launches_of_a_large_job_are_recorded_in_one_write(bus: Bus, tmp_path: Path) -> None:
    await ensure_topology(bus.js)
    store = CountingStore(await FrameworkStore.open(bus.js))
    published: list[EventBase] = []
    in_flight = [0, 0]  # now, most

    async def working(event: EventBase) -> None:
        in_flight[0] += 1
        in_flight[1] = max(in_flight)
        await asyncio.sleep(0)  # the bus's round trip
        in_flight[0] -= 1
        published.append(event)

    class InstantExecutor(LocalExecutor):
        spawned = 0

        async def start(self, framework: Any, key: Any) -> tuple[int, Path]:
            InstantExecutor.spawned += 1
            return 100_000 + InstantExecutor.spawned, tmp_path

    orch = Orchestrator(store, InstantExecutor(tmp_path, ignore_exit, no_secrets), working)
    config = job_config({"worker": (200, "echo ok")})
    await orch.apply("job1", submitted(config))
    writes_before = store.writes
    await orch.apply("job1", scheduled(config))
    # The launch intent, the 200 pids with their task.started events, and the cleared outbox.
    assert store.writes - writes_before == 3
    assert InstantExecutor.spawned == 200
    stored = await (await FrameworkStore.open(bus.js)).get("job1")
    assert stored is not None
    assert sorted(t.current.pid or 0 for t in stored.value.attempts[0].tasks if t.current) == list(
        range(100_001, 100_201)
    )
    assert len([e for e in published if getattr(e, "type", None) == "task.started"]) == 200
    assert in_flight[1] == 200  # the task.started events went out together, not one by one


async def test_a_crash_before_the_launches_are_recorded_adopts_every_spawned_task(
    bus: Bus, tmp_path: Path
) -> None:
    await ensure_topology(bus.js)
    exits: asyncio.Queue[TaskExit] = asyncio.Queue()
    published: list[EventBase] = []

    async def working(event: EventBase) -> None:
        published.append(event)

    config = job_config({"worker": (3, "sleep 1")})
    crashing = CountingStore(await FrameworkStore.open(bus.js), crash_on_launch_record=True)
    first_executor = LocalExecutor(tmp_path, exits.put, no_secrets, poll_seconds=0.05)
    first = Orchestrator(crashing, first_executor, working)
    await first.apply("job1", submitted(config))
    with pytest.raises(Crash):
        await first.apply("job1", scheduled(config))  # all three spawned, none recorded
    await first_executor.close()

    executor = LocalExecutor(tmp_path, exits.put, no_secrets, poll_seconds=0.05)
    second = Orchestrator(await FrameworkStore.open(bus.js), executor, working)
    await second.recover()
    ended = sorted([(await asyncio.wait_for(exits.get(), 60)).key for _ in range(3)])
    assert ended == [(0, "worker", i, 0) for i in range(3)]
    starts = sorted(getattr(e, "index", -1) for e in published if getattr(e, "type", None) == "task.started")
    assert starts == [0, 1, 2]
    for i in range(3):
        log = (tmp_path / f"jobs/job1/attempt-0/worker-{i}/try-0/logs/runtime.pai.log").read_text()
        assert log.count("user command starts") == 1
    await executor.close()


async def test_a_finished_job_leaves_the_stores_memory(bus: Bus, tmp_path: Path) -> None:
    orch = await orchestrator(bus, tmp_path, ignore_event)
    await orch.apply("job1", submitted(job_config({"worker": (1, "echo ok")})))
    assert "job1" in orch.store._known
    await orch.apply("job1", JobStopRequested(job_id="job1", by="alice"))
    assert "job1" not in orch.store._known
    stored = await orch.store.get("job1")  # read from KV again when asked
    assert stored is not None
    assert stored.value.outcome == "STOPPED"


async def test_one_jobs_messages_handed_in_together_are_decided_together_and_each_once(bus: Bus) -> None:
    tasks = 200
    cfg = sim_config({"worker": {"instances": tasks}})
    await ensure_topology(bus.js)
    store = await FrameworkStore.open(bus.js)
    published: list[EventBase] = []

    async def publish(event: EventBase) -> None:
        published.append(event)

    executor = InstantExecutor()
    orch = Orchestrator(store, executor, publish)  # type: ignore[arg-type]
    await orch.apply(JOB, submitted(cfg))
    await orch.apply(JOB, scheduled(cfg))
    assert len(executor.started) == tasks
    writes = [0]
    save = store.save

    async def counted(*args: Any, **kwargs: Any) -> Any:
        writes[0] += 1
        return await save(*args, **kwargs)

    store.save = counted  # type: ignore[method-assign]
    staged: list[int] = []
    stage = store._stage

    async def staging(job_id: str, token: str, records: Any, outbox: Any) -> Any:
        staged.append(len(records))
        return await stage(job_id, token, records, outbox)

    store._stage = staging  # type: ignore[method-assign]
    # As the consume loop hands them over: in stream order, the next before the previous is done.
    exits = [completed(TaskKey(0, "worker", i, 0), 0) for i in range(tasks)]
    await asyncio.gather(*(orch.apply(JOB, e) for e in [*exits, exits[7]]))  # one redelivered
    assert writes[0] <= tasks // 10, writes  # a few groups, not one write per completion
    # What the job's value carries does not grow group after group (tasks go to their own values),
    # so no group needs its tasks staged in pieces.
    assert staged == []
    stored = await store.get(JOB)
    assert stored is not None
    assert stored.value.outcome is not None
    done = [e for e in published if getattr(e, "type", None) == "job.completed"]
    assert [getattr(e, "state", None) for e in done] == [JobState.SUCCEEDED]
    assert len(executor.started) == tasks  # no task started twice
    assert orch._batches == {}


class FailingOnceStore(FrameworkStore):
    """The write recording the launches fails once, with an error the handler does not expect
    (a bus timeout, say), and only after the launched tasks have ended."""

    def __init__(self, inner: FrameworkStore, ended: Any) -> None:
        super().__init__(inner._store)
        self.ended = ended
        self.failed = False

    async def save(self, job_id: str, framework: Any, revision: int | None, **hints: Any) -> int:
        recorded = [t for a in framework.attempts for t in a.tasks if t.current and t.current.pid]
        if recorded and not self.failed:
            self.failed = True
            await self.ended()
            raise TimeoutError("the bus did not answer")
        return await super().save(job_id, framework, revision, **hints)


async def test_a_recovery_carried_out_again_never_runs_a_finished_task_again(
    bus: Bus, tmp_path: Path
) -> None:
    """After a restart, what a probe said ("never started") is out of date once the task has run:
    a failed write makes the handler decide the recovery again from the same probes, and the
    task, run and ended meanwhile, must be reported, not started a second time."""
    await ensure_topology(bus.js)
    exits: asyncio.Queue[TaskExit] = asyncio.Queue()
    published: list[EventBase] = []

    async def working(event: EventBase) -> None:
        published.append(event)

    config = job_config({"worker": (2, "exit 3")})
    first = Orchestrator(
        await FrameworkStore.open(bus.js),
        CrashingExecutor(tmp_path, exits.put, no_secrets, spawn_first=False),
        working,
    )
    await first.apply("job1", submitted(config))
    with pytest.raises(Crash):
        await first.apply("job1", scheduled(config))  # the starts are on record, nothing ran
    await first.executor.close()

    reported: list[TaskExit] = []

    async def both_ended() -> None:
        while len(reported) < 2:
            reported.append(await asyncio.wait_for(exits.get(), 60))

    executor = LocalExecutor(tmp_path, exits.put, no_secrets, poll_seconds=0.05)
    store = FailingOnceStore(await FrameworkStore.open(bus.js), both_ended)
    second = Orchestrator(store, executor, working)
    await second.recover()  # probes: both absent; started; the record fails once they ended
    assert store.failed
    assert sorted((e.key, e.exit_code) for e in reported) == [((0, "worker", i, 0), 3) for i in range(2)]
    for i in range(2):
        log = (tmp_path / f"jobs/job1/attempt-0/worker-{i}/try-0/logs/runtime.pai.log").read_text()
        assert log.count("user command starts") == 1
    # The recovery decided again: each task's end reported again from what it left (the decider
    # takes one end per task attempt), none started again.
    again = sorted([(await asyncio.wait_for(exits.get(), 60)).key for _ in range(2)])
    assert again == [(0, "worker", i, 0) for i in range(2)]
    assert exits.empty()
    await executor.close()


class RefusingExecutor(InstantExecutor):
    """Refuses the first start of every task as started before; `found` is what a probe then
    finds: "absent" (what held the lock went away unlaunched) or "ended" (it ran meanwhile)."""

    def __init__(self, found: Literal["absent", "ended"]) -> None:
        super().__init__()
        self.found: Literal["absent", "ended"] = found
        self.refused: set[Any] = set()
        self.adopted: list[tuple[Any, int]] = []

    async def start(self, framework: Any, key: Any) -> tuple[int, Path]:
        if key not in self.refused:
            self.refused.add(key)
            raise AlreadyRunningError("its lock is held")
        return await super().start(framework, key)

    def probe(self, job_id: str, key: Any) -> Probe:
        return Probe(self.found, None, f"/tasks/{key[2]}")

    def adopt(self, job_id: str, key: Any, pid: int, directory: Path) -> None:
        self.adopted.append((key, pid))


@pytest.mark.parametrize("found", ["absent", "ended"])
async def test_a_refused_start_is_tried_again_only_if_nothing_ever_ran(
    bus: Bus, found: Literal["absent", "ended"]
) -> None:
    await ensure_topology(bus.js)
    published: list[EventBase] = []

    async def working(event: EventBase) -> None:
        published.append(event)

    executor = RefusingExecutor(found)
    orch = Orchestrator(await FrameworkStore.open(bus.js), executor, working)  # type: ignore[arg-type]
    config = job_config({"worker": (2, "echo ok")})
    await orch.apply("job1", submitted(config))
    await orch.apply("job1", scheduled(config))
    keys = [TaskKey(0, "worker", i, 0) for i in range(2)]
    starts = sorted(getattr(e, "index", -1) for e in published if getattr(e, "type", None) == "task.started")
    if found == "absent":  # started then, once each, and recorded
        assert executor.started == keys
        assert starts == [0, 1]
        assert executor.adopted == []
    else:  # never started again: watched, its end to come from what it left
        assert executor.started == []
        assert starts == []
        assert executor.adopted == [(key, 0) for key in keys]


class ProbingExecutor(InstantExecutor):
    """Every task it is asked about still runs; counts the probes and adoptions per job."""

    def __init__(self) -> None:
        super().__init__()
        self.probed: list[str] = []
        self.adopted: list[str] = []

    def probe(self, job_id: str, key: Any) -> Probe:
        self.probed.append(job_id)
        return Probe("alive", 4242, "/tasks")

    def adopt(self, job_id: str, *args: Any) -> None:
        self.adopted.append(job_id)


class BusAwayOnce:
    """The store, whose second job's read times out once (the bus electing midway)."""

    def __init__(self, store: FrameworkStore) -> None:
        self._store = store
        self._read: list[str] = []
        self.failed = False

    def __getattr__(self, name: str) -> Any:
        return getattr(self._store, name)

    async def get(self, job_id: str, **kwargs: Any) -> Any:
        if job_id not in self._read:
            self._read.append(job_id)
        if len(self._read) == 2 and not self.failed:
            self.failed = True
            raise TimeoutError("nats: timeout")
        return await self._store.get(job_id, **kwargs)


async def test_a_recovery_the_bus_interrupts_is_tried_again_and_adopts_each_task_once(
    bus: Bus, tmp_path: Path
) -> None:
    """A new leader's recovery that the bus interrupts is tried again (`patiently`, as the service
    does) and goes on where it stopped: a job reconciled before the failure is not probed or
    adopted twice, and the count covers both tries."""
    await ensure_topology(bus.js)
    store = await FrameworkStore.open(bus.js)
    config = job_config({"worker": (1, "sleep 60")})
    first = Orchestrator(store, InstantExecutor(), ignore_event)  # type: ignore[arg-type]
    for job_id in ("job1", "job2", "job3"):
        await first.apply(job_id, submitted(config, job_id=job_id))
        await first.apply(job_id, scheduled(config, job_id=job_id))

    flaky = BusAwayOnce(store)
    executor = ProbingExecutor()
    second = Orchestrator(flaky, executor, ignore_event)  # type: ignore[arg-type]
    assert await patiently(second.recover) == 3
    assert flaky.failed
    assert sorted(executor.probed) == ["job1", "job2", "job3"]
    assert sorted(executor.adopted) == ["job1", "job2", "job3"]
