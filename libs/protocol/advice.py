"""What a valid job may not do as its author expects: warnings, not refusals.

A job that passes validation can still hold a field the platform will not act on. Each warning
names the field's YAML path, what happens instead, and the fix; validation (`pai job validate`),
`POST /api/v2/jobs?dryRun=true`, a submission's answer and the job's detail carry them.

- ``taskRetryCount`` with gang allocation on: OpenPAI's rest-server gives a task its own retry
  count only when ``extras.gangAllocation`` is false; with the gang, a failed task fails its
  attempt and ``jobRetryCount`` decides (FrameworkController's rule, kept here).
"""

from __future__ import annotations

from dataclasses import dataclass

from libs.protocol.jobs import JobConfig


@dataclass(frozen=True)
class Advice:
    path: str
    message: str

    def as_dict(self) -> dict[str, str]:
        return {"path": self.path, "message": self.message}

    def __str__(self) -> str:
        return f"{self.path}: {self.message}"


def advise(job: JobConfig) -> list[Advice]:
    """The job's warnings, in the order of its task roles."""
    warnings: list[Advice] = []
    if job.gang_allocation:
        for name, role in job.task_roles.items():
            if role.task_retry_count > 0:
                warnings.append(
                    Advice(
                        f"taskRoles.{name}.taskRetryCount",
                        f"{role.task_retry_count} is ignored while gang allocation is on: a failed task "
                        "fails the job's attempt, which jobRetryCount retries whole; set "
                        "extras.gangAllocation: false to retry a task on its own",
                    )
                )
    return warnings
