"""Job frameworks for the Kubernetes tests: parsed by the real protocol parser, placed with GPUs."""

from __future__ import annotations

import textwrap
from typing import Any

from libs.protocol import JobConfig, masked_config, parse_job
from libs.protocol.events import JobScheduled, JobSubmitted, TaskPlacement
from libs.protocol.jobs import stored_job
from services.orchestrator.core.deciders import decide
from services.orchestrator.core.effects import Context
from services.orchestrator.core.frameworks import Framework
from tests.orchestrator.sim import T0

JOB_ID = "job-7f3a"

JOB_YAML = """\
protocolVersion: 2
name: mnist_train
type: job
prerequisites:
  - name: img
    type: dockerimage
    uri: registry.example.com/team/pytorch:2.1
    auth:
      username: robot
      password: <% $secrets.registry_password %>
      registryuri: registry.example.com
secrets:
  registry_password: s3cret
  token: abc
taskRoles:
  trainer:
    instances: 2
    dockerImage: img
    extraContainerOptions: {shmMB: 2048}
    resourcePerInstance: {cpu: 4, memoryMB: 8192, gpu: 2, ports: {nccl: 2}}
    commands:
      - python train.py
"""


def job_config(text: str = JOB_YAML) -> dict[str, Any]:
    return masked_config(parse_job(textwrap.dedent(text)))


def framework(
    config: dict[str, Any] | JobConfig | None = None, *, gpus: tuple[int, ...] = (2, 3)
) -> Framework:
    """The framework after job.submitted and job.scheduled: every task on node gpu-node-1."""
    cfg = stored_job(job_config() if config is None else config)
    fw = decide(
        None,
        JobSubmitted(job_id=JOB_ID, user="alice", name="mnist_train", virtual_cluster="default", config=cfg),
        Context(now=T0),
    ).framework
    placements = tuple(
        TaskPlacement(
            role=role, index=i, node=f"gpu-node-{i + 1}", node_address=f"10.0.0.{i + 1}", gpu_indices=gpus
        )
        for role, body in cfg.task_roles.items()
        for i in range(body.instances)
    )
    fw = decide(fw, JobScheduled(job_id=JOB_ID, attempt=0, placements=placements), Context(now=T0)).framework
    assert fw is not None
    return fw
