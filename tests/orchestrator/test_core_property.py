"""Property: whatever the order of events, duplicates and crash points, no task runs twice.

Hypothesis drives the pure core through the simulated world of `sim.py`: tasks exit with random
codes and verdicts, events are delivered out of order or twice, stops and preemptions arrive at
any moment, and the orchestrator may crash in the middle of carrying out a decision (after the
snapshot is stored, before all its effects happen, even between a process spawn and its record)
and then restart and recover. The world asserts that no task attempt is ever started twice and,
after each step, that at most one process per (role, index) is alive. In the end, once every
process is let to finish, the job completes exactly once.
"""

from __future__ import annotations

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from libs.protocol.events import JobPreempting, JobStopRequested
from services.orchestrator.core.effects import Input, StartTask
from services.orchestrator.core.states import AttemptState
from tests.orchestrator.sim import JOB, World, config, decide_untouched, scheduled, submitted, verdict

CONFIGS = [
    config(
        {
            "master": {"instances": 1, "completion": {"minSucceededInstances": 1}},
            "worker": {"instances": 2, "completion": {"minFailedInstances": -1}},
        },
        jobRetryCount=1,
    ),
    config({"worker": {"instances": 3, "completion": {"minSucceededInstances": 1}}}, jobRetryCount=2),
    config(
        {"worker": {"instances": 2, "taskRetryCount": 1}}, jobRetryCount=1, extras={"gangAllocation": False}
    ),
]
VERDICTS = ["transient", "permanent", "unknown"]


def crash_while_handling(world: World, message: Input, done: int, half_spawn: bool) -> None:
    """Store the decision, carry out only `done` effects (maybe half of the next), crash, restart."""
    decision = decide_untouched(world.framework, message, world.ctx())
    world.framework = decision.framework
    for position, effect in enumerate(decision.effects):
        if position == done:
            if half_spawn and isinstance(effect, StartTask):
                # The process exists but the orchestrator died before recording it.
                assert effect.key not in world.ever_started
                world.ever_started.append(effect.key)
                world.next_pid += 1
                world.running[effect.key] = world.next_pid
            break
        world.apply([effect])
    world.restart()
    world.feed(message)  # the unacknowledged message comes again


def check_one_process_per_task(world: World) -> None:
    slots = [(key[1], key[2]) for key in world.running]
    assert len(slots) == len(set(slots)), world.running


def schedule_if_waiting(world: World, cfg: dict[str, object]) -> Input | None:
    fw = world.framework
    if fw is None or fw.current is None or fw.outcome is not None or fw.stop_requested:
        return None
    if fw.current.state is AttemptState.CREATION_PENDING:
        return scheduled(cfg, fw.current.attempt)
    return None


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(cfg_index=st.integers(0, len(CONFIGS) - 1), data=st.data())
def test_no_task_ever_runs_twice_and_the_job_completes_once(cfg_index: int, data: st.DataObject) -> None:
    cfg = CONFIGS[cfg_index]
    world = World()
    world.feed(submitted(cfg))
    delivered: list[Input] = []
    for _ in range(data.draw(st.integers(0, 40), label="steps")):
        options = ["schedule", "stop", "preempt", "crash"]
        if world.running:
            options.append("exit")
        if world.bus:
            options.append("deliver")
        if delivered:
            options.append("redeliver")
        action = data.draw(st.sampled_from(options), label="action")
        message: Input | None = None
        if action == "exit":
            key = data.draw(st.sampled_from(sorted(world.running)), label="task")
            code = data.draw(st.sampled_from([0, 1, 251]), label="code")
            world.exit(key, code, None if code == 0 else verdict(data.draw(st.sampled_from(VERDICTS)), code))
        elif action == "deliver":
            message = world.bus.pop(data.draw(st.integers(0, len(world.bus) - 1), label="which"))
        elif action == "redeliver":
            message = data.draw(st.sampled_from(delivered), label="again")
        elif action == "schedule":
            message = schedule_if_waiting(world, cfg)
        elif action == "stop":
            message = JobStopRequested(event_id="stop", job_id=JOB, by="alice")
        elif action == "preempt":
            message = JobPreempting(event_id=f"preempt-{world.tick}", job_id=JOB, by_job_id="b", reason="r")
        elif action == "crash":
            candidate = world.bus.pop(0) if world.bus else schedule_if_waiting(world, cfg)
            if candidate is not None:
                done = data.draw(st.integers(0, 4), label="effects done")
                crash_while_handling(world, candidate, done, data.draw(st.booleans(), label="half spawn"))
                delivered.append(candidate)
        if message is not None:
            world.feed(message)
            delivered.append(message)
        check_one_process_per_task(world)

    # Let everything finish: deliver, schedule, and let every process succeed.
    for _ in range(200):
        fw = world.framework
        assert fw is not None
        if fw.outcome is not None and not world.bus and not world.running:
            break
        if world.bus:
            world.feed(world.bus.pop(0))
        elif world.running:
            world.exit(sorted(world.running)[0], 0)
        elif (message := schedule_if_waiting(world, cfg)) is not None:
            world.feed(message)
        check_one_process_per_task(world)
    fw = world.framework
    assert fw is not None
    assert fw.outcome is not None, fw.model_dump()
    assert world.running == {}
    completions = {e.event_id for e in world.published if getattr(e, "type", "") == "job.completed"}
    assert len(completions) == 1
