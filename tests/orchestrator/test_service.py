"""The orchestrator service on a real nats-server, running real tasks through the runtime."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
from nats.js.errors import KeyNotFoundError

from libs.backbone.connecting import Bus
from libs.backbone.natsserver import EmbeddedNats
from libs.backbone.topology import FRAMEWORKS, publish_event
from libs.protocol.events import JobPreempting, JobState, JobStopRequested, JobSubmitted, NodeLost
from libs.protocol.jobs import job_json
from runtime.ports import reserved_ports
from services.orchestrator.adapters.logs import LOGS_SUBJECT
from services.orchestrator.app import OrchestratorSettings, main
from tests.orchestrator.jobs import job_config
from tests.orchestrator.service_support import publish, schedule, submit, watch_jobs
from tests.support.events import JobEvents


@pytest.fixture
async def orchestrator(nats_server: EmbeddedNats, tmp_path: Path) -> AsyncIterator[OrchestratorSettings]:
    settings = OrchestratorSettings(
        nats_url=nats_server.url, data_dir=tmp_path / "data", stop_grace_seconds=2.0, adopt_poll_seconds=0.05
    )
    stop, ready = asyncio.Event(), asyncio.Event()
    service = asyncio.create_task(main(settings, stop, ready=ready))
    await asyncio.wait_for(ready.wait(), 30)
    try:
        yield settings
    finally:
        stop.set()
        await asyncio.wait_for(service, 30)


@pytest.fixture
async def events(bus: Bus, orchestrator: OrchestratorSettings) -> JobEvents:
    return await watch_jobs(bus)


async def test_a_job_runs_to_success_with_every_lifecycle_event(bus: Bus, events: JobEvents) -> None:
    await submit(bus, "ok1", job_config({"worker": (2, "echo done")}))
    done = (await events.wait_for("job.completed", "ok1"))[0]
    assert (done.state, done.exit_code, done.attempt) == (JobState.SUCCEEDED, 0, 0)
    started = events.of("task.started", "ok1")
    completed = events.of("task.completed", "ok1")
    assert sorted((e.role, e.index) for e in started) == [("worker", 0), ("worker", 1)]
    assert all(e.pid for e in started)
    assert sorted((e.index, e.exit_code) for e in completed) == [(0, 0), (1, 0)]


async def test_master_success_stops_the_workers_and_succeeds(bus: Bus, events: JobEvents) -> None:
    config = job_config({"master": (1, "sleep 0.5"), "worker": (2, "sleep 300")})
    await submit(bus, "md1", config)
    done = (await events.wait_for("job.completed", "md1"))[0]
    assert (done.state, done.trigger_role, done.trigger_index) == (JobState.SUCCEEDED, "master", 0)
    workers = [e for e in events.of("task.completed", "md1") if e.role == "worker"]
    assert len(workers) == 2
    assert [e.exit_code for e in workers] == [-220, -220], "ended by their attempt completing"
    # The job completes only once its stopped workers are gone.
    assert events.events.index(done) > max(events.events.index(e) for e in workers)


async def test_stop_ends_a_running_job_stopped_with_exit_code_minus_210(bus: Bus, events: JobEvents) -> None:
    await submit(bus, "st1", job_config({"worker": (1, "sleep 300")}))
    await events.wait_for("task.started", "st1")
    await publish(bus, JobStopRequested(job_id="st1", by="alice"))
    await publish(bus, JobStopRequested(job_id="st1", by="alice"))
    done = (await events.wait_for("job.completed", "st1"))[0]
    assert (done.state, done.exit_code) == (JobState.STOPPED, -210)


async def test_a_failed_attempt_is_retried_then_fails_for_good(bus: Bus, events: JobEvents) -> None:
    config = job_config({"worker": (1, "exit 1")}, extra="jobRetryCount: 1")
    await submit(bus, "rt1", config)
    retry = (await events.wait_for("job.retrying", "rt1"))[0]
    assert (retry.attempt, retry.next_attempt) == (0, 1)
    assert retry.counted is (retry.kind == "user")
    await schedule(bus, "rt1", config, 1)
    done = (await events.wait_for("job.completed", "rt1"))[0]
    assert (done.state, done.attempt, done.exit_code) == (JobState.FAILED, 1, 1)
    assert done.failure is not None


async def test_preemption_stops_the_tasks_and_requeues_as_a_resource_retry(
    bus: Bus, events: JobEvents
) -> None:
    await submit(bus, "pr1", job_config({"worker": (2, "sleep 300")}))
    await events.wait_for("task.started", "pr1", count=2)
    await publish(bus, JobPreempting(job_id="pr1", by_job_id="vip", reason="a higher priority job"))
    retry = (await events.wait_for("job.retrying", "pr1"))[0]
    assert (retry.kind, retry.counted, retry.next_attempt) == ("resource", False, 1)
    assert len(events.of("task.completed", "pr1")) == 2


async def test_a_repeated_placement_starts_nothing_twice(bus: Bus, events: JobEvents) -> None:
    config = job_config({"worker": (2, "sleep 1")})
    await submit(bus, "dup1", config)
    await schedule(bus, "dup1", config, 0, event_id="another-copy")
    await events.wait_for("job.completed", "dup1")
    assert len(events.of("task.started", "dup1")) == 2


async def test_logs_are_served_by_request_reply(bus: Bus, events: JobEvents) -> None:
    await submit(bus, "lg1", job_config({"worker": (1, "echo line-one; echo line-two >&2")}))
    await events.wait_for("job.completed", "lg1")
    ask = {
        "job_id": "lg1",
        "attempt": 0,
        "role": "worker",
        "index": 0,
        "file": "stdout",
        "offset": 0,
        "limit": 4,
    }
    reply = json.loads((await bus.nc.request(LOGS_SUBJECT, json.dumps(ask).encode(), timeout=10)).data)
    assert reply == {"content": "line", "offset": 0, "nextOffset": 4, "size": len("line-one\n")}
    ask.update(file="all", limit=1000)
    reply = json.loads((await bus.nc.request(LOGS_SUBJECT, json.dumps(ask).encode(), timeout=10)).data)
    assert "line-one" in reply["content"]
    assert "line-two" in reply["content"]
    ask.update(role="ghost")
    reply = json.loads((await bus.nc.request(LOGS_SUBJECT, json.dumps(ask).encode(), timeout=10)).data)
    assert "no log for task ghost-0" in reply["error"]
    reply = json.loads((await bus.nc.request(LOGS_SUBJECT, b'{"job_id": "x"}', timeout=10)).data)
    assert "attempt" in reply["error"]


async def test_an_ended_job_leaves_no_secret_and_no_port_reserved(
    bus: Bus, events: JobEvents, orchestrator: OrchestratorSettings
) -> None:
    kv = await bus.js.key_value("PAI_SECRETS")
    await kv.put("sc1", json.dumps({"token": "abc"}).encode())
    await submit(bus, "sc1", job_config({"worker": (2, "echo '<% $secrets.token %>' | wc -c")}))
    done = (await events.wait_for("job.completed", "sc1"))[0]
    assert done.state is JobState.SUCCEEDED
    secrets_left, reserved, stdout = leftovers(Path(orchestrator.data_dir), "sc1")
    assert secrets_left == []
    assert reserved == {}
    assert stdout.strip() == "4"


def leftovers(data: Path, job_id: str) -> tuple[list[Path], dict[str, object], str]:
    """Secret files still on disk, port reservations still held, and task 0's stdout."""
    reserved: dict[str, object] = dict(reserved_ports(data / "ports"))
    stdout = (data / f"jobs/{job_id}/attempt-0/worker-0/try-0/logs/user.pai.stdout").read_text()
    return list(data.glob(f"jobs/{job_id}/**/secrets.json")), reserved, stdout


async def test_tasks_on_a_lost_node_end_as_platform_failures_and_are_retried_for_free(
    bus: Bus, events: JobEvents
) -> None:
    await submit(bus, "nl1", job_config({"worker": (1, "sleep 300")}, extra="jobRetryCount: 0"))
    await events.wait_for("task.started", "nl1")
    await publish_event(bus.js, NodeLost(node_id="local", name="local", reason="no report for 60 s"))
    [exit_] = await events.wait_for("task.completed", "nl1")
    assert exit_.exit_code == -1001
    assert exit_.failure is not None
    assert (exit_.failure.phrase, exit_.failure.type) == ("NodeLost", "transient")
    [retry] = await events.wait_for("job.retrying", "nl1")
    assert (retry.kind, retry.counted) == ("platform", False), "a lost node costs the job no retry"


async def test_a_waiting_job_has_no_framework_until_it_is_placed_or_stopped(
    bus: Bus, events: JobEvents
) -> None:
    config = job_config({"worker": (1, "echo placed")})
    for job_id in ("wait1", "wait2"):
        await publish(
            bus,
            JobSubmitted(job_id=job_id, user="alice", name=job_id, virtual_cluster="default", config=config),
        )
    # The stop of wait2 comes after both submissions on the stream: once the orchestrator has
    # answered it, it has also seen (and, for the waiting wait1, skipped) what came before.
    await publish(bus, JobStopRequested(job_id="wait2", by="alice"))
    stopped = (await events.wait_for("job.completed", "wait2"))[0]
    assert (stopped.state, stopped.exit_code) == (JobState.STOPPED, -210)
    frameworks = await bus.js.key_value(FRAMEWORKS.bucket)
    with pytest.raises(KeyNotFoundError):
        await frameworks.get("wait1")
    assert (await frameworks.get("wait2")).value

    await schedule(bus, "wait1", config, 0)  # built from its submission on the stream, then run
    done = (await events.wait_for("job.completed", "wait1"))[0]
    assert (done.state, done.exit_code) == (JobState.SUCCEEDED, 0)
    stored = json.loads((await frameworks.get("wait1")).value or b"{}")
    assert (stored["user"], stored["name"], stored["config"]) == ("alice", "wait1", job_json(config))


async def test_an_event_for_a_job_never_submitted_is_ignored(bus: Bus, events: JobEvents) -> None:
    await publish(bus, JobStopRequested(job_id="ghost1", by="alice"))
    await submit(bus, "after1", job_config({"worker": (1, "echo ok")}))
    await events.wait_for("job.completed", "after1")
    assert events.of("job.completed", "ghost1") == []
