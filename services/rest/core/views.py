"""Read-model rows as OpenPAI REST API v2 JSON: job summaries, job details, attempts, tasks.

OpenPAI's portal, SDK and scripts parse these shapes, so field names, nesting and nullability
follow its published specification. Rows come in as plain mappings (column name -> value):
this module knows nothing of SQL, so the shapes can be tested without a database.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from libs.protocol.jobs import stored_job_or_none
from services.rest.core.states import framework_name, task_uid

Row = Mapping[str, Any]


def retry_details(job: Row) -> dict[str, int]:
    return {
        "user": job["retries_user"],
        "platform": job["retries_platform"],
        "resource": job["retries_resource"],
    }


def job_summary(job: Row) -> dict[str, Any]:
    """One item of GET /api/v2/jobs."""
    return {
        "protocolVersion": "2",  # every job here is written in the job protocol v2
        "debugId": framework_name(job["username"], job["name"]),
        "name": job["name"],
        "username": job["username"],
        "jobId": job["id"],
        "state": job["state"],
        "subState": job["sub_state"],
        "executionType": job["execution_type"],
        "tags": list(job["tags"] or []),
        "retries": job["retries"],
        "retryDetails": retry_details(job),
        "retryDelayTime": job["retry_delay_ms"],
        "submissionTime": job["submission_time"],
        "createdTime": job["created_time"],
        "launchedTime": job["launched_time"],
        "completedTime": job["completed_time"],
        "appExitCode": job["exit_code"],
        "virtualCluster": job["virtual_cluster"],
        "totalGpuNumber": job["total_gpus"],
        "totalTaskNumber": job["total_tasks"],
        "totalTaskRoleNumber": job["total_task_roles"],
        "jobPriority": job["priority_class"],
    }


def log_path(job: Row, job_attempt: int, role: str, index: int, task_attempt: int) -> str:
    return (
        f"/api/v2/jobs/{job['username']}~{job['name']}/attempts/{job_attempt}"
        f"/taskRoles/{role}/taskIndex/{index}/attempts/{task_attempt}/logs"
    )


def _exit_messages(diagnostics: str | None) -> dict[str, Any] | None:
    if not diagnostics:
        return None
    return {"container": None, "runtime": None, "launcher": diagnostics}


def task_attempt_status(job: Row, task: Row) -> dict[str, Any]:
    """The per-attempt part of a task status (also one item of a task's ``attempts``)."""
    return {
        "attemptId": task["task_attempt"],
        "attemptState": task["state"],
        "currentAttemptCreatedTime": task["created_time"],
        "currentAttemptLaunchedTime": task["launched_time"],
        "currentAttemptCompletedTime": task["completed_time"],
        "containerId": (
            f"{job['id']}-{task['role']}-{task['task_index']}-{task['job_attempt']}-{task['task_attempt']}"
            if task["launched_time"] is not None
            else None
        ),
        "containerIp": task["ip"],
        "containerNodeName": task["node"],
        "containerPorts": dict(task["ports"] or {}),
        "containerGpus": task["gpus"],
        # An addition: the thousandths of its one GPU a task sharing it holds (extras.gpuShare).
        "containerGpuMilli": _share_of(job, task["role"]) if task["gpus"] else None,
        "containerLog": log_path(
            job, task["job_attempt"], task["role"], task["task_index"], task["task_attempt"]
        ),
        "containerExitCode": task["exit_code"],
        "containerExitSpec": task["exit_spec"],
        "containerExitDiagnostics": task["exit_diagnostics"],
        # An addition to OpenPAI's fields: how the task runs where that is not what the job says
        # (the local executor runs the commands on the host, not in the docker image).
        "executorNote": task.get("note"),
        # An addition: the docker image the task ran, pinned (repository@sha256:...).
        "imageDigest": task.get("image_digest"),
    }


def _share_of(job: Row, role: str) -> int | None:
    config = stored_job_or_none(job["config"])
    share = config.gpu_shares.get(role) if config is not None else None
    return share.gpu_milli if share is not None else None


GpuShare = tuple[str, str, int]
"""A task's hold on a shared GPU: node, device, thousandths."""


def gpu_share(status: Mapping[str, Any]) -> GpuShare | None:
    """The shared GPU a task status holds part of, if it holds one (and is placed)."""
    if status.get("containerGpuMilli") and status.get("containerGpus") and status["taskState"] != "WAITING":
        node = str(status.get("containerNodeName") or "")
        return node, str(status["containerGpus"]), int(status["containerGpuMilli"])
    return None


def shared_gpu_list(held: Iterable[tuple[str, int, GpuShare]]) -> list[dict[str, Any]]:
    """`sharedGpus` from each (role, index, share) in the order of the job's task statuses."""
    devices: dict[tuple[str, str], list[dict[str, Any]]] = {}
    for role, index, (node, gpu, milli) in held:
        devices.setdefault((node, gpu), []).append({"taskRole": role, "taskIndex": index, "gpuMilli": milli})
    return [
        {"node": node, "gpu": gpu, "gpuMilli": sum(t["gpuMilli"] for t in tasks), "tasks": tasks}
        for (node, gpu), tasks in sorted(devices.items())
    ]


def shared_gpus(roles: Mapping[str, Any]) -> list[dict[str, Any]]:
    """The GPUs the job's tasks share, each with how much of it the job's tasks hold and which."""
    return shared_gpu_list(
        (role, task["taskIndex"], share)
        for role, status in roles.items()
        for task in status["taskStatuses"]
        if (share := gpu_share(task)) is not None
    )


def task_status(job: Row, task: Row) -> dict[str, Any]:
    """One item of ``taskRoles.<role>.taskStatuses`` in a job detail: the task's latest attempt.

    ``taskUid`` names a task that exists. A task not placed yet has none, and the field is left
    out, as OpenPAI's rest-server leaves it out (its ``instanceUID`` is undefined) for a task with
    no instance yet. Followed: the rest-server, not either swagger: the SDK's (2.2.0) types the
    field as an integer, OpenPAI's since 2.2.6 as a string, and the server sends a string or
    nothing, as this platform does.
    """
    status: dict[str, Any] = {"taskIndex": task["task_index"]}
    if not task.get("placeholder"):
        status["taskUid"] = task_uid(job["id"], task["role"], task["task_index"])
    return {
        **status,
        "taskState": task["state"],
        "retries": task["task_attempt"],
        "accountableRetries": task["task_attempt"],
        "createdTime": task["created_time"],
        "launchedTime": task["launched_time"],
        "completedTime": task["completed_time"],
        **task_attempt_status(job, task),
    }


def _waiting_task(job_attempt: int, role: str, index: int) -> dict[str, Any]:
    return {
        "placeholder": True,
        "job_attempt": job_attempt,
        "role": role,
        "task_index": index,
        "task_attempt": 0,
        "state": "WAITING",
        "node": None,
        "ip": None,
        "ports": {},
        "gpus": None,
        "created_time": None,
        "launched_time": None,
        "completed_time": None,
        "exit_code": None,
        "exit_spec": None,
        "exit_diagnostics": None,
        "note": None,
        "image_digest": None,
    }


# At most this many not-yet-placed tasks are listed per role: a job from before the limits may
# ask for a billion, and its detail must still be one bounded answer.
MAX_WAITING_LISTED = 10_000


def placeholders(instances: Any) -> int:
    """How many tasks of a role the config asks for, as many as a detail lists."""
    try:
        count = int(instances or 1)
    except (TypeError, ValueError, OverflowError):
        return 1
    return max(1, min(count, MAX_WAITING_LISTED))


def first_attempt(job: Row) -> dict[str, Any]:
    """Attempt 0 as the job row tells it, for a job no scheduling event has reached yet.

    A submission answers 202 once its job row is stored; the attempt's own row is written when
    the scheduler's decision is projected. Clients poll ``attempts/0`` and its tasks right
    after the 202, so until then attempt 0 is read from the job row (waiting, or stopped if it
    was stopped while queued). The first projected event writes the real row, which wins.
    """
    return {
        "job_id": job["id"],
        "attempt": 0,
        "state": job["state"],
        "sub_state": job["sub_state"],
        "created_time": None,
        "launched_time": None,
        "completed_time": job["completed_time"],
        "exit_code": job["exit_code"],
        "exit_spec": job["exit_spec"],
        "exit_diagnostics": job["exit_diagnostics"],
        "exit_trigger_message": job["exit_trigger_message"],
        "exit_trigger_role": job["exit_trigger_role"],
        "exit_trigger_index": job["exit_trigger_index"],
    }


def waiting_task(job: Row, job_attempt: int, role: str, index: int) -> dict[str, Any] | None:
    """A task of the config not placed yet, as a WAITING row; None if the config has no such task."""
    config = stored_job_or_none(job["config"])
    spec = config.task_roles.get(role) if config is not None else None
    if spec is None or not 0 <= index < spec.instances:
        return None
    return _waiting_task(job_attempt, role, index)


def waiting_status(job: Row, job_attempt: int, role: str, index: int) -> dict[str, Any]:
    """The status of a task not placed yet (a WAITING placeholder)."""
    return task_status(job, _waiting_task(job_attempt, role, index))


def role_sizes(job: Row, placed: Iterable[tuple[str, int]]) -> dict[str, int]:
    """How many statuses each role lists: the config's roles in its order with their instances,
    then roles only the rows know, by name; a role reaches past its highest placed index."""
    sizes: dict[str, int] = {}
    config = stored_job_or_none(job["config"])
    for role, spec in (config.task_roles if config is not None else {}).items():
        sizes[role] = placeholders(spec.instances)
    beyond: dict[str, int] = {}
    for role, index in placed:
        if role in sizes:
            sizes[role] = max(sizes[role], index + 1)
        else:
            beyond[role] = max(beyond.get(role, 0), index + 1)
    return sizes | dict(sorted(beyond.items()))


def task_roles(job: Row, job_attempt: int, tasks: Iterable[Row]) -> dict[str, Any]:
    """``taskRoles`` of a job detail: every role of the config, each task at its latest attempt.

    Tasks not placed yet show as WAITING, so a queued job already lists what it will run.
    """
    latest: dict[tuple[str, int], Row] = {}
    for task in tasks:
        key = (task["role"], task["task_index"])
        if key not in latest or task["task_attempt"] > latest[key]["task_attempt"]:
            latest[key] = task
    result: dict[str, Any] = {}
    for role, instances in role_sizes(job, latest).items():
        statuses = []
        for index in range(instances):
            row = latest.get((role, index)) or _waiting_task(job_attempt, role, index)
            statuses.append(task_status(job, row))
        result[role] = {"taskRoleStatus": {"name": role}, "taskStatuses": statuses}
    return result


def job_detail(
    job: Row, attempt: Row | None, tasks: Sequence[Row], *, roles: dict[str, Any] | None = None
) -> dict[str, Any]:
    """GET /api/v2/jobs/{user}~{job}: the job with its latest (or a chosen) attempt.

    `roles`: its `taskRoles` built already (then `tasks` is not read)."""
    attempt_id = attempt["attempt"] if attempt else (job["attempt"] or 0)
    built = task_roles(job, attempt_id, tasks) if roles is None else roles
    return {
        **job_detail_head(job, attempt),
        "taskRoles": built,
        # An addition: GPUs this job's tasks share (extras.gpuShare) and how much of each they hold.
        "sharedGpus": shared_gpus(built),
    }


def job_detail_head(job: Row, attempt: Row | None) -> dict[str, Any]:
    """The job detail before its `taskRoles` and `sharedGpus`, for a route that streams those."""
    spec = job["exit_spec"]
    attempt_id = attempt["attempt"] if attempt else (job["attempt"] or 0)
    return {
        "name": job["name"],
        "debugId": framework_name(job["username"], job["name"]),
        "jobId": job["id"],
        "tags": list(job["tags"] or []),
        "jobStatus": {
            "username": job["username"],
            "state": job["state"],
            "subState": job["sub_state"],
            "executionType": job["execution_type"],
            "retries": job["retries"],
            "retryDetails": retry_details(job),
            "retryDelayTime": job["retry_delay_ms"],
            "submissionTime": job["submission_time"],
            "createdTime": job["created_time"],
            "launchedTime": job["launched_time"],
            "completedTime": job["completed_time"],
            "attemptId": attempt_id,
            "attemptState": attempt["state"] if attempt else job["state"],
            "appId": job["id"],
            "appCreatedTime": attempt["created_time"] if attempt else None,
            "appLaunchedTime": attempt["launched_time"] if attempt else None,
            "appCompletedTime": attempt["completed_time"] if attempt else None,
            "appExitCode": job["exit_code"],
            "appExitSpec": spec,
            "appExitDiagnostics": job["exit_diagnostics"],
            "appExitMessages": _exit_messages(job["exit_diagnostics"]),
            "appExitTriggerMessage": job["exit_trigger_message"],
            "appExitTriggerTaskRoleName": job["exit_trigger_role"],
            "appExitTriggerTaskIndex": job["exit_trigger_index"],
            "appExitType": spec["type"] if spec else None,
            "pendingReason": job["pending_reason"],
            "virtualCluster": job["virtual_cluster"],
            "totalGpuNumber": job["total_gpus"],
            "totalTaskNumber": job["total_tasks"],
            "totalTaskRoleNumber": job["total_task_roles"],
        },
    }


_HISTORY_TASK_FIELDS = (
    "taskIndex",
    "taskState",
    "containerId",
    "containerIp",
    "containerGpus",
    "containerLog",
    "containerExitCode",
)


def job_attempt(job: Row, attempt: Row, tasks: Sequence[Row], latest: bool) -> dict[str, Any]:
    """One item of GET .../job-attempts (OpenPAI's job history shape)."""
    spec = attempt["exit_spec"]
    roles = task_roles(job, attempt["attempt"], tasks)
    for role in roles.values():
        role["taskStatuses"] = [
            {key: status[key] for key in _HISTORY_TASK_FIELDS} for status in role["taskStatuses"]
        ]
    return {
        "jobName": job["name"],
        "frameworkName": framework_name(job["username"], job["name"]),
        "uid": job["id"],
        "userName": job["username"],
        "state": attempt["state"],
        "originState": attempt["sub_state"],
        "attemptIndex": attempt["attempt"],
        "jobStartedTime": job["submission_time"],
        "attemptStartedTime": attempt["created_time"],
        "attemptCompletedTime": attempt["completed_time"],
        "exitCode": attempt["exit_code"],
        "exitPhrase": spec["phrase"] if spec else None,
        "exitType": spec["type"] if spec else None,
        "exitDiagnostics": (
            {
                "diagnosticsSummary": attempt["exit_diagnostics"],
                "runtime": None,
                "launcher": attempt["exit_diagnostics"],
            }
            if attempt["exit_diagnostics"]
            else None
        ),
        "appExitTriggerMessage": attempt["exit_trigger_message"],
        "appExitTriggerTaskRoleName": attempt["exit_trigger_role"],
        "appExitTriggerTaskIndex": attempt["exit_trigger_index"],
        "appExitSpec": spec,
        "appExitDiagnostics": attempt["exit_diagnostics"],
        "appExitMessages": _exit_messages(attempt["exit_diagnostics"]),
        "totalGpuNumber": job["total_gpus"],
        "totalTaskNumber": job["total_tasks"],
        "totalTaskRoleNumber": job["total_task_roles"],
        "taskRoles": roles,
        "isLatest": latest,
    }
