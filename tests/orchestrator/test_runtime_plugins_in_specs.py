"""A job's runtime plugins and storages reach the task spec the runtime reads."""

from __future__ import annotations

from pathlib import Path

from libs.protocol.events import JobStorage, JobSubmitted
from libs.protocol.validation import parse_job
from runtime.spec import StorageSpec
from services.orchestrator.adapters.specs import build_spec, runtime_plugins
from services.orchestrator.core.frameworks import TaskKey
from tests.orchestrator.sim import World
from tests.support.jobs import job_model

JOB = """
protocolVersion: 2
name: plugged
type: job
prerequisites: [{name: image, type: dockerimage, uri: python:3.11-slim}]
taskRoles:
  main:
    dockerImage: image
    resourcePerInstance: {cpu: 1, memoryMB: 128, gpu: 0}
    commands: [echo hi]
extras:
  com.microsoft.pai.runtimeplugin:
    - plugin: ssh
      parameters: {jobssh: true}
    - plugin: teamwise_storage
      failurePolicy: ignore
      taskroles: [main]
"""


def test_plugins_keep_their_order_parameters_roles_and_failure_policy() -> None:
    specs = runtime_plugins(parse_job(JOB))
    assert [(s.plugin, s.parameters, s.failure_policy, s.taskroles) for s in specs] == [
        ("ssh", {"jobssh": True}, "fail", None),
        ("teamwise_storage", {}, "ignore", ["main"]),
    ]


def test_a_job_without_plugins_has_none() -> None:
    assert runtime_plugins(parse_job(JOB.split("extras:")[0])) == []


def test_the_storages_job_submitted_carries_reach_the_task_spec(tmp_path: Path) -> None:
    storage = JobStorage(name="team", type="local", path="/srv/team", mount_path="/mnt/team", default=True)
    cfg = parse_job(JOB).model_dump(by_alias=True, exclude_none=True)
    message = JobSubmitted(
        job_id="j1", user="alice", name="plugged", virtual_cluster="default", config=job_model(cfg)
    )
    world = World()
    world.feed(message.model_copy(update={"storages": (storage,)}))
    assert world.framework is not None
    spec = build_spec(tmp_path, world.framework, TaskKey(0, "main", 0, 0), tmp_path / "task", False)
    assert spec.storages == [
        StorageSpec(name="team", type="local", path="/srv/team", mount_path="/mnt/team", default=True)
    ]
    world = World()
    world.feed(message)  # an event written before storages were carried: none
    assert world.framework is not None
    assert (
        build_spec(tmp_path, world.framework, TaskKey(0, "main", 0, 0), tmp_path / "t2", False).storages == []
    )
