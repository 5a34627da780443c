"""job.submitted carries the protocol's model of the job, and its wire JSON is what it was.

Version 1 sent the config as a plain mapping; version 2 reads the same JSON as `JobConfig`, so
an event from before decodes, and an event encoded now is the stored copy (masked_config) byte
for byte. No service, CLI or runtime module reads a job field by its JSON name any more: they
read the model's fields, and this file keeps it so.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
from pydantic import ValidationError

from libs.protocol import masked_config, parse_job
from libs.protocol.events import JobSubmitted, decode_event, encode_event
from libs.protocol.jobs import JobConfig, job_json, stored_job
from libs.protocol.rendering import MASK, masked_job

ROOT = Path(__file__).resolve().parents[2]

JOB = """
protocolVersion: 2
name: train
type: job
jobRetryCount: 2
secrets:
  token: s3cret
prerequisites:
  - name: img
    type: dockerimage
    uri: registry.example.com/team/train:1
    auth:
      username: bot
      password: literal-password
      registryuri: registry.example.com
taskRoles:
  worker:
    instances: 3
    taskRetryCount: 1
    dockerImage: img
    resourcePerInstance: {cpu: 2, memoryMB: 4096, gpu: 1}
    commands:
      - python train.py --token <% $secrets.token %>
extras:
  hivedScheduler: {jobPriorityClass: prod}
  gangAllocation: false
  gpuShare: {taskRoles: {worker: {gpuMilli: 500}}}
"""

# A job.submitted as version 1 wrote it (the config as masked_config made it then).
V1_EVENT = {
    "version": 1,
    "event_id": "e1",
    "occurred_at": "2026-01-01T00:00:00Z",
    "type": "job.submitted",
    "job_id": "j1",
    "user": "alice",
    "name": "train",
    "virtual_cluster": "default",
    "priority": 0,
    "config": {
        "protocolVersion": 2,
        "name": "train",
        "type": "job",
        "secrets": {"token": "******"},
        "jobRetryCount": 2,
        "taskRoles": {
            "worker": {
                "instances": 3,
                "completion": {"minFailedInstances": 1, "minSucceededInstances": 3},
                "taskRetryCount": 1,
                "dockerImage": "img",
                "resourcePerInstance": {"cpu": 2, "memoryMB": 4096, "gpu": 1, "ports": {"ssh": 1, "http": 1}},
                "commands": ["sleep 1"],
            }
        },
        "prerequisites": [{"name": "img", "type": "dockerimage", "uri": "busybox"}],
        "defaults": {"virtualCluster": "default"},
        "extras": {"gangAllocation": False, "submitFrom": "item-7"},
    },
    "storages": [],
}


def submitted(job: JobConfig) -> JobSubmitted:
    return JobSubmitted(job_id="j1", user="alice", name=job.name, virtual_cluster="default", config=job)


def test_a_version_1_job_submitted_decodes_into_the_typed_job() -> None:
    event = decode_event(json.dumps(V1_EVENT))
    assert isinstance(event, JobSubmitted)
    assert event.version == 1
    worker = event.config.task_roles["worker"]
    assert (worker.instances, worker.task_retry_count, worker.resource_per_instance.memory_mb) == (3, 1, 4096)
    assert (event.config.job_retry_count, event.config.gang_allocation) == (2, False)
    assert event.config.extras is not None
    assert event.config.extras.submit_from == "item-7"
    # Re-encoded, its config is the JSON it came with.
    assert json.loads(encode_event(event))["config"] == V1_EVENT["config"]


def test_an_event_encoded_now_is_version_2_and_decodes_to_the_same_event() -> None:
    event = submitted(masked_job(parse_job(JOB)))
    wire = encode_event(event)
    assert json.loads(wire)["version"] == 2
    assert decode_event(wire) == event


def test_the_config_on_the_wire_is_the_stored_copy_with_every_secret_masked() -> None:
    job = parse_job(JOB)
    wire = json.loads(encode_event(submitted(masked_job(job))))["config"]
    assert wire == masked_config(job)
    assert wire["secrets"] == {"token": MASK}
    assert wire["prerequisites"][0]["auth"]["password"] == MASK
    assert "s3cret" not in json.dumps(wire)
    assert "literal-password" not in json.dumps(wire)


def test_the_defaults_come_from_the_model_and_a_stored_config_reads_back_whole() -> None:
    job = stored_job(
        {
            "protocolVersion": 2,
            "name": "j",
            "type": "job",
            "taskRoles": {
                "w": {
                    "dockerImage": "i",
                    "resourcePerInstance": {"cpu": 1, "memoryMB": 64, "gpu": 0},
                    "commands": ["x"],
                }
            },
        }
    )
    role = job.task_roles["w"]
    assert (role.instances, role.task_retry_count, job.job_retry_count) == (1, 0, 0)
    assert stored_job(job) is job
    assert stored_job(job_json(job)) == job


@pytest.mark.parametrize("instances", [1.5, "2", True, None, 0])
def test_a_job_submitted_whose_counts_the_protocol_refuses_does_not_decode(instances: object) -> None:
    raw = json.loads(json.dumps(V1_EVENT))
    raw["config"]["taskRoles"]["worker"]["instances"] = instances
    with pytest.raises(ValidationError, match="instances"):
        decode_event(json.dumps(raw))


KEYED_READ = re.compile(
    r'\.get\("(taskRoles|taskRetryCount|resourcePerInstance|memoryMB|instances|jobRetryCount)"'
    r'|\["(taskRoles|resourcePerInstance|memoryMB)"\]'
)


def test_no_service_cli_or_runtime_module_reads_a_job_field_by_its_json_name() -> None:
    """The grep of the issue that made the job typed (`grep -rnE ... services pai runtime`)."""
    found = [
        f"{path.relative_to(ROOT)}:{number}: {line.strip()}"
        for top in ("services", "pai", "runtime")
        for path in sorted((ROOT / top).rglob("*.py"))
        for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1)
        if KEYED_READ.search(line)
    ]
    assert found == [], "read the typed job (libs/protocol/jobs.py) instead:\n" + "\n".join(found)
