"""The event contracts: round trips, the discriminated union, subjects and the committed catalog."""

from __future__ import annotations

import json

import pytest
from pydantic import ValidationError

from libs.protocol.catalog import CATALOG_PATH, render_catalog
from libs.protocol.events import (
    AlertFired,
    EventBase,
    FailureInfo,
    JobCompleted,
    JobScheduled,
    JobState,
    JobSubmitted,
    NodeReported,
    TaskCompleted,
    TaskPlacement,
    decode_event,
    encode_event,
)
from libs.protocol.subjects import SubjectError, job_id_of, job_subject, node_token
from tests.support.jobs import job_model

EXAMPLES = [
    JobSubmitted(job_id="j1", user="alice", name="mnist.v2", virtual_cluster="default", config=job_model()),
    JobScheduled(
        job_id="j1",
        attempt=0,
        placements=(
            TaskPlacement(role="worker", index=0, node="n1", node_address="10.0.0.1", gpu_indices=(0, 1)),
        ),
    ),
    TaskCompleted(
        job_id="j1",
        attempt=0,
        role="worker",
        index=0,
        exit_code=137,
        failure=FailureInfo(code=137, phrase="ContainerSigKilled", type="transient"),
    ),
    JobCompleted(job_id="j1", attempt=0, state=JobState.SUCCEEDED, exit_code=0),
    NodeReported(
        node_id=node_token("10.0.0.1"), name="10.0.0.1", address="10.0.0.1", cpu=8, memory_mb=1024, gpus=0
    ),
    AlertFired(alert_id="a1", name="JobPendingTooLong", severity="warn"),
]


@pytest.mark.parametrize("event", EXAMPLES, ids=lambda e: e.type)
def test_every_event_decodes_back_to_an_equal_model(event: EventBase) -> None:
    assert decode_event(encode_event(event)) == event


def test_events_are_frozen() -> None:
    with pytest.raises(ValidationError):
        EXAMPLES[0].user = "mallory"  # type: ignore[attr-defined]


def test_an_unknown_event_type_is_refused() -> None:
    with pytest.raises(ValidationError):
        decode_event(json.dumps({"type": "job.exploded", "job_id": "j1"}))


def test_subjects_carry_ids_and_event_types() -> None:
    assert EXAMPLES[2].subject() == "pai.job.j1.task.completed"
    assert job_id_of(EXAMPLES[2].subject()) == "j1"
    assert EXAMPLES[4].subject().startswith("pai.node.n")
    assert "." not in node_token("10.0.0.1")
    assert EXAMPLES[5].subject() == "pai.alert.a1.alert.fired"


def test_a_name_with_dots_never_becomes_a_subject_token() -> None:
    with pytest.raises(SubjectError):
        job_subject("alice~mnist.v2", "job.submitted")


def test_the_committed_catalog_matches_the_models() -> None:
    assert CATALOG_PATH.read_text() == render_catalog(), "run: .venv/bin/python -m libs.protocol.catalog"


def test_the_catalog_lists_every_event_type() -> None:
    schema = json.loads(CATALOG_PATH.read_text())
    mapping = schema["discriminator"]["mapping"]
    assert set(mapping) >= {
        "job.submitted",
        "job.scheduled",
        "job.pending",
        "job.preempting",
        "task.started",
        "task.completed",
        "job.retrying",
        "job.completed",
        "job.stop_requested",
        "node.reported",
        "node.lost",
        "alert.fired",
        "alert.resolved",
    }


def test_a_placement_leaves_out_what_it_does_not_use_and_reads_back_equal() -> None:
    bare = TaskPlacement(role="worker", index=7, node="node-a", node_address="10.0.0.1")
    assert json.loads(bare.model_dump_json()) == {
        "role": "worker",
        "index": 7,
        "node": "node-a",
        "node_address": "10.0.0.1",
    }
    shared = TaskPlacement(
        role="worker", index=8, node="node-a", node_address="10.0.0.1", gpu_indices=(0,), gpu_milli=500
    )
    assert json.loads(shared.model_dump_json())["gpu_milli"] == 500
    for placement in (bare, shared):
        assert TaskPlacement.model_validate_json(placement.model_dump_json()) == placement


def test_the_placement_of_the_largest_job_allowed_stays_far_below_the_bus_limit() -> None:
    """10,000 tasks (the default limit per job) on nodes of realistic names and addresses: NATS'
    own default message limit is 1 MB, the platform's 8 MB."""
    placements = tuple(
        TaskPlacement(
            role="worker",
            index=i,
            node=f"gpu-node-{i // 8:05d}",
            node_address=f"10.{i // 65536}.{i // 256 % 256}.{i % 256}",
        )
        for i in range(10_000)
    )
    encoded = encode_event(JobScheduled(job_id="f" * 32, attempt=0, placements=placements))
    assert len(encoded) < 1_000_000, len(encoded)
    decoded = decode_event(encoded)
    assert isinstance(decoded, JobScheduled)
    assert decoded.placements == placements
