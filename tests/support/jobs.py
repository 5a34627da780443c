"""Job configs for tests that care about a few fields: the rest filled in as a valid protocol job.

`job_model({"taskRoles": {"a": {"instances": 3}}})` is the protocol's JobConfig of a job whose
role `a` has three instances; what a test leaves out takes a small valid value (one CPU,
1024 MB, no GPU, a `true` command), so the test states only what it is about.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from libs.protocol.jobs import JobConfig, job_json

ROLE: dict[str, Any] = {
    "dockerImage": "image",
    "commands": ["true"],
}
RESOURCES: dict[str, Any] = {"cpu": 1, "memoryMB": 1024, "gpu": 0}


def job_dict(config: Mapping[str, Any] | JobConfig | None = None, **keys: Any) -> dict[str, Any]:
    """`config` (and `keys`, protocol names) completed into a valid protocol job, as a mapping."""
    base = job_json(config) if isinstance(config, JobConfig) else dict(config or {})
    given = {**base, **keys}
    roles = given.get("taskRoles", {"main": {}})
    image = given.get("prerequisites")
    done: dict[str, Any] = {
        "protocolVersion": 2,
        "name": "job",
        "type": "job",
        **given,
        "taskRoles": {
            name: {
                **ROLE,
                **role,
                "resourcePerInstance": {**RESOURCES, **(role.get("resourcePerInstance") or {})},
            }
            for name, role in roles.items()
        },
    }
    if image is None:
        done["prerequisites"] = [{"type": "dockerimage", "name": "image", "uri": "busybox"}]
    return done


def job_model(config: Mapping[str, Any] | JobConfig | None = None, **keys: Any) -> JobConfig:
    """`config` completed into a valid protocol job (see job_dict), as the protocol's model; a
    model given is returned as it is."""
    if isinstance(config, JobConfig) and not keys:
        return config
    return JobConfig.model_validate(job_dict(config, **keys))
