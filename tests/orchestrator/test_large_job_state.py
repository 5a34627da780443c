"""A large job's state fits the bus: its values (the job's, its tasks', staged pieces) stay small."""

from __future__ import annotations

from libs.backbone.connecting import Bus
from libs.backbone.topology import ensure_topology
from services.orchestrator.adapters.state import FrameworkStore
from services.orchestrator.core.effects import TaskLaunched
from services.orchestrator.core.frameworks import TaskKey
from tests.orchestrator.sim import JOB, World, config, scheduled, submitted

TASKS = 4_000


async def test_the_state_of_a_four_thousand_task_job_is_stored_and_read_back(bus: Bus) -> None:
    cfg = config({"worker": {"instances": TASKS}})
    world = World()
    world.feed(submitted(cfg))
    world.feed(scheduled(cfg), apply_effects=False)
    world.feed(TaskLaunched(JOB, TaskKey(0, "worker", TASKS - 1, 0), 4242, "/t"), apply_effects=False)
    framework = world.framework
    assert framework is not None
    size = len(framework.model_dump_json())
    assert size > 1024 * 1024, "the case must exceed NATS' default 1 MB message limit"

    await ensure_topology(bus.js)
    store = await FrameworkStore.open(bus.js)
    revision = await store.save(framework.job_id, framework, None)
    own = await store._kv.get(framework.job_id)
    assert len(own.value or b"") < 64 * 1024, "the job's own value does not hold its tasks"
    stored = await (await FrameworkStore.open(bus.js)).get(framework.job_id)  # read from KV
    assert stored is not None
    assert stored.revision == revision
    assert len(stored.value.attempts[0].tasks) == TASKS
    assert stored.value.attempts[0].tasks[-1].current.pid == 4242
