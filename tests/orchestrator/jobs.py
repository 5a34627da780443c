"""Job configs for executor and service tests, built through the real protocol parser."""

from __future__ import annotations

import textwrap

from libs.protocol import JobConfig, parse_job
from libs.protocol.rendering import masked_job


def job_config(roles: dict[str, tuple[int, str]], *, extra: str = "") -> JobConfig:
    """A normalised, masked job config: role -> (instances, shell command)."""
    lines = ["protocolVersion: 2", "name: test-job", "type: job", extra.strip()]
    lines += ["prerequisites:", "  - name: img", "    type: dockerimage", "    uri: busybox", "taskRoles:"]
    for role, (instances, command) in roles.items():
        lines.append(
            textwrap.indent(
                textwrap.dedent(
                    f"""\
                    {role}:
                      instances: {instances}
                      dockerImage: img
                      resourcePerInstance: {{cpu: 1, memoryMB: 64, gpu: 0}}
                      commands:
                        - {command}
                    """
                ),
                "  ",
            )
        )
    return masked_job(parse_job("\n".join(line for line in lines if line)))
