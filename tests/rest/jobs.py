"""Job YAML used by the REST tests."""

from __future__ import annotations


def job_yaml(name: str, *, instances: int = 2, gpu: int = 1, secret: str | None = None) -> str:
    secrets = f"secrets:\n  token: {secret}\n" if secret else ""
    return f"""protocolVersion: 2
name: {name}
type: job
{secrets}prerequisites:
  - name: image
    type: dockerimage
    uri: python:3.11
taskRoles:
  worker:
    instances: {instances}
    dockerImage: image
    resourcePerInstance:
      cpu: 1
      memoryMB: 512
      gpu: {gpu}
    commands:
      - echo hello
"""
