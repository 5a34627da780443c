"""How the REST API words job facts in OpenPAI's vocabulary, and the first row a submission
makes: states and exit specs, task uids, totals, text a database cannot hold."""

from __future__ import annotations

import hashlib
import uuid
from datetime import UTC, datetime, timedelta, timezone
from typing import Any

import pytest

from libs.protocol.events import FailureInfo, JobSubmitted
from libs.protocol.jobs import job_json
from services.rest.core import states, totals
from services.rest.core.text import unstorable
from tests.support.jobs import job_model


@pytest.mark.parametrize(
    ("text", "refused"),
    [
        ("plain", False),
        ("", False),
        ("ünïcødé ✓ 𝄞", False),
        ("\ud7ff\ue000", False),
        ("a\x00b", True),
        ("\ud800", True),
        ("x\udfff", True),
        ("\udc00y", True),
    ],
)
def test_nul_and_lone_surrogates_cannot_be_stored(text: str, refused: bool) -> None:
    assert unstorable(text) is refused


# -- states -----------------------------------------------------------------------------------


def test_a_moment_reads_as_milliseconds_since_the_epoch_whatever_its_zone() -> None:
    moment = datetime(2026, 1, 2, 3, 4, 5, 678_000, tzinfo=UTC)
    assert states.epoch_ms(moment) == 1767323045678
    assert states.epoch_ms(moment.astimezone(timezone(timedelta(hours=9)))) == 1767323045678


@pytest.mark.parametrize(
    ("code", "state"), [(0, "SUCCEEDED"), (-210, "STOPPED"), (-220, "STOPPED"), (1, "FAILED"), (-1, "FAILED")]
)
def test_an_exit_code_means_a_final_state(code: int, state: str) -> None:
    assert states.state_for_exit(code) == state


def test_the_framework_name_is_the_md5_of_user_and_name() -> None:
    assert states.framework_name("alice", "mnist") == hashlib.md5(b"alice~mnist").hexdigest()


@pytest.mark.parametrize(
    ("job_id", "role", "index"), [("j1", "worker", 0), ("a-b", "ps", 12), ("x", "r", 999)]
)
def test_a_tasks_uid_is_the_name_based_uuid_of_its_place(job_id: str, role: str, index: int) -> None:
    assert states.task_uid(job_id, role, index) == str(
        uuid.uuid5(uuid.NAMESPACE_URL, f"pai:{job_id}:{role}:{index}")
    )


def test_an_exit_without_a_code_has_no_spec() -> None:
    assert states.exit_spec(None, None) is None


def test_a_success_is_spelt_out() -> None:
    assert states.exit_spec(0, None) == {
        "code": 0,
        "phrase": "Succeeded",
        "issuer": "USER_CONTAINER",
        "causer": "UNKNOWN",
        "type": "USER_SUCCESS",
        "stage": "COMPLETING",
        "behavior": "UNKNOWN",
        "reaction": "NEVER_RETRY",
        "reason": "",
        "repro": [],
        "solution": [],
    }


@pytest.mark.parametrize(
    ("code", "phrase"), [(-210, "FrameworkStopped"), (-220, "FrameworkAttemptCompletion")]
)
def test_a_stop_is_a_users_stop_never_retried(code: int, phrase: str) -> None:
    assert states.exit_spec(code, None) == {
        "code": code,
        "phrase": phrase,
        "issuer": "USER_CONTAINER",
        "causer": "UNKNOWN",
        "type": "USER_STOP",
        "stage": "RUNNING",
        "behavior": "PERMANENT",
        "reaction": "NEVER_RETRY",
        "reason": "",
        "repro": [],
        "solution": [],
    }


@pytest.mark.parametrize(
    ("code", "phrase"), [(3, "ContainerExitCode"), (-7, "UnknownFailure"), (-1, "UnknownFailure")]
)
def test_an_exit_no_rule_explains_is_unknown_and_retried(code: int, phrase: str) -> None:
    spec = states.exit_spec(code, None)
    assert spec is not None
    assert (spec["code"], spec["phrase"], spec["type"], spec["behavior"], spec["reaction"]) == (
        code,
        phrase,
        "UNKNOWN_FAILURE",
        "UNKNOWN",
        "ALWAYS_RETRY",
    )


def test_an_exit_a_rule_explains_carries_the_rule() -> None:
    failure = FailureInfo(
        code=10,
        phrase="CudaOutOfMemory",
        type="transient",
        reason="the GPU ran out of memory",
        solution="use a smaller batch",
        matched_line="RuntimeError: CUDA out of memory",
        causer="user",
    )
    assert states.exit_spec(137, failure) == {
        "code": 10,
        "phrase": "CudaOutOfMemory",
        "issuer": "PAI_RUNTIME",
        "causer": "user",
        "type": "USER_FAILURE",
        "stage": "RUNNING",
        "behavior": "TRANSIENT",
        "reaction": "RETRY_TO_MAX",
        "reason": "the GPU ran out of memory",
        "repro": ["RuntimeError: CUDA out of memory"],
        "solution": ["use a smaller batch"],
    }


@pytest.mark.parametrize(
    ("issuer", "causer", "kind"),
    [
        ("PAI_RUNTIME", None, "PLATFORM_FAILURE"),
        ("platform", None, "PLATFORM_FAILURE"),
        ("USER_CONTAINER", None, "USER_FAILURE"),
        ("PAI_RUNTIME", "user_code", "USER_FAILURE"),
        (None, None, "UNKNOWN_FAILURE"),
        ("someone", None, "UNKNOWN_FAILURE"),
    ],
)
def test_who_caused_a_failure_decides_its_type(issuer: str | None, causer: str | None, kind: str) -> None:
    failure = FailureInfo(code=1, phrase="P", type="permanent", issuer=issuer, causer=causer)
    spec = states.exit_spec(1, failure)
    assert spec is not None
    assert spec["type"] == kind
    assert spec["issuer"] == (issuer or "PAI_RUNTIME")
    assert spec["causer"] == (causer or "UNKNOWN")
    assert (spec["behavior"], spec["reaction"]) == ("PERMANENT", "NEVER_RETRY")
    assert (spec["repro"], spec["solution"], spec["reason"]) == ([], [], "")


def test_a_success_a_rule_matched_is_still_never_retried() -> None:
    spec = states.exit_spec(0, FailureInfo(code=0, phrase="Done", type="transient"))
    assert spec is not None
    assert (spec["type"], spec["stage"], spec["behavior"], spec["reaction"]) == (
        "USER_SUCCESS",
        "COMPLETING",
        "TRANSIENT",
        "NEVER_RETRY",
    )


def test_an_unknown_rule_type_is_always_retried() -> None:
    spec = states.exit_spec(2, FailureInfo(code=2, phrase="P", type="unknown"))
    assert spec is not None
    assert (spec["behavior"], spec["reaction"]) == ("UNKNOWN", "ALWAYS_RETRY")


# -- totals -----------------------------------------------------------------------------------


def test_totals_count_gpus_tasks_and_roles() -> None:
    config = job_model(
        {
            "taskRoles": {
                "worker": {"instances": 3, "resourcePerInstance": {"gpu": 2}},
                "ps": {"instances": 2, "resourcePerInstance": {"gpu": 0}},
                "chief": {"resourcePerInstance": {"gpu": 1}},
            }
        }
    )
    assert totals.totals(config) == (7, 6, 3)


def test_totals_beyond_a_database_integer_are_held_at_its_largest() -> None:
    huge = 10**30
    config = job_model(
        {"taskRoles": {"a": {"instances": huge, "resourcePerInstance": {"gpu": huge}}, "b": {"instances": 5}}}
    )
    assert totals.totals(config) == (2**63 - 1, 2**63 - 1, 2)
    assert totals.usage_totals(config) == (2**63 - 1, 2**63 - 1)


@pytest.mark.parametrize(
    ("extras", "priority_class", "tags"),
    [
        (None, None, []),
        ({}, None, []),
        ({"hivedScheduler": {"jobPriorityClass": "prod"}, "tags": ["a", 1]}, "prod", ["a", "1"]),
        ({"hivedScheduler": {}, "tags": "a"}, None, []),
        ({"hivedScheduler": None, "tags": None}, None, []),
    ],
)
def test_the_priority_class_and_tags_are_read_from_the_extras(
    extras: dict[str, Any] | None, priority_class: str | None, tags: list[str]
) -> None:
    config = job_model({} if extras is None else {"extras": extras})
    assert totals.priority_class(config) == priority_class
    assert totals.tags(config) == tags


def test_a_submission_makes_the_jobs_first_row() -> None:
    config = {
        "taskRoles": {"w": {"instances": 2, "resourcePerInstance": {"cpu": 1, "gpu": 1}}},
        "extras": {"hivedScheduler": {"jobPriorityClass": "test"}, "tags": ["t"]},
    }
    event = JobSubmitted(
        job_id="j1", user="alice", name="mnist", virtual_cluster="vc1", priority=5, config=job_model(config)
    )
    assert totals.job_row_from_config(event, 1234) == {
        "id": "j1",
        "username": "alice",
        "name": "mnist",
        "virtual_cluster": "vc1",
        "priority": 5,
        "priority_class": "test",
        "tags": ["t"],
        "state": "WAITING",
        "sub_state": "AttemptCreationPending",
        "execution_type": "START",
        "retries": 0,
        "retries_user": 0,
        "retries_platform": 0,
        "retries_resource": 0,
        "submission_time": 1234,
        "created_time": 1234,
        "total_gpus": 2,
        "total_tasks": 2,
        "total_task_roles": 1,
        "total_cpus": 2,  # two instances of one CPU
        "total_gpu_milli": 2000,  # two instances of one GPU
        "config": job_json(event.config),
    }
