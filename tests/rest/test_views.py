"""The pure read side: exit specs, states and OpenPAI shapes, without a database or a bus."""

from __future__ import annotations

import hashlib
import uuid
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from libs.protocol.events import FailureInfo
from services.rest.core import states, views
from tests.support.jobs import job_dict


@pytest.mark.parametrize(
    ("exit_code", "state"),
    [(0, "SUCCEEDED"), (-210, "STOPPED"), (-220, "STOPPED"), (1, "FAILED"), (-8000, "FAILED")],
    ids=["success", "job-stop", "attempt-stop", "user-error", "platform-error"],
)
def test_an_exit_code_maps_to_openpai_final_state(exit_code: int, state: str) -> None:
    assert states.state_for_exit(exit_code) == state


def test_the_framework_name_is_openpai_md5_of_user_and_job() -> None:
    assert states.framework_name("alice", "train~1") == hashlib.md5(b"alice~train~1").hexdigest()


@given(
    job_id=st.text(max_size=40), role=st.text(max_size=40), index=st.integers(min_value=0, max_value=10**6)
)
def test_a_task_uid_is_the_name_based_uuid5_of_its_task(job_id: str, role: str, index: int) -> None:
    expected = uuid.uuid5(uuid.NAMESPACE_URL, f"pai:{job_id}:{role}:{index}")
    assert states.task_uid(job_id, role, index) == str(expected)
    assert uuid.UUID(states.task_uid(job_id, role, index)).version == 5


def test_an_exit_spec_carries_the_matched_rule() -> None:
    failure = FailureInfo(
        code=137,
        phrase="ContainerOOMKilled",
        type="permanent",
        reason="out of memory",
        solution="ask for more memoryMB",
        matched_line="Killed",
        issuer="PAI_RUNTIME",
        causer="USER_CONTAINER",
    )
    spec = states.exit_spec(137, failure)
    assert spec == {
        "code": 137,
        "phrase": "ContainerOOMKilled",
        "issuer": "PAI_RUNTIME",
        "causer": "USER_CONTAINER",
        "type": "USER_FAILURE",
        "stage": "RUNNING",
        "behavior": "PERMANENT",
        "reaction": "NEVER_RETRY",
        "reason": "out of memory",
        "repro": ["Killed"],
        "solution": ["ask for more memoryMB"],
    }
    assert states.exit_spec(None, None) is None
    stopped = states.exit_spec(-210, None)
    assert stopped is not None
    assert (stopped["type"], stopped["behavior"]) == ("USER_STOP", "PERMANENT")


def job_row(**overrides: Any) -> dict[str, Any]:
    row: dict[str, Any] = {
        "id": "j1",
        "username": "u",
        "name": "n",
        "virtual_cluster": "vc",
        "priority_class": None,
        "tags": [],
        "state": "WAITING",
        "sub_state": "AttemptCreationPending",
        "execution_type": "START",
        "retries": 0,
        "retries_user": 0,
        "retries_platform": 0,
        "retries_resource": 0,
        "retry_delay_ms": None,
        "submission_time": 1,
        "created_time": 1,
        "launched_time": None,
        "completed_time": None,
        "attempt": None,
        "exit_code": None,
        "exit_spec": None,
        "exit_diagnostics": None,
        "exit_trigger_message": None,
        "exit_trigger_role": None,
        "exit_trigger_index": None,
        "pending_reason": None,
        "total_gpus": 0,
        "total_tasks": 3,
        "total_task_roles": 2,
        "config": job_dict({"taskRoles": {"ps": {"instances": 1}, "worker": {"instances": 2}}}),
    }
    row.update(overrides)
    return row


def test_a_queued_job_lists_every_task_of_its_config_as_waiting() -> None:
    detail = views.job_detail(job_row(), None, [])
    assert list(detail["taskRoles"]) == ["ps", "worker"]
    statuses = detail["taskRoles"]["worker"]["taskStatuses"]
    assert [(s["taskIndex"], s["taskState"], s["containerIp"]) for s in statuses] == [
        (0, "WAITING", None),
        (1, "WAITING", None),
    ]
    assert detail["jobStatus"]["appCreatedTime"] is None
    required = {"username", "virtualCluster", "state", "subState", "executionType", "retries", "createdTime"}
    required |= {"completedTime", "appCreatedTime", "appLaunchedTime", "appCompletedTime", "appExitCode"}
    assert required <= set(detail["jobStatus"])


def test_a_task_has_a_uid_once_it_exists_and_none_while_it_waits_for_placement() -> None:
    placed = {
        **views.waiting_task(job_row(), 0, "worker", 0),  # type: ignore[dict-item]
        "placeholder": False,
        "state": "RUNNING",
        "created_time": 5,
    }
    detail = views.job_detail(job_row(), None, [placed])
    worker = detail["taskRoles"]["worker"]["taskStatuses"]
    assert worker[0]["taskUid"] == states.task_uid("j1", "worker", 0)
    assert isinstance(worker[0]["taskUid"], str)
    # Not placed yet: no uid at all, as OpenPAI's rest-server leaves out a task's undefined
    # instanceUID (never null, never a made-up number).
    assert "taskUid" not in worker[1]
    assert "taskUid" not in detail["taskRoles"]["ps"]["taskStatuses"][0]


def test_a_summary_has_every_field_openpai_requires() -> None:
    summary = views.job_summary(job_row())
    required = {"name", "username", "virtualCluster", "state", "subState", "executionType", "retries"}
    required |= {"createdTime", "completedTime", "appExitCode"}
    assert required <= set(summary)
    assert summary["debugId"] == states.framework_name("u", "n")


def test_shared_gpus_of_a_job_say_how_much_of_each_device_its_tasks_hold() -> None:
    def task(
        index: int, node: str, gpus: str | None, milli: int | None, state: str = "RUNNING"
    ) -> dict[str, Any]:
        return {
            "taskIndex": index,
            "taskState": state,
            "containerNodeName": node,
            "containerGpus": gpus,
            "containerGpuMilli": milli,
        }

    roles = {
        "infer": {
            "taskStatuses": [task(0, "n1", "0", 500), task(1, "n1", "0", 500), task(2, "n1", "1", 500)]
        },
        "train": {"taskStatuses": [task(0, "n1", "2,3", None)]},
        "late": {"taskStatuses": [task(0, "", None, None, "WAITING")]},
    }
    assert views.shared_gpus(roles) == [
        {
            "node": "n1",
            "gpu": "0",
            "gpuMilli": 1000,
            "tasks": [
                {"taskRole": "infer", "taskIndex": 0, "gpuMilli": 500},
                {"taskRole": "infer", "taskIndex": 1, "gpuMilli": 500},
            ],
        },
        {
            "node": "n1",
            "gpu": "1",
            "gpuMilli": 500,
            "tasks": [{"taskRole": "infer", "taskIndex": 2, "gpuMilli": 500}],
        },
    ]
    queued = views.job_detail(job_row(), None, [])
    assert queued["sharedGpus"] == []
