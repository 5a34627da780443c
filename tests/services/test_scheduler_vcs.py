"""VC status, run-time reconfiguration and per-user limits of the scheduler on a real nats-server."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from libs.backbone.connecting import Bus
from libs.backbone.topology import SCHEDULER_CONFIG, ensure_topology, publish_event
from libs.protocol.events import JobCompleted, JobPending, JobState
from services.scheduler.adapters.control import RECONFIGURE_SUBJECT, VC_STATUS_SUBJECT
from tests.services.vc_support import GPU_NODES, ask, cluster_file, gpu_job, scheduler
from tests.support.events import JobEvents

VC_B_ONLY = {"virtualClusters": {"b": {"virtualCells": [{"cellType": "A100-RACK", "cellNumber": 2}]}}}


async def started(bus: Bus) -> JobEvents:
    await ensure_topology(bus.js)
    seen = JobEvents()
    await bus.js.subscribe("pai.job.>", ordered_consumer=True, cb=seen.on_msg)
    for node in GPU_NODES:
        await publish_event(bus.js, node)
    return seen


def vc(status: dict[str, Any], name: str) -> dict[str, Any]:
    return next(v for v in status["virtualClusters"] if v["name"] == name)


async def test_status_then_refused_then_forced_reconfiguration_and_a_restart_keeps_it(
    bus: Bus, nats_server: Any, tmp_path: Path
) -> None:
    seen = await started(bus)
    async with scheduler(nats_server.url, cluster_file(tmp_path)):
        await publish_event(bus.js, gpu_job("j1", "a", 4))
        await seen.wait_for("job.scheduled", "j1")
        status = await ask(bus, VC_STATUS_SUBJECT)
        a = vc(status, "a")
        assert (a["guaranteedGpus"], a["usedGpus"], a["usedCpu"], a["runningJobs"]) == (8, 4, 2, 1)
        assert sum(a["nodes"].values()) == 4
        assert a["users"] == {"alice": 4}
        assert status["skuTypes"] == {"A100": {"gpu": 1, "cpu": 8.0, "memory": 65536.0}}
        assert status["source"] == "file"

        refused = await ask(bus, RECONFIGURE_SUBJECT, {"document": VC_B_ONLY})
        assert refused["error"] == "conflict"
        assert "j1 in VC a would be left running without its VC guarantee" in refused["message"]
        assert [v["name"] for v in (await ask(bus, VC_STATUS_SUBJECT))["virtualClusters"]] == ["a", "b"]

        safe = {"userLimits": {"b": {"maxGpusPerUser": 12}}}
        applied = await ask(bus, RECONFIGURE_SUBJECT, {"document": safe})
        assert applied["applied"]
        assert applied["downgraded"] == {}
        assert applied["killed"] == {}
        assert vc(await ask(bus, VC_STATUS_SUBJECT), "b")["userLimits"] == {"maxGpusPerUser": 12}

        forced = await ask(bus, RECONFIGURE_SUBJECT, {"document": VC_B_ONLY, "force": True})
        assert forced["applied"]
        assert list(forced["downgraded"]) == ["j1"]
        assert forced["jobVirtualClusters"] == {"j1": "a"}
        status = await ask(bus, VC_STATUS_SUBJECT)
        assert [v["name"] for v in status["virtualClusters"]] == ["b"]
        assert status["source"] == "kv"
        # The new cells are in force at once: VC b owns both racks, 12 GPUs are more than it had.
        await publish_event(bus.js, gpu_job("j2", "b", 4, user="bob", instances=3))
        await seen.wait_for("job.scheduled", "j2")

    stored = json.loads((await (await bus.js.key_value(SCHEDULER_CONFIG.bucket)).get("hived")).value or b"")
    assert list(stored["hived"]["virtualClusters"]) == ["b"]
    # Restarted with the same file, the scheduler starts from the KV config instead.
    async with scheduler(nats_server.url, cluster_file(tmp_path)):
        status = await ask(bus, VC_STATUS_SUBJECT)
        assert status["source"] == "kv"
        assert [v["name"] for v in status["virtualClusters"]] == ["b"]
        assert vc(status, "b")["usedGpus"] == 12  # j2 re-added from the stream; j1 runs outside its guarantee
        assert vc(status, "b")["userLimits"] == {"maxGpusPerUser": 12}


async def test_a_job_over_its_users_limit_waits_until_the_limit_is_raised(
    bus: Bus, nats_server: Any, tmp_path: Path
) -> None:
    seen = await started(bus)
    async with scheduler(nats_server.url, cluster_file(tmp_path)):
        limits = {"userLimits": {"a": {"maxGpusPerUser": 4}}}
        assert (await ask(bus, RECONFIGURE_SUBJECT, {"document": limits}))["applied"]
        await publish_event(bus.js, gpu_job("j1", "a", 4))
        await seen.wait_for("job.scheduled", "j1")
        await publish_event(bus.js, gpu_job("j2", "a", 2))
        pending = (await seen.wait_for("job.pending", "j2"))[-1]
        assert isinstance(pending, JobPending)
        assert (
            "user alice may use at most 4 GPUs at once in VC a (userLimits.a.maxGpusPerUser)"
            in pending.reason
        )
        # Another user of the same VC is not held back by alice's use.
        await publish_event(bus.js, gpu_job("k1", "a", 2, user="bob"))
        await seen.wait_for("job.scheduled", "k1")
        await publish_event(
            bus.js, JobCompleted(job_id="j1", attempt=0, state=JobState.SUCCEEDED, exit_code=0)
        )
        await seen.wait_for("job.scheduled", "j2")


async def test_a_bad_document_is_refused_naming_the_field(bus: Bus, nats_server: Any, tmp_path: Path) -> None:
    await started(bus)
    async with scheduler(nats_server.url, cluster_file(tmp_path)):
        bad = {"virtualClusters": {"a": {"virtualCells": [{"cellType": "A100-RACK.NOPE", "cellNumber": 1}]}}}
        answer = await ask(bus, RECONFIGURE_SUBJECT, {"document": bad})
        assert answer["error"] == "invalid"
        assert "NOPE" in answer["message"]
        status = await ask(bus, VC_STATUS_SUBJECT)
        assert status["source"] == "file"
        assert [v["name"] for v in status["virtualClusters"]] == ["a", "b"]
