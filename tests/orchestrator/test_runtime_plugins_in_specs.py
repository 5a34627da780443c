"""A job's runtime plugins reach the task spec the runtime reads, in the job's order."""

from __future__ import annotations

from libs.protocol.validation import parse_job
from services.orchestrator.adapters.specs import runtime_plugins

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
