"""A job's first read-model row, from its submission: totals, priority class, tags.

Used both when the API accepts a job and when the projection rebuilds a row from a
``job.submitted`` event, so the two paths cannot disagree.
"""

from __future__ import annotations

from typing import Any

from libs.protocol.events import JobSubmitted
from libs.protocol.gpu_share import MILLI
from libs.protocol.jobs import JobConfig, job_json
from services.rest.core.states import SUB_STATE_WAITING

# SQL integer columns (SQLite and PostgreSQL bigint) hold no more: a total beyond it, which only
# a job from before the limits could carry, is stored as this much rather than failing the write.
INT64_MAX = 2**63 - 1


def totals(config: JobConfig) -> tuple[int, int, int]:
    """(total GPUs, total tasks, task roles) of a job config."""
    return min(config.total_gpus, INT64_MAX), min(config.total_tasks, INT64_MAX), config.total_task_roles


def usage_totals(config: JobConfig) -> tuple[int, int]:
    """(CPU cores, thousandths of a GPU) a job config holds while it runs: every task role's
    resources times its instances; a role sharing a GPU (extras.gpuShare) holds its share of one
    GPU per instance, not a whole one. What usage reports multiply by time."""
    shares = config.gpu_shares
    cpus = gpu_milli = 0
    for role, spec in config.task_roles.items():
        resources = spec.resource_per_instance
        cpus += spec.instances * resources.cpu
        share = shares.get(role)
        per_instance = share.gpu_milli if share is not None else resources.gpu * MILLI
        gpu_milli += spec.instances * per_instance
    return min(cpus, INT64_MAX), min(gpu_milli, INT64_MAX)


def priority_class(config: JobConfig) -> str | None:
    """OpenPAI's jobPriorityClass (oppo, test, prod) when the config names one."""
    return config.priority_class or None


def tags(config: JobConfig) -> list[str]:
    """The tags a job was submitted with (extras.tags, a key this platform keeps for OpenPAI)."""
    extra = (config.extras.model_extra if config.extras is not None else None) or {}
    value = extra.get("tags") or []
    return [str(tag) for tag in value] if isinstance(value, list) else []


def job_row_from_config(event: JobSubmitted, submitted_ms: int) -> dict[str, Any]:
    gpus, tasks, roles = totals(event.config)
    cpus, gpu_milli = usage_totals(event.config)
    return {
        "id": event.job_id,
        "username": event.user,
        "name": event.name,
        "virtual_cluster": event.virtual_cluster,
        "priority": event.priority,
        "priority_class": priority_class(event.config),
        "tags": tags(event.config),
        "state": "WAITING",
        "sub_state": SUB_STATE_WAITING,
        "execution_type": "START",
        "retries": 0,
        "retries_user": 0,
        "retries_platform": 0,
        "retries_resource": 0,
        "submission_time": submitted_ms,
        "created_time": submitted_ms,
        "total_gpus": gpus,
        "total_tasks": tasks,
        "total_task_roles": roles,
        "total_cpus": cpus,
        "total_gpu_milli": gpu_milli,
        "config": job_json(event.config),
    }
