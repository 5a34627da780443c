"""How big a job may be: tasks, resources, retries, tags and text, each bounded and named.

A job is checked against these limits at validation (REST and `pai job validate`), so one
submission cannot ask the scheduler to enumerate a billion tasks or the database to store a
number it cannot hold. The defaults are generous for a real cluster and bounded everywhere:

- 10,000 tasks per job (and per task role): OpenPAI's largest jobs have hundreds of tasks, a
  HiveD cluster of a few thousand GPUs never places more than a few thousand at once, and a
  10,000-task job still costs the scheduler and the orchestrator milliseconds and megabytes.
- 50 task roles: real jobs have one to a handful (server/worker, chief/ps/worker).
- 1,024 CPU cores, 16 TB of memory and /dev/shm, 64 GPUs per task: beyond the largest
  machines sold today; the scheduler still has to find a node that offers them (REST refuses
  a task larger than the largest node it knows of, services/rest/adapters/node_sizes.py).
- At least 64 MB of memory per task (MIN_TASK_MEMORY_MB, not a setting): the task's runtime
  lives inside the task's memory limit.
- 1,000 retries of a job or a task: a job that failed a thousand times will not succeed.
- 100 tags per job of at most 256 characters each.
- 255 characters for names, 64 KiB for any other text (a description, one command, a
  parameter or a secret); the request body's own size limit bounds the sum.
- No number anywhere in a job beyond 2**53, the largest whole number OpenPAI's JavaScript
  reading (and a JSON reader in any language) holds exactly.

The admin changes them through the REST service's settings (`PAI_LIMIT_*`); `GET /api/v2/info`
shows the ones in force.
"""

from __future__ import annotations

import math
from collections.abc import Iterator

from pydantic import BaseModel, ConfigDict, Field

from libs.protocol.errors import Problem, format_path

# The largest request body the REST API reads by default (PAI_LIMIT_BODY_BYTES); `pai job
# validate` warns about a job file larger than this.
DEFAULT_BODY_BYTES = 1024 * 1024
# The largest whole number a JavaScript number (OpenPAI's reading of a job) holds exactly.
MAX_SAFE_NUMBER = 2**53
# The least memory a task may ask for (resourcePerInstance.memoryMB). A task is held to its
# memoryMB by the kernel (a memory cgroup), and its own runtime lives inside that limit: about
# 14 MiB resident while the command runs, about 35 MiB once it has loaded the failure rules to
# explain a command that failed (psutil on a `sleep` task and a `sleep; exit 3` one). 64 MB
# leaves a shell and a small command some 30 MB beside it; with less, the kernel would kill the
# task for memory before it ran anything, or while it said why its command failed.
MIN_TASK_MEMORY_MB = 64


class JobLimits(BaseModel):
    """The bounds a job is checked against; field names are what `GET /api/v2/info` shows."""

    model_config = ConfigDict(frozen=True)

    tasks_per_job: int = Field(10_000, ge=1)
    instances_per_task_role: int = Field(10_000, ge=1)
    task_roles_per_job: int = Field(50, ge=1)
    cpu_per_task: int = Field(1_024, ge=1)
    memory_mb_per_task: int = Field(16 * 1024 * 1024, ge=1)
    gpu_per_task: int = Field(64, ge=0)
    shm_mb_per_task: int = Field(16 * 1024 * 1024, ge=1)
    ports_per_task: int = Field(100, ge=0)
    retry_count: int = Field(1_000, ge=0)
    tags_per_job: int = Field(100, ge=0)
    tag_length: int = Field(256, ge=1)
    name_length: int = Field(255, ge=1)
    text_length: int = Field(64 * 1024, ge=1)

    def as_api(self) -> dict[str, int]:
        """camelCase names for the API, as the rest of OpenPAI's API spells its fields."""
        return {_camel(name): value for name, value in self.model_dump().items()}


DEFAULT_LIMITS = JobLimits()


def _camel(name: str) -> str:
    first, *rest = name.split("_")
    return first + "".join(part.upper() if part == "mb" else part.title() for part in rest)


def _number(value: object) -> float | int | None:
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    return value


def _over(value: object, limit: int) -> bool:
    number = _number(value)
    return number is not None and number > limit


def _fmt(value: object) -> str:
    number = _number(value)
    if number is None:
        return repr(value)
    if isinstance(number, float) and number.is_integer() and abs(number) < 1e21:
        number = int(number)
    text = f"{number:,}" if isinstance(number, int) and abs(number) < 10**21 else f"{number:.3g}"
    return text


Found = tuple[tuple[str | int, ...], str, str]


def too_little_memory(value: object) -> tuple[str, str]:
    """The message and the fix for a memoryMB below MIN_TASK_MEMORY_MB."""
    return (
        f"{_fmt(value)} MB is less than the {MIN_TASK_MEMORY_MB} MB every task needs (the task's "
        "runtime runs inside its memory limit and uses up to about 35 MB itself)",
        f"ask for at least {MIN_TASK_MEMORY_MB}: `memoryMB: {MIN_TASK_MEMORY_MB}` or more",
    )


def _bound(
    path: tuple[str | int, ...], value: object, limit: int, what: str, setting: str
) -> Iterator[Found]:
    if _over(value, limit):
        yield (
            path,
            f"{_fmt(value)} is more than the cluster's limit of {limit:,} {what}",
            f"use at most {limit:,}; an admin raises the limit with PAI_LIMIT_{setting.upper()}",
        )


def limit_problems(data: object, limits: JobLimits = DEFAULT_LIMITS) -> Iterator[Found]:
    """Every limit a job's raw data breaks, each with its YAML path, the limit and the fix."""
    bounded = list(_bounds(data, limits))
    named = {path for path, _, _ in bounded}
    yield from bounded
    # A number over a named limit is told once, with that limit.
    yield from (found for found in _walk(data, (), limits) if found[0] not in named)


def _bounds(data: object, limits: JobLimits) -> Iterator[Found]:
    if not isinstance(data, dict):
        return
    yield from _bound(
        ("jobRetryCount",), data.get("jobRetryCount"), limits.retry_count, "retries", "retry_count"
    )
    extras = data.get("extras")
    tags = extras.get("tags") if isinstance(extras, dict) else None
    if isinstance(tags, list):
        if len(tags) > limits.tags_per_job:
            yield (
                ("extras", "tags"),
                f"{len(tags):,} tags are more than the cluster's limit of {limits.tags_per_job:,} tags "
                "per job",
                "keep the tags that matter; an admin raises the limit with PAI_LIMIT_TAGS_PER_JOB",
            )
        for index, tag in enumerate(tags):
            if isinstance(tag, str) and len(tag) > limits.tag_length:
                yield (
                    ("extras", "tags", index),
                    f"the tag is {len(tag):,} characters long, more than the cluster's limit of "
                    f"{limits.tag_length:,}",
                    "use a shorter tag; an admin raises the limit with PAI_LIMIT_TAG_LENGTH",
                )
    roles = data.get("taskRoles")
    if not isinstance(roles, dict):
        return
    if len(roles) > limits.task_roles_per_job:
        yield (
            ("taskRoles",),
            f"{len(roles):,} task roles are more than the cluster's limit of {limits.task_roles_per_job:,}",
            "merge task roles that run the same thing; an admin raises the limit with "
            "PAI_LIMIT_TASK_ROLES_PER_JOB",
        )
    total = 0
    for role, spec in roles.items():
        if not isinstance(spec, dict):
            continue
        where: tuple[str | int, ...] = ("taskRoles", role)
        instances = spec.get("instances", 1)
        count = _number(instances)
        if count is not None and math.isfinite(count):
            total += max(0, int(min(count, MAX_SAFE_NUMBER)))
        yield from _bound(
            (*where, "instances"),
            instances,
            limits.instances_per_task_role,
            "instances per task role",
            "instances_per_task_role",
        )
        yield from _bound(
            (*where, "taskRetryCount"),
            spec.get("taskRetryCount"),
            limits.retry_count,
            "retries",
            "retry_count",
        )
        resources = spec.get("resourcePerInstance")
        if isinstance(resources, dict):
            res: tuple[str | int, ...] = (*where, "resourcePerInstance")
            yield from _bound(
                (*res, "cpu"), resources.get("cpu"), limits.cpu_per_task, "CPUs per task", "cpu_per_task"
            )
            yield from _bound(
                (*res, "memoryMB"),
                resources.get("memoryMB"),
                limits.memory_mb_per_task,
                "MB of memory per task",
                "memory_mb_per_task",
            )
            memory = _number(resources.get("memoryMB"))
            # Below 1 the schema refuses it, with this same wording (validation.py).
            if memory is not None and 1 <= memory < MIN_TASK_MEMORY_MB and float(memory).is_integer():
                yield ((*res, "memoryMB"), *too_little_memory(memory))
            yield from _bound(
                (*res, "gpu"), resources.get("gpu"), limits.gpu_per_task, "GPUs per task", "gpu_per_task"
            )
            ports = resources.get("ports")
            if isinstance(ports, dict):
                for label, count in ports.items():
                    yield from _bound(
                        (*res, "ports", label),
                        count,
                        limits.ports_per_task,
                        "ports per task",
                        "ports_per_task",
                    )
        options = spec.get("extraContainerOptions")
        if isinstance(options, dict):
            yield from _bound(
                (*where, "extraContainerOptions", "shmMB"),
                options.get("shmMB"),
                limits.shm_mb_per_task,
                "MB of /dev/shm per task",
                "shm_mb_per_task",
            )
    if total > limits.tasks_per_job and not any(
        _over(spec.get("instances"), limits.instances_per_task_role)
        for spec in roles.values()
        if isinstance(spec, dict)
    ):
        yield (
            ("taskRoles",),
            f"the job has {total:,} tasks in all, more than the cluster's limit of {limits.tasks_per_job:,} "
            "tasks per job",
            "lower the task roles' instances; an admin raises the limit with PAI_LIMIT_TASKS_PER_JOB",
        )


def _walk(value: object, path: tuple[str | int, ...], limits: JobLimits) -> Iterator[Found]:
    """Text lengths and number sizes anywhere in the job, keys included."""
    if isinstance(value, str):
        limit = limits.name_length if path and path[-1] == "name" else limits.text_length
        if len(value) > limit:
            yield (
                path,
                f"is {len(value):,} characters long, more than the cluster's limit of {limit:,}",
                "shorten it (put long scripts in a file the job fetches); an admin raises the limit with "
                f"PAI_LIMIT_{'NAME' if limit == limits.name_length else 'TEXT'}_LENGTH",
            )
    elif isinstance(value, dict):
        for key, item in value.items():
            if isinstance(key, str) and len(key) > limits.name_length:
                yield (
                    (*path, key[:40] + "..."),
                    f"the key is {len(key):,} characters long, more than the cluster's limit of "
                    f"{limits.name_length:,}",
                    "use a shorter key",
                )
                continue
            yield from _walk(item, (*path, key), limits)
    elif isinstance(value, list):
        for index, item in enumerate(value):
            yield from _walk(item, (*path, index), limits)
    else:
        number = _number(value)
        if isinstance(number, float) and math.isnan(number):
            yield (
                path,
                "NaN is not a number JSON can hold (the API and the portal answer in JSON, and "
                "PostgreSQL's json refuses it)",
                "write a number, or quote it to make it text",
            )
        elif number is not None and abs(number) > MAX_SAFE_NUMBER:
            yield (
                path,
                f"{_fmt(value)} is too large a number (the largest is 2^53 = {MAX_SAFE_NUMBER:,})",
                "use a smaller number, or quote it to make it text",
            )


def problems_of(data: object, limits: JobLimits = DEFAULT_LIMITS) -> list[Problem]:
    """The limit problems as the protocol's Problems (no line numbers), for callers without YAML."""
    return [
        Problem(path=format_path(path), message=message, hint=hint)
        for path, message, hint in limit_problems(data, limits)
    ]
