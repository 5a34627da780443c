"""Read-model rows as OpenPAI's REST API v2 JSON, whole documents as a client parses them: a job's
summary, its detail with each task at its latest attempt (the ones not placed yet WAITING), the
GPUs its tasks share, an attempt of its history, attempt 0 before any scheduling."""

from __future__ import annotations

from typing import Any

from services.rest.core import views
from services.rest.core.states import framework_name, task_uid
from tests.support.jobs import job_dict

FRAME = framework_name("alice", "mnist")
LOGS = "/api/v2/jobs/alice~mnist/attempts/1/taskRoles"
SPEC = {"code": 1, "phrase": "ContainerExitCode", "type": "USER_FAILURE"}
CONFIG = job_dict(
    {
        "taskRoles": {"worker": {"instances": 2}, "ps": {"instances": 1}},
        "extras": {"gpuShare": {"taskRoles": {"worker": {"gpuMilli": 500}}}},
    }
)
JOB: dict[str, Any] = {
    "id": "j1",
    "name": "mnist",
    "username": "alice",
    "state": "FAILED",
    "sub_state": "Completed",
    "execution_type": "START",
    "tags": ["a", "b"],
    "retries": 3,
    "retries_user": 1,
    "retries_platform": 2,
    "retries_resource": 0,
    "retry_delay_ms": 500,
    "submission_time": 1000,
    "created_time": 1001,
    "launched_time": 1002,
    "completed_time": 1003,
    "exit_code": 1,
    "exit_spec": SPEC,
    "exit_diagnostics": "it broke",
    "exit_trigger_message": "worker 0 failed",
    "exit_trigger_role": "worker",
    "exit_trigger_index": 0,
    "pending_reason": None,
    "virtual_cluster": "vc1",
    "total_gpus": 2,
    "total_tasks": 3,
    "total_task_roles": 2,
    "priority_class": "prod",
    "attempt": 1,
    "config": CONFIG,
}


def task(index: int, task_attempt: int, **fields: Any) -> dict[str, Any]:
    row: dict[str, Any] = {
        "job_attempt": 1,
        "role": "worker",
        "task_index": index,
        "task_attempt": task_attempt,
        "state": "FAILED",
        "node": "n1",
        "ip": "10.0.0.1",
        "ports": {"ssh": [22]},
        "gpus": "0",
        "created_time": 10,
        "launched_time": 11,
        "completed_time": 12,
        "exit_code": 1,
        "exit_spec": SPEC,
        "exit_diagnostics": "bad",
        "note": None,
        "image_digest": None,
    }
    row.update(fields)
    return row


def test_a_job_summary_reads_as_openpai_lists_it() -> None:
    assert views.job_summary(JOB) == {
        "protocolVersion": "2",
        "debugId": FRAME,
        "name": "mnist",
        "username": "alice",
        "jobId": "j1",
        "state": "FAILED",
        "subState": "Completed",
        "executionType": "START",
        "tags": ["a", "b"],
        "retries": 3,
        "retryDetails": {"user": 1, "platform": 2, "resource": 0},
        "retryDelayTime": 500,
        "submissionTime": 1000,
        "createdTime": 1001,
        "launchedTime": 1002,
        "completedTime": 1003,
        "appExitCode": 1,
        "virtualCluster": "vc1",
        "totalGpuNumber": 2,
        "totalTaskNumber": 3,
        "totalTaskRoleNumber": 2,
        "jobPriority": "prod",
    }
    assert views.job_summary({**JOB, "tags": None})["tags"] == []


def worker_status(index: int, task_attempt: int, **row: Any) -> dict[str, Any]:
    fields = task(index, task_attempt, **row)
    return {
        "taskIndex": index,
        "taskUid": task_uid("j1", "worker", index),
        "taskState": fields["state"],
        "retries": task_attempt,
        "accountableRetries": task_attempt,
        "createdTime": 10,
        "launchedTime": 11,
        "completedTime": 12,
        "attemptId": task_attempt,
        "attemptState": fields["state"],
        "currentAttemptCreatedTime": 10,
        "currentAttemptLaunchedTime": 11,
        "currentAttemptCompletedTime": 12,
        "containerId": f"j1-worker-{index}-1-{task_attempt}",
        "containerIp": "10.0.0.1",
        "containerNodeName": fields["node"],
        "containerPorts": {"ssh": [22]},
        "containerGpus": fields["gpus"],
        "containerGpuMilli": 500,
        "containerLog": f"/api/v2/jobs/alice~mnist/attempts/1/taskRoles/worker/taskIndex/{index}/attempts/"
        f"{task_attempt}/logs",
        "containerExitCode": 1,
        "containerExitSpec": SPEC,
        "containerExitDiagnostics": "bad",
        "executorNote": None,
        "imageDigest": None,
    }


WAITING_PS = {
    "taskIndex": 0,
    "taskState": "WAITING",
    "retries": 0,
    "accountableRetries": 0,
    "createdTime": None,
    "launchedTime": None,
    "completedTime": None,
    "attemptId": 0,
    "attemptState": "WAITING",
    "currentAttemptCreatedTime": None,
    "currentAttemptLaunchedTime": None,
    "currentAttemptCompletedTime": None,
    "containerId": None,
    "containerIp": None,
    "containerNodeName": None,
    "containerPorts": {},
    "containerGpus": None,
    "containerGpuMilli": None,
    "containerLog": "/api/v2/jobs/alice~mnist/attempts/1/taskRoles/ps/taskIndex/0/attempts/0/logs",
    "containerExitCode": None,
    "containerExitSpec": None,
    "containerExitDiagnostics": None,
    "executorNote": None,
    "imageDigest": None,
}


def test_a_job_detail_has_each_task_at_its_latest_attempt_and_the_gpus_they_share() -> None:
    attempt = {"attempt": 1, "state": "FAILED", "created_time": 5, "launched_time": 6, "completed_time": 7}
    tasks = [task(0, 0), task(0, 1), task(1, 0, node="n2")]
    detail = views.job_detail(JOB, attempt, tasks)
    assert detail == {
        "name": "mnist",
        "debugId": FRAME,
        "jobId": "j1",
        "tags": ["a", "b"],
        "jobStatus": {
            "username": "alice",
            "state": "FAILED",
            "subState": "Completed",
            "executionType": "START",
            "retries": 3,
            "retryDetails": {"user": 1, "platform": 2, "resource": 0},
            "retryDelayTime": 500,
            "submissionTime": 1000,
            "createdTime": 1001,
            "launchedTime": 1002,
            "completedTime": 1003,
            "attemptId": 1,
            "attemptState": "FAILED",
            "appId": "j1",
            "appCreatedTime": 5,
            "appLaunchedTime": 6,
            "appCompletedTime": 7,
            "appExitCode": 1,
            "appExitSpec": SPEC,
            "appExitDiagnostics": "it broke",
            "appExitMessages": {"container": None, "runtime": None, "launcher": "it broke"},
            "appExitTriggerMessage": "worker 0 failed",
            "appExitTriggerTaskRoleName": "worker",
            "appExitTriggerTaskIndex": 0,
            "appExitType": "USER_FAILURE",
            "pendingReason": None,
            "virtualCluster": "vc1",
            "totalGpuNumber": 2,
            "totalTaskNumber": 3,
            "totalTaskRoleNumber": 2,
        },
        "taskRoles": {
            "worker": {
                "taskRoleStatus": {"name": "worker"},
                "taskStatuses": [worker_status(0, 1), worker_status(1, 0, node="n2")],
            },
            "ps": {"taskRoleStatus": {"name": "ps"}, "taskStatuses": [WAITING_PS]},
        },
        "sharedGpus": [
            {
                "node": "n1",
                "gpu": "0",
                "gpuMilli": 500,
                "tasks": [{"taskRole": "worker", "taskIndex": 0, "gpuMilli": 500}],
            },
            {
                "node": "n2",
                "gpu": "0",
                "gpuMilli": 500,
                "tasks": [{"taskRole": "worker", "taskIndex": 1, "gpuMilli": 500}],
            },
        ],
    }


def test_a_job_detail_without_an_attempt_row_reads_the_job_row() -> None:
    job = {**JOB, "exit_spec": None, "exit_diagnostics": None, "attempt": None, "state": "WAITING"}
    detail = views.job_detail(job, None, [])
    status = detail["jobStatus"]
    assert (status["attemptId"], status["attemptState"], status["appCreatedTime"]) == (0, "WAITING", None)
    assert (status["appLaunchedTime"], status["appCompletedTime"]) == (None, None)
    assert (status["appExitType"], status["appExitMessages"]) == (None, None)
    assert [s["taskState"] for s in detail["taskRoles"]["worker"]["taskStatuses"]] == ["WAITING", "WAITING"]
    assert detail["sharedGpus"] == []
    roles = {"worker": {"taskRoleStatus": {"name": "worker"}, "taskStatuses": []}}
    assert views.job_detail(job, None, [task(0, 0)], roles=roles)["taskRoles"] is roles


def test_tasks_sharing_a_device_add_up_on_it() -> None:
    roles = {
        "worker": {
            "taskStatuses": [
                {
                    "taskIndex": 0,
                    "taskState": "RUNNING",
                    "containerGpuMilli": 250,
                    "containerGpus": "1",
                    "containerNodeName": "n1",
                },
                {
                    "taskIndex": 1,
                    "taskState": "RUNNING",
                    "containerGpuMilli": 500,
                    "containerGpus": "1",
                    "containerNodeName": "n1",
                },
                {
                    "taskIndex": 2,
                    "taskState": "WAITING",
                    "containerGpuMilli": 500,
                    "containerGpus": "1",
                    "containerNodeName": "n1",
                },
                {
                    "taskIndex": 3,
                    "taskState": "RUNNING",
                    "containerGpuMilli": None,
                    "containerGpus": "2",
                    "containerNodeName": "n1",
                },
                {
                    "taskIndex": 4,
                    "taskState": "RUNNING",
                    "containerGpuMilli": 100,
                    "containerGpus": None,
                    "containerNodeName": "n1",
                },
                {
                    "taskIndex": 5,
                    "taskState": "RUNNING",
                    "containerGpuMilli": 100,
                    "containerGpus": "0",
                    "containerNodeName": None,
                },
            ]
        }
    }
    assert views.shared_gpus(roles) == [
        {
            "node": "",
            "gpu": "0",
            "gpuMilli": 100,
            "tasks": [{"taskRole": "worker", "taskIndex": 5, "gpuMilli": 100}],
        },
        {
            "node": "n1",
            "gpu": "1",
            "gpuMilli": 750,
            "tasks": [
                {"taskRole": "worker", "taskIndex": 0, "gpuMilli": 250},
                {"taskRole": "worker", "taskIndex": 1, "gpuMilli": 500},
            ],
        },
    ]


def test_a_task_without_a_shared_gpu_shows_no_share() -> None:
    status = views.task_status({**JOB, "config": None}, task(0, 0))
    assert status["containerGpuMilli"] is None
    assert views.task_status(JOB, task(0, 0, gpus=None))["containerGpuMilli"] is None
    assert views.task_status(JOB, task(0, 0, launched_time=None))["containerId"] is None
    noted = views.task_status(JOB, task(0, 0, note="on the host", image_digest="x@sha256:1", ports=None))
    assert (noted["executorNote"], noted["imageDigest"], noted["containerPorts"]) == (
        "on the host",
        "x@sha256:1",
        {},
    )


def test_an_attempt_of_the_history_lists_its_tasks_briefly() -> None:
    attempt = {
        "attempt": 1,
        "state": "FAILED",
        "sub_state": "AttemptCompleted",
        "created_time": 5,
        "completed_time": 7,
        "exit_code": 1,
        "exit_spec": SPEC,
        "exit_diagnostics": "bad",
        "exit_trigger_message": "m",
        "exit_trigger_role": "worker",
        "exit_trigger_index": 0,
    }
    found = views.job_attempt(JOB, attempt, [task(0, 0)], latest=True)
    assert found == {
        "jobName": "mnist",
        "frameworkName": FRAME,
        "uid": "j1",
        "userName": "alice",
        "state": "FAILED",
        "originState": "AttemptCompleted",
        "attemptIndex": 1,
        "jobStartedTime": 1000,
        "attemptStartedTime": 5,
        "attemptCompletedTime": 7,
        "exitCode": 1,
        "exitPhrase": "ContainerExitCode",
        "exitType": "USER_FAILURE",
        "exitDiagnostics": {"diagnosticsSummary": "bad", "runtime": None, "launcher": "bad"},
        "appExitTriggerMessage": "m",
        "appExitTriggerTaskRoleName": "worker",
        "appExitTriggerTaskIndex": 0,
        "appExitSpec": SPEC,
        "appExitDiagnostics": "bad",
        "appExitMessages": {"container": None, "runtime": None, "launcher": "bad"},
        "totalGpuNumber": 2,
        "totalTaskNumber": 3,
        "totalTaskRoleNumber": 2,
        "taskRoles": {
            "worker": {
                "taskRoleStatus": {"name": "worker"},
                "taskStatuses": [
                    {
                        "taskIndex": 0,
                        "taskState": "FAILED",
                        "containerId": "j1-worker-0-1-0",
                        "containerIp": "10.0.0.1",
                        "containerGpus": "0",
                        "containerLog": LOGS + "/worker/taskIndex/0/attempts/0/logs",
                        "containerExitCode": 1,
                    },
                    {
                        "taskIndex": 1,
                        "taskState": "WAITING",
                        "containerId": None,
                        "containerIp": None,
                        "containerGpus": None,
                        "containerLog": LOGS + "/worker/taskIndex/1/attempts/0/logs",
                        "containerExitCode": None,
                    },
                ],
            },
            "ps": {
                "taskRoleStatus": {"name": "ps"},
                "taskStatuses": [
                    {
                        key: WAITING_PS[key]
                        for key in (
                            "taskIndex",
                            "taskState",
                            "containerId",
                            "containerIp",
                            "containerGpus",
                            "containerLog",
                            "containerExitCode",
                        )
                    }
                ],
            },
        },
        "isLatest": True,
    }
    quiet = views.job_attempt(JOB, {**attempt, "exit_spec": None, "exit_diagnostics": None}, [], latest=False)
    assert (quiet["exitPhrase"], quiet["exitType"], quiet["exitDiagnostics"], quiet["appExitMessages"]) == (
        None,
        None,
        None,
        None,
    )
    assert quiet["isLatest"] is False


def test_attempt_zero_is_read_from_the_job_row_until_scheduled() -> None:
    assert views.first_attempt(JOB) == {
        "job_id": "j1",
        "attempt": 0,
        "state": "FAILED",
        "sub_state": "Completed",
        "created_time": None,
        "launched_time": None,
        "completed_time": 1003,
        "exit_code": 1,
        "exit_spec": SPEC,
        "exit_diagnostics": "it broke",
        "exit_trigger_message": "worker 0 failed",
        "exit_trigger_role": "worker",
        "exit_trigger_index": 0,
    }


def test_a_task_of_the_config_not_placed_yet_is_a_waiting_row() -> None:
    row = views.waiting_task(JOB, 2, "worker", 1)
    assert row is not None
    assert (row["placeholder"], row["job_attempt"], row["role"], row["task_index"], row["state"]) == (
        True,
        2,
        "worker",
        1,
        "WAITING",
    )
    assert views.waiting_task(JOB, 2, "worker", 2) is None
    assert views.waiting_task(JOB, 2, "worker", -1) is None
    assert views.waiting_task(JOB, 2, "chief", 0) is None
    assert views.waiting_task({**JOB, "config": {"taskRoles": {"w": None}}}, 1, "w", 0) is None  # no job
    assert views.waiting_task({**JOB, "config": job_dict({"taskRoles": {"w": {}}})}, 1, "w", 0) is not None
    assert views.waiting_task({**JOB, "config": None}, 1, "w", 0) is None
    assert "taskUid" not in views.waiting_status(JOB, 1, "worker", 0)


def test_how_many_tasks_a_role_lists() -> None:
    asked: tuple[Any, ...] = (3, "4", None, 0, "x", [], 10**12, float("inf"), -5)
    assert [views.placeholders(n) for n in asked] == [
        3,
        4,
        1,
        1,
        1,
        1,
        10_000,
        1,
        1,
    ]
    assert views.role_sizes(JOB, [("worker", 4), ("zeta", 1), ("alpha", 0), ("ps", 0)]) == {
        "worker": 5,
        "ps": 1,
        "alpha": 1,
        "zeta": 2,
    }
    assert views.role_sizes({**JOB, "config": job_dict({"taskRoles": {"a": {}}})}, []) == {"a": 1}
    assert views.role_sizes({**JOB, "config": {"taskRoles": {"a": None}}}, [("b", 0)]) == {"b": 1}  # no job
    assert views.role_sizes({**JOB, "config": None}, [("a", 0), ("a", 2)]) == {"a": 3}
