"""What the orchestrator decides or needs while nats-server is down is done once it is back.

The interleaving the chaos run found (docs/architecture.md, "Crash and restart"): the last task
of a job ends while nats-server is down. The orchestrator decides the job's completion and
writes it to KV with the job.completed event in its outbox; nats-py keeps the request in its
buffer, the request times out, the server comes back, and the buffered write is stored. The
consumer redelivers the task's completion, the stored state has seen it already, and before the
fix nothing published job.completed: the read model kept the job RUNNING for good (only a later
restart of the orchestrator, flushing every outbox, would have published it). A placement met
the same fate: its tasks were never started.

Here the kill and the restart happen at exactly that point, on a real nats-server. The chaos
run's failed jobs had another cause, also here: a task started while the bus was down could not
read its secrets and failed the job.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import nats.errors
import structlog
from cryptography.fernet import Fernet

from libs.backbone.connecting import Bus
from libs.backbone.natsserver import EmbeddedNats
from libs.backbone.provisioning import ensure_kv
from libs.backbone.sealing import SecretsCipher
from libs.backbone.topology import SECRETS, ensure_topology
from libs.protocol.events import EventBase, JobScheduled, TaskCompleted
from services.orchestrator.adapters.executing import TaskExit
from services.orchestrator.adapters.local import LocalExecutor
from services.orchestrator.adapters.state import FrameworkStore, SecretsReader
from services.orchestrator.core.frameworks import Framework, TaskKey
from services.orchestrator.handlers import Orchestrator
from tests.orchestrator.jobs import job_config
from tests.orchestrator.sim import completed, scheduled, submitted

KEY: TaskKey = TaskKey(0, "worker", 0, 0)
# Short, so a request sent while the server is down times out at once (services use 5 s).
REQUEST_TIMEOUT = 0.5


async def no_secrets(_job_id: str) -> dict[str, Any] | None:
    return None


async def ignore_exit(_exit: TaskExit) -> None:
    return None


class NoProcessExecutor(LocalExecutor):
    """Starts nothing: a launch is recorded with a made-up pid, and its exit is told by the test."""

    def __init__(self, data_dir: Path) -> None:
        super().__init__(data_dir, ignore_exit, no_secrets)
        self.started: list[TaskKey] = []

    async def start(self, framework: Framework, key: TaskKey) -> tuple[int, Path]:
        self.started.append(key)
        directory = self.task_dir(framework.job_id, key)
        directory.mkdir(parents=True, exist_ok=True)
        return 4242, directory


async def until(condition: Callable[[], bool], what: str, within: float = 10.0) -> None:
    deadline = asyncio.get_running_loop().time() + within
    while not condition():
        if asyncio.get_running_loop().time() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        await asyncio.sleep(0.02)


async def deliver(orch: Orchestrator, event: JobScheduled | TaskCompleted) -> None:
    """As the durable consumer does: a handling that fails is redelivered until one succeeds."""
    for _ in range(50):
        try:
            await orch.apply(event.job_id, event)
            return
        except nats.errors.Error:
            await asyncio.sleep(0.1)
    raise AssertionError("the handler never succeeded")


@contextlib.contextmanager
def logged(line: str) -> Iterator[asyncio.Event]:
    """An event set once a service writes the log line ``line``: how a test waits for what the
    code says it did (a request gone unanswered) rather than for a time that should suffice."""
    said = asyncio.Event()

    def notice(_logger: Any, _method: str, entry: Any) -> Any:
        if entry.get("event") == line:
            said.set()
        return entry

    with structlog.testing.capture_logs(processors=[notice]):
        yield said


async def handled_across_an_outage(
    nats_server: EmbeddedNats, bus: Bus, orch: Orchestrator, event: JobScheduled | TaskCompleted
) -> None:
    """`event` is handled while the bus is down; the bus comes back while the write is unanswered."""
    nats_server.kill_sync()
    await until(lambda: not bus.nc.is_connected, "the client to see the server gone")
    with logged("state write unanswered; reading it back") as unanswered:
        handling = asyncio.create_task(deliver(orch, event))
        # The state write is kept in the client's buffer and, unanswered, times out.
        await asyncio.wait_for(unanswered.wait(), 30)
    await nats_server.restart()  # reconnected, the client sends the buffered write: it is stored
    await asyncio.wait_for(handling, 30)


def kinds(events: list[EventBase]) -> list[str | None]:
    return [getattr(event, "type", None) for event in events]


async def setup(bus: Bus, tmp_path: Path) -> tuple[Orchestrator, NoProcessExecutor, list[EventBase]]:
    await ensure_topology(bus.js)
    store = await FrameworkStore.open(bus.nc.jetstream(timeout=REQUEST_TIMEOUT))
    published: list[EventBase] = []

    async def publish(event: EventBase) -> None:
        published.append(event)

    executor = NoProcessExecutor(tmp_path)
    return Orchestrator(store, executor, publish), executor, published


async def stored(bus: Bus) -> Framework:
    current = await (await FrameworkStore.open(bus.js)).get("job1")
    assert current is not None
    return current.value


CONFIG = job_config({"worker": (1, "echo ok")})


async def test_a_completion_decided_while_the_bus_was_down_is_published(
    nats_server: EmbeddedNats, bus: Bus, tmp_path: Path
) -> None:
    orch, _executor, published = await setup(bus, tmp_path)
    await orch.apply("job1", submitted(CONFIG))
    await orch.apply("job1", scheduled(CONFIG))
    assert kinds(published) == ["task.started"]

    await handled_across_an_outage(nats_server, bus, orch, completed(KEY, 0))

    # What the unanswered write decided is what KV holds, and it was carried out.
    assert kinds(published) == ["task.started", "job.completed"]
    framework = await stored(bus)
    assert (framework.outcome, framework.outbox) == ("SUCCEEDED", [])
    # A further redelivery decides nothing new and publishes nothing again.
    await orch.apply("job1", completed(KEY, 0))
    assert kinds(published) == ["task.started", "job.completed"]


async def test_a_placement_decided_while_the_bus_was_down_starts_its_tasks(
    nats_server: EmbeddedNats, bus: Bus, tmp_path: Path
) -> None:
    orch, executor, published = await setup(bus, tmp_path)
    await orch.apply("job1", submitted(CONFIG))

    await handled_across_an_outage(nats_server, bus, orch, scheduled(CONFIG))

    assert executor.started == [KEY]
    assert kinds(published) == ["task.started"]
    framework = await stored(bus)
    assert framework.attempts[0].tasks[0].current.pid == 4242
    await orch.apply("job1", scheduled(CONFIG))
    assert executor.started == [KEY]


async def test_a_task_started_while_the_bus_is_down_waits_for_its_secrets(
    nats_server: EmbeddedNats, bus: Bus, tmp_path: Path
) -> None:
    await ensure_kv(bus.js, SECRETS)
    cipher = SecretsCipher(Fernet.generate_key())
    await (await bus.js.key_value(SECRETS.bucket)).put("job1", cipher.seal({"token": "s3cret"}))
    reader = SecretsReader(bus.nc.jetstream(timeout=REQUEST_TIMEOUT), cipher)

    nats_server.kill_sync()
    await until(lambda: not bus.nc.is_connected, "the client to see the server gone")
    with logged("job secrets unreadable while the bus is away; retrying") as unanswered:
        reading = asyncio.create_task(reader("job1"))
        await asyncio.wait_for(unanswered.wait(), 30)  # a first read has timed out
    assert not reading.done()
    await nats_server.restart()
    assert await asyncio.wait_for(reading, 30) == {"token": "s3cret"}
