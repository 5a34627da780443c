"""The parts of the REST API's job detail (GET /api/v2/jobs/{user}~{name}) that clients read.

The detail is OpenPAI's: `taskRoles` maps each role to its `taskStatuses`, one mapping per
task in index order. The CLI reads it through `JobDetail`, so the JSON names are spelled here
once. Plain Python on purpose: `pai job status` and `pai job logs` import it, and the CLI
imports nothing it does not need (bench/cli_bench.py).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any


@dataclass(frozen=True)
class JobDetail:
    """A job detail's task roles, each with its tasks' statuses as the API gives them."""

    roles: dict[str, list[dict[str, Any]]] = field(default_factory=dict)
    """Role name -> the statuses of its tasks (taskIndex, taskState, containerExitCode, ...)."""
    shared_gpus: list[dict[str, Any]] = field(default_factory=list)
    """The GPUs the job shares with others (node, gpu, gpuMilli, tasks), if any."""

    @classmethod
    def read(cls, detail: Mapping[str, Any]) -> JobDetail:
        """The detail's task roles and shared GPUs; a detail from before the job ran has none."""
        roles = detail.get("taskRoles") or {}
        return cls(
            roles={
                str(role): list((status or {}).get("taskStatuses") or [])
                for role, status in roles.items()
                if isinstance(status, Mapping)
            },
            shared_gpus=list(detail.get("sharedGpus") or []),
        )

    @property
    def role_names(self) -> list[str]:
        return list(self.roles)
