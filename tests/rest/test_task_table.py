"""A detail's task table, brought up to date from changed rows, answers what a full build does."""

from __future__ import annotations

import json
import random
from typing import Any

import pytest

from services.rest.core import views
from services.rest.core.task_table import NOTHING_READ, TaskTable
from tests.support.jobs import job_dict

JOB: dict[str, Any] = {
    "id": "j1",
    "username": "alice",
    "name": "sweep",
    "config": job_dict(
        {
            "taskRoles": {"worker": {"instances": 6}, "ps": {"instances": 2}},
            "extras": {"gpuShare": {"taskRoles": {"worker": {"gpuMilli": 250}}}},
        }
    ),
}
STATES = ("WAITING", "RUNNING", "SUCCEEDED", "FAILED")


def full_build(rows: list[dict[str, Any]], job_attempt: int = 0) -> dict[str, Any]:
    """What the detail's end was before tables: every row read, built and encoded."""
    built = views.task_roles(JOB, job_attempt, rows)
    parsed: dict[str, Any] = {"taskRoles": built, "sharedGpus": views.shared_gpus(built)}
    return parsed


def answer(table: TaskTable) -> dict[str, Any]:
    parsed: dict[str, Any] = json.loads(b"{" + table.encoded(JOB) + b"}")
    return parsed


def task_row(role: str, index: int, task_attempt: int, revision: int, rng: random.Random) -> dict[str, Any]:
    state = rng.choice(STATES)
    ended = state in ("SUCCEEDED", "FAILED")
    return {
        "job_id": "j1",
        "job_attempt": 0,
        "role": role,
        "task_index": index,
        "task_attempt": task_attempt,
        "state": state,
        "node": rng.choice(("node-a", "node-b")),
        "ip": "10.0.0.1",
        "ports": {"http": rng.randrange(20000, 30000)},
        "gpus": rng.choice((None, "0", "1")),
        "pid": rng.randrange(1, 100000),
        "created_time": 1,
        "launched_time": None if state == "WAITING" else 2,
        "completed_time": 3 if ended else None,
        "exit_code": (0 if state == "SUCCEEDED" else 1) if ended else None,
        "exit_spec": None,
        "exit_diagnostics": None,
        "note": rng.choice((None, "runs on the host")),
        "revision": revision,
    }


@pytest.mark.parametrize("seed", range(20))
def test_a_table_brought_up_to_date_step_by_step_answers_as_a_full_build(seed: int) -> None:
    rng = random.Random(seed)
    table = TaskTable(0)
    assert table.revision == NOTHING_READ
    store: dict[tuple[str, int, int], dict[str, Any]] = {}  # the read model's rows by key
    for revision in range(1, 15):
        # One projection transaction: some rows written (new, changed, a retry, a role the config
        # lacks, an index past the config's instances), all stamped with its revision.
        for _ in range(rng.randrange(1, 6)):
            role = rng.choice(("worker", "worker", "ps", "extra"))
            index = rng.randrange(0, 8)
            earlier = [key[2] for key in store if key[:2] == (role, index)]
            task_attempt = max(earlier, default=0) + (1 if earlier and rng.random() < 0.3 else 0)
            store[(role, index, task_attempt)] = task_row(role, index, task_attempt, revision, rng)
        if rng.random() < 0.6:  # not every change is read before the next
            changed = [row for row in store.values() if row["revision"] > table.revision]
            rng.shuffle(changed)
            table.apply(JOB, changed, revision)
            assert table.revision == revision
            assert answer(table) == full_build(list(store.values()))


def test_rows_read_by_two_requests_may_be_applied_in_either_order() -> None:
    rng = random.Random(7)
    older = task_row("worker", 1, 0, 3, rng)
    newer = {**task_row("worker", 1, 0, 4, rng), "state": "SUCCEEDED", "exit_code": 0, "completed_time": 9}
    retried = task_row("worker", 2, 1, 4, rng)
    first_try = task_row("worker", 2, 0, 2, rng)
    table = TaskTable(0)
    table.apply(JOB, [newer, retried], 4)  # the later read lands first
    table.apply(JOB, [older, first_try], 3)
    assert table.revision == 4
    assert answer(table) == full_build([newer, retried, first_try])


def test_a_job_with_no_rows_lists_its_tasks_waiting_and_shares_nothing() -> None:
    table = TaskTable(0)
    table.apply(JOB, [], 0)
    parsed = answer(table)
    assert parsed == full_build([])
    assert [s["taskState"] for s in parsed["taskRoles"]["worker"]["taskStatuses"]] == ["WAITING"] * 6
    assert parsed["sharedGpus"] == []


def test_the_size_counts_what_is_held() -> None:
    rng = random.Random(3)
    table = TaskTable(0)
    table.apply(JOB, [task_row("worker", i, 0, 1, rng) for i in range(6)], 1)

    def statuses(pieces: list[bytes]) -> int:
        return sum(len(piece) for piece in pieces if piece.startswith(b"{"))  # kept or waiting

    pieces = table.pieces(JOB)
    assert b"".join(pieces) == table.encoded(JOB)
    # Each status once (the pieces share them; no joined copy is held), and the list itself.
    assert table.size == statuses(pieces) + 8 * len(pieces)
    table.apply(JOB, [task_row("ps", 0, 0, 2, rng)], 2)  # a placeholder replaced
    pieces = table.pieces(JOB)
    assert table.size == statuses(pieces) + 8 * len(pieces)
