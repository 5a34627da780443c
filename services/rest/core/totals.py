"""A job's first read-model row, from its submission: totals, priority class, tags.

Used both when the API accepts a job and when the projection rebuilds a row from a
``job.submitted`` event, so the two paths cannot disagree.
"""

from __future__ import annotations

from typing import Any

from libs.protocol.events import JobSubmitted
from libs.protocol.gpu_share import MILLI, gpu_shares
from services.rest.core.states import SUB_STATE_WAITING

# SQL integer columns (SQLite and PostgreSQL bigint) hold no more: a total beyond it, which only
# a job from before the limits could carry, is stored as this much rather than failing the write.
INT64_MAX = 2**63 - 1


def _int(value: Any, default: int = 0) -> int:
    try:
        return max(-INT64_MAX, min(int(value), INT64_MAX))
    except (TypeError, ValueError, OverflowError):
        return default


def totals(config: dict[str, Any]) -> tuple[int, int, int]:
    """(total GPUs, total tasks, task roles) of a normalised job config."""
    roles = config.get("taskRoles") or {}
    gpus = tasks = 0
    for spec in roles.values():
        spec = spec or {}
        instances = _int(spec.get("instances", 1), 1)
        tasks += instances
        gpus += instances * _int((spec.get("resourcePerInstance") or {}).get("gpu", 0))
    return min(gpus, INT64_MAX), min(tasks, INT64_MAX), len(roles)


def usage_totals(config: dict[str, Any]) -> tuple[int, int]:
    """(CPU cores, thousandths of a GPU) a normalised job config holds while it runs: every
    task role's resources times its instances; a role sharing a GPU (extras.gpuShare) holds its
    share of one GPU per instance, not a whole one. What usage reports multiply by time."""
    shares = gpu_shares(config.get("extras"))
    cpus = gpu_milli = 0
    for role, spec in (config.get("taskRoles") or {}).items():
        spec = spec or {}
        instances = _int(spec.get("instances", 1), 1)
        resources = spec.get("resourcePerInstance") or {}
        cpus += instances * _int(resources.get("cpu", 0))
        share = shares.get(str(role))
        per_instance = share.gpu_milli if share is not None else _int(resources.get("gpu", 0)) * MILLI
        gpu_milli += instances * per_instance
    return min(cpus, INT64_MAX), min(gpu_milli, INT64_MAX)


def priority_class(config: dict[str, Any]) -> str | None:
    """OpenPAI's jobPriorityClass (oppo, test, prod) when the config names one."""
    hived = (config.get("extras") or {}).get("hivedScheduler") or {}
    value = hived.get("jobPriorityClass")
    return str(value) if value else None


def tags(config: dict[str, Any]) -> list[str]:
    value = (config.get("extras") or {}).get("tags") or []
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
        "config": event.config,
    }
